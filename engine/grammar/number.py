"""A number node's language for schema.py: bounds on "number", and "multipleOf".

What it is: `language(body)` returns the DFA of the JSON numbers a node with "type": "number"
(and bounds or an integer multipleOf) or "type": "integer" with multipleOf may take, built from
small regular languages and intersected (regex.py, automaton.py). Integers with bounds alone keep the exact
range rule of rules.integer_gbnf.
What it is not: the walk (schema.py) or the automata (regex.py, automaton.py).

Numbers written, stricter than the schema so output stays valid: no exponent, no leading zeros,
no "-0" (nor -0.0), at most 15 digits in all, so that two different numbers written are two
different doubles (DBL_DIG) and jsonschema, which compares the parsed float, agrees with the
decimal comparison made here; a bound with more than 15 significant digits is refused. A bound
is read as the shortest decimal of its double (repr), which is the double itself: x >= 0.1 holds
for the float of every decimal >= 0.1, as rounding is monotonic.
A bound: x >= L for L > 0 is "integer part > L's" or "integer part = L's and the fraction digits
>= L's", digit by digit (the first differing digit decides; a longer fraction that starts with
L's is larger unless all zeros). Negative numbers mirror it on the magnitude.
multipleOf: an integer m <= MAX_MULTIPLE, by the residue of the digits read so far (r -> 10r + d
mod m), on integer spellings only. jsonschema tests a float multipleOf in floating point (0.07
is not a multiple of 0.01 there), so a non-integer multipleOf is refused.
"""

from __future__ import annotations

import math
from decimal import Decimal

from . import automaton
from . import regex
from . import rules

MAX_SIGNIFICANT = 15
MAX_MULTIPLE = 1000
_DIGITS = "[0-9]"
NUMBER = "^-?(0|[1-9][0-9]*)([.][0-9]+)?$"
INTEGER = f"^-?(0|[1-9][0-9]{{0,{rules.MAX_DIGITS - 1}}})$"
FIFTEEN = f"^[^0-9]*([0-9][^0-9]*){{1,{MAX_SIGNIFICANT}}}$"  # digits in all
NO_MINUS_ZERO = "^([^-].*|-.*[1-9].*)$"
NOTHING = "[^\\x00-\\U0010ffff]"  # an empty class: no string



def needs_language(body: dict) -> bool:
    t = body.get("type")
    return (t == "number" and any(k in body for k in (*rules.BOUNDS, "multipleOf"))) or \
        (t == "integer" and "multipleOf" in body)


def language(body: dict) -> automaton.DFA:
    integer = body.get("type") == "integer"
    parts = [INTEGER if integer else NUMBER, NO_MINUS_ZERO] + ([] if integer else [FIFTEEN])
    dfa = regex.search_dfa(parts[0])
    try:
        for p in parts[1:]:
            dfa = automaton.intersect(dfa, regex.search_dfa(p))
        if integer:  # the exact range rule, read as the regex it is
            lo, hi = rules.integer_range(body)
            exact = "^(" + rules.integer_gbnf(lo, hi).replace('"', "").replace(" ", "") + ")$"
            dfa = automaton.intersect(dfa, regex.search_dfa(exact))
        else:
            for key in rules.BOUNDS:
                if key in body:
                    dfa = automaton.intersect(dfa, regex.search_dfa(_bound(key, body[key])))
        if "multipleOf" in body:
            dfa = automaton.intersect(dfa, regex.search_dfa(INTEGER))
            dfa = automaton.intersect(dfa, _multiples(_multiple(body["multipleOf"])))
    except ValueError as e:
        if isinstance(e, rules.Refused):
            raise
        if isinstance(e, automaton.TooComplex):
            key = "multipleOf" if "multipleOf" in body else next(k for k in rules.BOUNDS if k in body)
            raise rules.Refused(key, "too complex for a grammar") from None
        raise rules.Refused(next(k for k in rules.BOUNDS if k in body), str(e)) from None
    if automaton.is_empty(dfa):
        raise rules.Refused(next((k for k in (*rules.BOUNDS, "multipleOf") if k in body)), "no number can match")
    return dfa


def _multiple(m) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0:
        raise rules.Refused("multipleOf", "must be a positive number")
    if m != int(m):
        raise rules.Refused("multipleOf", f"{m} is not an integer: jsonschema checks it in floating point "
                            "(0.07 is not a multiple of 0.01 there), so count the smallest unit (cents) in an integer")
    if m > MAX_MULTIPLE:
        raise rules.Refused("multipleOf", f"above {MAX_MULTIPLE} (the grammar grows with it)")
    return int(m)


