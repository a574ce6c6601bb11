"""JSON Schema rewrites and exact rules for schema.py: what it can let through, and how.

What it is: pure functions over one subschema, no state. `split_types` rewrites a list of types
with type-specific keywords into one alternative per type (JSON Schema semantics: such a keyword
applies only to instances of its type, so `{"type": [A, B], kw}` is `anyOf` of A with A's
keywords and B with B's). `integer_range` reads minimum/maximum/exclusiveMinimum/
exclusiveMaximum as an inclusive range of integers and `integer_gbnf` writes the exact GBNF for
it (the converter has no rule for bounds); `Refused` is how the string and number languages
(string.py, number.py) name a keyword they cannot enforce.
What it is not: the fail-closed walk, its messages, or the converter (schema.py, and
llama-cpp-python's llama_grammar); nothing here decides a request is valid on its own.

Integer ranges: canonical JSON integers only (no leading zeros, no "-0", no exponent), at most
16 digits like the converter's `integral-part`, so an open side stops at +-(10^16 - 1). The
range is split by digit count, and each same-length range [a, b] by its first differing digit:
a's first digit followed by "at least a's rest", the digits strictly between followed by any
digits, b's first digit followed by "at most b's rest" (the outer two folded into the middle
when the rest is all 0s or all 9s).

References: json-schema.org 2020-12 validation sections 6.1-6.4; llama.cpp grammars/README.md
(GBNF, {n} repetition).
"""

from __future__ import annotations

import math

MAX_DIGITS = 16  # the converter's integral-part: [0-9] | [1-9] and up to 15 more digits
MAX_INT = 10 ** MAX_DIGITS - 1
BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
# Keywords that apply only to instances of one JSON type (2020-12 and draft-7 names).
TYPE_KEYWORDS = {
    "string": {"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType",
               "contentSchema", "x-copy"},  # x-copy: ours (copy.py)
    "number": {*BOUNDS, "multipleOf", "x-copy"},  # x-copy: on integers only (copy.py)
    "object": {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
               "unevaluatedProperties"},
    "array": {"items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains", "minItems",
              "maxItems", "uniqueItems", "unevaluatedItems"},
}
TYPE_KEYWORDS["integer"] = TYPE_KEYWORDS["number"]
# A list of types beside these keeps today's handling (enum/const imply the types; the rest refuse "type").
NOT_SPLIT = ("$ref", "anyOf", "oneOf", "const", "enum")


class Refused(ValueError):
    """A keyword the grammar cannot enforce here; args: (keyword, why)."""


def split_types(body: dict) -> list[dict] | None:
    """`{"type": [T1, T2], kw...}` -> one subschema per type with the keywords that apply to it; None
    when the node has no list of types, nothing beside it, or a keyword of NOT_SPLIT. A keyword no
    listed type takes, or one of no type (allOf, not, ...), goes to every alternative, where the
    usual checks refuse it."""
    types = body.get("type")
    if not isinstance(types, list) or len(body) == 1 or any(k in body for k in NOT_SPLIT):
        return None
    out = []
    for t in types:
        alt = {"type": t}
        for key, value in body.items():
            owners = [o for o in types if key in TYPE_KEYWORDS.get(o, ())]
            if key != "type" and (t in owners or not owners):
                alt[key] = value
        out.append(alt)
    return out


def integer_range(body: dict) -> tuple[int, int]:
    """The inclusive integer range of a node's bounds, clipped to what the grammar writes; ValueError
    (the message) when a bound is not a finite number or no integer is left."""
    lo, hi = -MAX_INT, MAX_INT
    for key in BOUNDS:
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f'"{key}" must be a finite number (the draft-4 boolean form is not supported)')
        if key == "minimum":
            lo = max(lo, math.ceil(v))
        elif key == "exclusiveMinimum":
            lo = max(lo, math.floor(v) + 1)
        elif key == "maximum":
            hi = min(hi, math.floor(v))
        else:
            hi = min(hi, math.ceil(v) - 1)
    if lo > hi:
        raise ValueError(f"no integer of at most {MAX_DIGITS} digits is in the range")
    return lo, hi


def integer_gbnf(lo: int, hi: int) -> str:
    """GBNF alternatives matching exactly the JSON integers lo..hi (|lo|, |hi| <= MAX_INT, lo <= hi)."""
    assert -MAX_INT <= lo <= hi <= MAX_INT
    alts = []
    if lo < 0:  # the magnitudes of the negative part, never 0: no "-0"
        alts.append('"-" ' + _group(_naturals(max(1, -hi), -lo)))
    if hi >= 0:
        alts.append(_naturals(max(0, lo), hi))
    return " | ".join(alts)


def _naturals(a: int, b: int) -> str:
    """0 <= a <= b, without leading zeros: one alternative per digit count."""
    alts = []
    for n in range(len(str(a)), len(str(b)) + 1):
        first, last = max(a, 10 ** (n - 1) if n > 1 else 0), min(b, 10 ** n - 1)
        alts.append(_same_length(str(first), str(last)))
    return " | ".join(alts)


def _same_length(a: str, b: str) -> str:
    """Digit strings of len(a) from a to b (len(a) == len(b), a <= b), leading zeros as given."""
    k = next((i for i in range(len(a)) if a[i] != b[i]), len(a))  # the common prefix
    if k == len(a):
        return f'"{a}"'
    if k:
        return f'"{a[:k]}" ' + _group(_same_length(a[k:], b[k:]))
    rest, low, high = len(a) - 1, int(a[0]), int(b[0])
    if not rest:
        return _digit(low, high)
    alts = []
    if a[1:] != "0" * rest:  # a's first digit: the rest must be at least a's rest
        alts.append(f'"{a[0]}" ' + _group(_same_length(a[1:], "9" * rest)))
        low += 1
    top = high if b[1:] == "9" * rest else high - 1
    if low <= top:  # any rest
        alts.append(_digit(low, top) + (" [0-9]" if rest == 1 else f" [0-9]{{{rest}}}"))
    if b[1:] != "9" * rest:  # b's first digit: the rest must be at most b's rest
        alts.append(f'"{b[0]}" ' + _group(_same_length("0" * rest, b[1:])))
    return " | ".join(alts)


def _digit(lo: int, hi: int) -> str:
    return f'"{lo}"' if lo == hi else f"[{lo}-{hi}]"


def _group(expr: str) -> str:
    return f"({expr})" if "|" in expr else expr
