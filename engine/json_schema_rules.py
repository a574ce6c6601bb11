"""JSON Schema rewrites and exact rules for json_schema.py: what it can let through, and how.

What it is: pure functions over one subschema, no state. `split_types` rewrites a list of types
with type-specific keywords into one alternative per type (JSON Schema semantics: such a keyword
applies only to instances of its type, so `{"type": [A, B], kw}` is `anyOf` of A with A's
keywords and B with B's). `integer_range` reads minimum/maximum/exclusiveMinimum/
exclusiveMaximum as an inclusive range of integers and `integer_gbnf` writes the exact GBNF for
it (the converter has no rule for bounds). `pattern_implied` says when a "format" already
implies the "pattern" beside it, from a small table checked in the tests against the
converter's own format rules. `pattern_problem` says whether the converter translates a regex
exactly.
What it is not: the fail-closed walk, its messages, or the converter (json_schema.py, and
llama-cpp-python's llama_grammar); nothing here decides a request is valid on its own.

Integer ranges: canonical JSON integers only (no leading zeros, no "-0", no exponent), at most
16 digits like the converter's `integral-part`, so an open side stops at +-(10^16 - 1). The
range is split by digit count, and each same-length range [a, b] by its first differing digit:
a's first digit followed by "at least a's rest", the digits strictly between followed by any
digits, b's first digit followed by "at most b's rest" (the outer two folded into the middle
when the rest is all 0s or all 9s).

References: json-schema.org 2020-12 validation sections 6.1-6.4 and 7 (format); RFC 3339 and
RFC 4122 for the format shapes; llama.cpp grammars/README.md (GBNF, {n} repetition).
"""

from __future__ import annotations

import math
import re

MAX_DIGITS = 16  # the converter's integral-part: [0-9] | [1-9] and up to 15 more digits
MAX_INT = 10 ** MAX_DIGITS - 1
BOUNDS = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
# Keywords that apply only to instances of one JSON type (2020-12 and draft-7 names).
TYPE_KEYWORDS = {
    "string": {"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType",
               "contentSchema"},
    "number": {*BOUNDS, "multipleOf"},
    "object": {"properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
               "unevaluatedProperties"},
    "array": {"items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains", "minItems",
              "maxItems", "uniqueItems", "unevaluatedItems"},
}
TYPE_KEYWORDS["integer"] = TYPE_KEYWORDS["number"]
# A list of types beside these keeps today's handling (enum/const imply the types; the rest refuse "type").
NOT_SPLIT = ("$ref", "anyOf", "oneOf", "const", "enum")


def _anchorings(full: list[str], prefix: list[str]) -> frozenset[str]:
    """`full` regexes match every string of the format whole, `prefix` ones a start of it."""
    return frozenset([f"^{x}$" for x in full] + [f"{x}$" for x in full] + [f"^{x}" for x in full + prefix]
                     + full + prefix)


_D4, _D2 = ("[0-9]{4}", r"\d{4}"), ("[0-9]{2}", r"\d{2}")
_HEX = ("[0-9a-fA-F]", "[0-9A-Fa-f]")
# Patterns each format's grammar implies (llama_grammar.STRING_FORMAT_RULES, PRIMITIVE_RULES["uuid"]):
# date is 4 digits "-" 2 digits "-" 2 digits; time starts with 2 digits ":" 2 digits ":" 2 digits;
# date-time is date "T" time; uuid is 8-4-4-4-12 hex digits of either case.
IMPLIED_PATTERNS = {
    "date": _anchorings([f"{y}-{m}-{m}" for y, m in zip(_D4, _D2)], []),
    "time": _anchorings([], [f"{d}:{d}:{d}" for d in _D2]),
    "date-time": _anchorings([], [f"{y}-{d}-{d}" + "T" + f"{d}:{d}:{d}" for y, d in zip(_D4, _D2)]
                             + [f"{y}-{d}-{d}" for y, d in zip(_D4, _D2)]),
    "uuid": _anchorings(["-".join(f"{h}{{{n}}}" for n in (8, 4, 4, 4, 12)) for h in _HEX], []),
}


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


def pattern_implied(fmt, pattern) -> bool:
    """True when every string the converter's grammar for `fmt` writes matches `pattern`."""
    return isinstance(pattern, str) and pattern in IMPLIED_PATTERNS.get(fmt, ())


def pattern_problem(p: str, max_repeat: int) -> str | None:
    """Why the converter cannot turn this regex exactly into JSON string content, or None. In:
    ^...$ around literal characters, classes like [A-Z0-9_-], (groups), | inside a group, one
    quantifier (* + ? {n} {n,} {n,m}) after each. Out: escapes, "." and [^...] (they would let '"'
    or '\\' into the string), (?...)."""
    if len(p) < 2 or p[0] != "^" or p[-1] != "$":
        return "must be anchored as ^...$"
    try:
        re.compile(p)
    except re.error as e:
        return f"not a valid regular expression ({e})"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in p):
        return "lone surrogates cannot be written to a grammar"
    body, i, depth, atom = p[1:-1], 0, 0, False  # atom: a quantifier may follow
    while i < len(body):
        c = body[i]
        if c == "\\":
            return "backslash escapes are not supported (write [.] for \\., [0-9] for \\d)"
        if c in '.^$"]}' or ord(c) < 0x20:
            return f"{c!r} is not supported here"
        if c == "(":
            if body[i + 1:i + 2] == "?":
                return "(?...) groups are not supported"
            depth, atom = depth + 1, False
        elif c == ")":
            depth, atom = depth - 1, True
        elif c == "|":
            if depth == 0:
                return "| outside a group is not supported (write ^(a|b)$)"
            atom = False
        elif c == "[":
            j = body.find("]", i + 1)
            chars = body[i + 1:j]
            if not chars or chars[0] == "^" or "[" in chars:
                return "only non-empty, non-negated character classes are supported"
            for m in re.finditer(r"(.)-(.)|(.)", chars, re.S):
                lo, hi = (m[1], m[2]) if m[1] else (m[3], m[3])
                if ord(lo) < 0x20 or any(ord(lo) <= ord(q) <= ord(hi) for q in '"\\'):
                    return f"the class [{chars}] admits '\"', '\\' or a control character"
            i, atom = j, True
        elif c in "*+?{":
            m = re.match(r"\{(\d+)(,(\d*))?\}", body[i:]) if c == "{" else None
            if not atom or (c == "{" and not m):
                return f"{c!r} must quantify a character, class or group, once"
            if m and max(int(m[1]), int(m[3] or 0)) > max_repeat:
                return f"repetition counts above {max_repeat} are not supported"
            i, atom = i + (m.end() - 1 if m else 0), False
        else:
            atom = True
        i += 1
    return None
