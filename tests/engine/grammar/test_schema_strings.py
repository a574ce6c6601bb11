"""response_format -> grammar for strings: a "pattern" is enforced exactly or refused by name, and a
pattern beside a format (and lengths) enforces the strings all of them accept. What compiles is run
through llama.cpp's own grammar sampler over a byte vocabulary (grammar_vocab.py); the formats'
regexes are checked against the converter's own rules and jsonschema's format checks.
No model, no threads; test_schema.py has the rest of the walk, test_regex.py the automata.
"""

import json
import random
import re

import jsonschema
import pytest
from llama_cpp.llama_grammar import PRIMITIVE_RULES, STRING_FORMAT_RULES

from engine.grammar import automaton, regex
from engine.grammar.schema import compile_response_format
from engine.grammar.string import FORMAT_REGEX
from grammar_vocab import accepts, js, refused


# --- patterns: regular languages, or refused -------------------------------------------------------

@pytest.mark.parametrize("pattern, fragment", [
    ("^(a)\\1$", "backreferences"),
    ("^a(?=b)", "lookaround"),
    ("(?<!x)y", "lookaround"),
    ("\\bword\\b", "\\b"),
    ("(?i)^abc$", "flags"),
    ("^(?i:a)b$", "flags"),
    ("^(?>ab)$", "atomic"),
    ("^a*+$", "possessive"),
    ("^a{2001}$", "above 2000"),
    ("^a^b", "no string matches it"),
    ("^\ud800$", "surrogates"),
    ("^((a|b)*a(a|b){12})$", "too complex"),
])
def test_patterns_outside_regular_languages_are_refused(pattern, fragment):
    e = refused(js({"type": "string", "pattern": pattern}))
    assert 'keyword "pattern"' in e.message and fragment in e.message, e.message


@pytest.mark.parametrize("pattern, good, bad", [
    ("^[A-Z]{2}-[0-9]{4}$", ["AB-1234"], ["AB-123", "ab-1234", "AB-12345"]),
    ("^(red|navy)( blue)?$", ["red", "navy blue"], ["blue", "red navy"]),
    ("^[a-z_][a-z0-9_-]*$", ["_x-1", "a"], ["1a", ""]),
    ("^café [0-9]?$", ["café 1", "café "], ["cafe 1"]),
    ("^\\d{3}-\\d{4}$", ["555-1234", "٣٣٣-1234"], ["5551234", "555-12345"]),  # \\d: Unicode digits, as re
    ("^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$", ["a.b@shop.tw", 'x"y@z.io'], ["a@b", "a b@c.io", "a@b@c.io"]),
    ("^a.c$", ["abc", "a\"c", "a\\c", "a日c"], ["a\nc", "ac"]),  # "." is anything but a newline
    ("ORD", ["ORD", "my ORD-7", "ORDER"], ["ord", ""]),  # unanchored: re.search finds it anywhere
    ("^a|b$", ["ax", "xb", "a"], ["xa", "bx"]),  # a top-level | splits the anchors, as re reads it
    ("^\\+?[0-9 ()-]{7,15}$", ["+886 2 1234-5678", "(02) 1234"], ["+886", "12a4567"]),
    ("^x\"\\\\\n$", ['x"\\\n'], ["x"]),  # '"', '\\' and a newline, written as JSON escapes
    ("^a{$", ["a{"], ["a"]),  # a { that starts no count is a literal, as re reads it
])
def test_patterns_are_enforced_exactly(vocab, pattern, good, bad):
    grammar = compile_response_format(js({"type": "string", "pattern": pattern})).grammar
    for s in good + bad:
        assert bool(re.search(pattern, s)) == (s in good), s  # the cases themselves say what re says
    for s in good:
        assert accepts(vocab, grammar, json.dumps(s, ensure_ascii=False)), s
    for s in bad:
        assert not accepts(vocab, grammar, json.dumps(s, ensure_ascii=False)), s


# --- a pattern beside a format: only one the format implies ------------------------------------

_RULES = {k: v.content for rules in (PRIMITIVE_RULES, STRING_FORMAT_RULES) for k, v in rules.items()}
_RULES["space"] = '" "?'  # the converter's SPACE_RULE
_TOKEN = re.compile(r'\s*("(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|[()|?]|[a-z-]+)')