def _multiples(m: int) -> automaton.DFA:
    """An optional "-", then digits whose value is 0 mod m (the shape comes from the other parts).
    State 0 is the start, 1 + r the residue r of the digits so far."""
    rows = []
    for r in range(m):
        by: dict[int, list] = {}
        for d in range(10):
            by.setdefault(1 + (10 * r + d) % m, []).append((ord("0") + d, ord("0") + d))
        rows.append(tuple((automaton.charset(cs), t) for t, cs in sorted(by.items())))
    start = (((ord("-"), ord("-")),), 1), *rows[0]
    return automaton.minimal([start, *rows], {1})  # 1000 residues -> 4 states: "ends in 000"


def _bound(key: str, value) -> str:
    """The regex of the numbers on the right side of one bound (sign and magnitude)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise rules.Refused(key, "must be a finite number (the draft-4 boolean form is not supported)")
    v = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if len(v.normalize().as_tuple().digits) > MAX_SIGNIFICANT:
        raise rules.Refused(key, f"{value!r} has more than {MAX_SIGNIFICANT} significant digits; HINT: round it")
    mag, strict = abs(v), key.startswith("exclusive")
    upper = key in ("maximum", "exclusiveMaximum")
    any_mag, positive = "[0-9.]+", _greater(Decimal(0), True)
    if not upper:  # x >= v (x > v)
        if v > 0 or (v == 0 and strict):
            return f"^({_greater(mag, strict)})$"
        if v == 0:
            return f"^({any_mag})$"
        return f"^({any_mag}|-({_less(mag, strict)}))$"
    if v > 0 or (v == 0 and not strict):  # x <= v (x < v)
        return f"^({_less(mag, strict)}|-({positive}))$"
    if v == 0:
        return f"^-({positive})$"
    return f"^-({_greater(mag, strict)})$"


def _split(mag: Decimal) -> tuple[int, str]:
    """Integer part, fraction digits without trailing zeros."""
    text = format(mag, "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _greater(mag: Decimal, strict: bool) -> str:
    """Magnitudes >= mag (> mag when strict)."""
    a, b = _split(mag)
    alts = [_ints(a + 1, rules.MAX_INT) + "([.][0-9]+)?"] if a < rules.MAX_INT else []
    if b:
        alts.append(f"{a}[.]({_frac_more(b, strict)})")
    elif strict:
        alts.append(f"{a}[.][0-9]*[1-9][0-9]*")
    else:
        alts.append(f"{a}([.][0-9]+)?")
    return "|".join(alts)


def _less(mag: Decimal, strict: bool) -> str:
    """Magnitudes <= mag (< mag when strict)."""
    a, b = _split(mag)
    alts = [_ints(0, a - 1) + "([.][0-9]+)?"] if a > 0 else []
    if b:
        alts.append(f"{a}([.]({_frac_less(b, strict)}))?")
    elif not strict:
        alts.append(f"{a}([.]0+)?")
    return "|".join(alts) or NOTHING


def _frac_more(b: str, strict: bool) -> str:
    """Fraction digits f (non-empty) with 0.f >= 0.b (> when strict); b has no trailing zero."""
    alts = [f"{b[:i]}[{int(c) + 1}-9][0-9]*" for i, c in enumerate(b) if c != "9"]
    alts.append(f"{b}[0-9]*[1-9][0-9]*" if strict else f"{b}[0-9]*")
    return "|".join(alts)


def _frac_less(b: str, strict: bool) -> str:
    """Fraction digits f (non-empty) with 0.f <= 0.b (< when strict); b has no trailing zero."""
    alts = [f"{b[:i]}[0-{int(c) - 1}][0-9]*" for i, c in enumerate(b) if c != "0"]
    alts += [b[:i] for i in range(1, len(b))]
    if not strict:
        alts.append(f"{b}0*")
    return "|".join(alts)


def _ints(lo: int, hi: int) -> str:
    """The integers lo..hi (clipped to what the grammar writes) as a regex."""
    hi = min(hi, rules.MAX_INT)
    return "(" + rules.integer_gbnf(lo, hi).replace('"', "").replace(" ", "") + ")" if lo <= hi else NOTHING
