"""A string node's language for schema.py: "pattern", "format" and length bounds together.

What it is: `language(body)` returns the DFA of the strings a node with "type": "string" may take
when the grammar must enforce more than one of pattern / format / minLength / maxLength (or a
format the converter has no rule for), or None when llama-cpp-python's converter already writes
exactly the right rule (a format alone, or a format whose language lies inside the pattern's).
The rule is general, decided on the languages and never on the regex text: the enforced language
is the intersection of every keyword's, and when that equals a format's own language the
converter's format rule is used as is.
What it is not: the fail-closed walk (schema.py) nor the regex automata (regex.py, automaton.py).

Formats as regexes: time and uuid are the languages of the converter's own rules
(llama_grammar.STRING_FORMAT_RULES, PRIMITIVE_RULES["uuid"]; tests check both ways with the
automata), so they are enforced identically whichever path takes them. date is a calendar date
(years 0001-9999, 30-day months, February's 29th in leap years only), what jsonschema's format
check and Python's date accept; the converter's rule allows 2026-02-31, so date and date-time
are always ours (date-time's time part as the converter's). email and ipv4 have no converter
rule; ours are narrower than the standards (email: RFC 5321 dot-atom
local part and letter-digit-hyphen domain labels, at least two labels, no quoted forms or
address literals, no length limits; ipv4: RFC 2673's dotted-quad, no leading zeros, as Python's
ipaddress and jsonschema's checker read it), so every string written is valid.
"""

from __future__ import annotations

from . import automaton
from . import regex
from . import rules

_YEAR = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # 0001-9999, as Python's date
_LEAP = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"  # 0000 is no year
_DATE = (f"({_YEAR}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
         f"|02-(0[1-9]|1[0-9]|2[0-8]))|{_LEAP}-02-29)")
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{3})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
FORMAT_REGEX = {  # whole-string regexes
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}T{_TIME}$",
    "uuid": "^" + "-".join(f"[0-9a-fA-F]{{{n}}}" for n in (8, 4, 4, 4, 12)) + "$",
    "email": f"^{_ATOM}([.]{_ATOM})*@{_LABEL}([.]{_LABEL})+$",
    "ipv4": f"^{_OCTET}([.]{_OCTET}){{3}}$",
}
CONVERTER_FORMATS = {"time", "uuid"}  # the converter writes these exactly itself
KEYWORDS = ("pattern", "format", "minLength", "maxLength")



def needs_language(body: dict) -> bool:
    """True when this string node goes through `language` rather than one converter rule."""
    fmt = body.get("format")
    return "pattern" in body or (fmt is not None and (fmt not in CONVERTER_FORMATS or "minLength" in body
                                                       or "maxLength" in body))


def language(body: dict, max_length: int) -> automaton.DFA | None:
    """The node's language, or None when the converter's rule for its format is exact."""
    parts = []
    fmt = body.get("format")
    if fmt is not None:
        if fmt not in FORMAT_REGEX:
            raise rules.Refused("format", f"{fmt!r} has no grammar (supported: {', '.join(FORMAT_REGEX)})")
        parts.append(("format", regex.search_dfa(FORMAT_REGEX[fmt])))
    if "pattern" in body:
        pattern = body["pattern"]
        if any(0xD800 <= ord(c) <= 0xDFFF for c in pattern):
            raise rules.Refused("pattern", "lone surrogates cannot be written to a grammar")
        try:
            parts.append(("pattern", regex.search_dfa(pattern)))
        except regex.Unsupported as e:
            raise rules.Refused("pattern", f"{pattern!r}: {e}") from None
        except automaton.TooComplex:
            raise rules.Refused("pattern", f"{pattern!r} is too complex for a grammar") from None
    lo, hi = int(body.get("minLength", 0)), body.get("maxLength")
    for key, n in (("minLength", lo), ("maxLength", hi)):
        if n is not None and n > max_length:
            raise rules.Refused(key, f"above {max_length} (the grammar grows with it)")
    if hi is not None and lo > int(hi):
        raise rules.Refused("minLength", "is above maxLength: no string can match")
    if lo or hi is not None:
        parts.append(("minLength" if lo else "maxLength", automaton.length_dfa(lo, None if hi is None else int(hi))))
    enforced = parts[0][1]
    try:
        for key, part in parts[1:]:
            enforced = automaton.intersect(enforced, part)
            if automaton.is_empty(enforced):
                others = ", ".join(k for k, _ in parts if k != key)
                raise rules.Refused(key, f"no string matches it together with {others}")
    except automaton.TooComplex:
        raise rules.Refused(parts[-1][0], f"together with {parts[0][0]} it is too complex for a grammar") from None
    if automaton.is_empty(enforced):
        raise rules.Refused(parts[0][0], "no string matches it")
    if fmt in CONVERTER_FORMATS and automaton.contains(enforced, parts[0][1]):
        return None  # every string of the format passes the rest: the converter's rule is exact
    return enforced