def _parse(text: str, i: int = 0):
    """The GBNF of the converter's format rules (literals, classes, names, groups, |, ?) ->
    ("alt", [("seq", [item...])...]), an item ("lit", s) | ("cls", chars) | ("ref", name) | ("opt", item)."""
    alts, seq = [], []
    while i < len(text) and text[i:].strip():
        m = _TOKEN.match(text, i)
        tok, i = m[1], m.end()
        if tok == ")":
            break
        if tok == "|":
            alts.append(("seq", seq))
            seq = []
        elif tok == "?":
            seq[-1] = ("opt", seq[-1])
        elif tok == "(":
            group, i = _parse(text, i)
            seq.append(group)
        elif tok[0] == '"':
            seq.append(("lit", json.loads(tok)))
        elif tok[0] == "[":
            chars = [chr(c) for a, b, one in re.findall(r"(.)-(.)|(.)", tok[1:-1])
                     for c in (range(ord(a), ord(b) + 1) if a else [ord(one)])]
            seq.append(("cls", chars))
        else:
            seq.append(("ref", tok))
    return ("alt", alts + [("seq", seq)]), i


def _generate(node, choose) -> str:
    kind, arg = node
    if kind == "alt":
        return _generate(choose(arg), choose)
    if kind == "seq":
        return "".join(_generate(item, choose) for item in arg)
    if kind == "opt":
        return choose(["", _generate(arg, choose)])
    if kind == "cls":
        return choose(arg)
    return arg if kind == "lit" else _generate(_parse(_RULES[arg])[0], choose)


def _regex(node) -> str:
    """A tree of _parse as a Python regex (the rules use nothing a regex lacks)."""
    kind, arg = node
    if kind == "alt":
        return "(" + "|".join(map(_regex, arg)) + ")"
    if kind == "seq":
        return "".join(map(_regex, arg))
    if kind == "opt":
        return f"({_regex(arg)})?"
    if kind == "cls":
        return "[" + "".join(map(re.escape, arg)) + "]"
    return re.escape(arg) if kind == "lit" else _regex(_parse(_RULES[arg])[0])


@pytest.mark.parametrize("fmt, rule", [("time", "time-string"), ("uuid", "uuid")])
def test_each_format_regex_is_the_converters_own_rule(vocab, fmt, rule):
    """The same language both ways (automata), so a format is enforced alike whichever path takes
    it; strings drawn from the converter's rule text (every first choice, every last, 3000 at
    random) pass llama.cpp through both grammars (the converter's rule, and our automaton's)."""
    tree, rng = _parse(_RULES[rule])[0], random.Random(fmt)
    theirs = regex.search_dfa("^" + _regex(tree) + "$")
    ours = regex.search_dfa('^"' + FORMAT_REGEX[fmt][1:-1] + '" ?$')  # the JSON string and its space
    assert automaton.contains(theirs, ours) and automaton.contains(ours, theirs)
    texts = {_generate(tree, lambda xs: xs[0]), _generate(tree, lambda xs: xs[-1])}
    texts |= {_generate(tree, rng.choice) for _ in range(3000)}
    format_only = compile_response_format(js({"type": "string", "format": fmt})).grammar
    dfa = "\n".join(automaton.to_gbnf(regex.search_dfa(FORMAT_REGEX[fmt]), "f"))
    ours_gbnf = f'root ::= "\\"" f "\\"" space\nspace ::= " "?\n{dfa}\n'
    for text in sorted(texts)[::150]:
        assert accepts(vocab, format_only, text) and accepts(vocab, ours_gbnf, text), text


def test_dates_are_calendar_dates(vocab):
    """Inside the converter's date rule, and exactly what jsonschema's date check (Python's date)
    accepts, over every month and day spelling of years around each leap-year rule."""
    theirs = regex.search_dfa("^" + _regex(_parse(_RULES["date"])[0]) + "$")
    ours = regex.search_dfa(FORMAT_REGEX["date"])
    assert automaton.contains(theirs, ours) and not automaton.contains(ours, theirs)
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    years = [*range(0, 12), *range(1896, 1905), *range(1999, 2002), *range(2096, 2105), *range(2399, 2402), 9999]
    for y in years:
        for m in range(0, 14):
            for d in range(0, 33):
                text = f"{y:04d}-{m:02d}-{d:02d}"
                assert ours.matches(text) == checker.conforms(text, "date"), text
    grammar = compile_response_format(js({"type": "string", "format": "date-time"})).grammar
    assert accepts(vocab, grammar, '"2024-02-29T12:00:00Z"') and not accepts(vocab, grammar, '"2026-02-29T12:00:00Z"')
    grammar = compile_response_format(js({"type": "string", "format": "date"})).grammar
    assert accepts(vocab, grammar, '"2026-12-31"') and not accepts(vocab, grammar, '"2026-11-31"')




@pytest.mark.parametrize("fmt, pattern", [
    ("date", "^\\d{4}-\\d{2}-\\d{2}$"), ("date", "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"), ("date", "[0-9]{4}-"),
    ("date", "^(19|20)?[0-9]{2}"), ("date", "^.{10}$"), ("date", "-"),
    ("time", "^\\d{2}:\\d{2}:\\d{2}"), ("time", "^([01]\\d|2[0-3]):"), ("date-time", "T"),
    ("date-time", "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?(Z|[+-]\\d{2}:\\d{2})$"),
    ("uuid", "^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$"), ("uuid", "^[^g-z]+$"),
])
def test_a_pattern_every_string_of_the_format_matches_keeps_the_formats_rule(fmt, pattern):
    """Decided on the languages (format inside pattern), never on the pattern's text."""
    grammar = compile_response_format(js({"type": "string", "format": fmt})).grammar
    assert compile_response_format(js({"type": "string", "format": fmt, "pattern": pattern})).grammar == grammar


@pytest.mark.parametrize("schema, good, bad", [
    # stricter than the format: the strings both accept
    ({"format": "date", "pattern": "^20[0-9]{2}-[0-9]{2}-[0-9]{2}$"}, ["2026-01-16"], ["1999-01-16", "2026-13-01"]),
    ({"format": "date", "pattern": "-(0[1-9]|1[0-2])-"}, ["2026-12-31"], ["2026-00-31"]),
    ({"format": "time", "pattern": "Z$"}, ["12:00:00Z", "23:59:59.123Z"], ["12:00:00+08:00"]),
    ({"format": "date-time", "pattern": "^[0-9-]+T[0-9:]+\\+08:00$"}, ["2026-01-16T09:30:00+08:00"],
     ["2026-01-16T09:30:00Z", "2026-01-16T09:30:00.5+08:00"]),
    ({"format": "uuid", "pattern": "^[0-9a-f-]+$"}, ["123e4567-e89b-12d3-a456-426614174000"],
     ["123E4567-E89B-12D3-A456-426614174000"]),
    # neither contains the other: the intersection
    ({"format": "date", "pattern": "^[0-9]{4}-0[1-6]"}, ["2026-06-30"], ["2026-07-01", "2026-06-3"]),
    # a format and a length
    ({"format": "time", "maxLength": 9}, ["12:00:00Z"], ["12:00:00.000Z", "12:00:00+08:00"]),
    # formats with no converter rule
    ({"format": "email"}, ["order@shop.com.tw", "a.b+c@x-y.io"],
     ["a@b", "a..b@c.io", ".a@b.io", "a@-b.io", "a b@c.io"]),
    ({"format": "email", "pattern": "@shop\\.tw$"}, ["kim@shop.tw"], ["kim@shop.com"]),
    ({"format": "ipv4"}, ["192.168.0.1", "0.0.0.0", "255.255.255.255"], ["256.1.1.1", "01.2.3.4", "1.2.3"]),
    # a pattern and lengths
    ({"pattern": "^[A-Z0-9]+$", "minLength": 2, "maxLength": 4}, ["AB", "A1B2"], ["A", "ABCDE", "ab"]),
    ({"pattern": "^[a-z]*$", "minLength": 1}, ["a"], [""]),
    ({"maxLength": 3, "pattern": "x"}, ["x", "axb"], ["ab", "axbc"]),
])
def test_string_keywords_together_enforce_the_strings_all_accept(vocab, schema, good, bad):
    c = compile_response_format(js({"type": "string", **schema}))
    for s in good:
        assert accepts(vocab, c.grammar, json.dumps(s)) and c.validate(json.dumps(s)) == [], s
    for s in bad:
        assert not accepts(vocab, c.grammar, json.dumps(s)), s
