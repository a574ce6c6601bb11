"""Bounds on "number" and "multipleOf": the language of each is checked against jsonschema itself
over grids of number spellings (every string the grammar writes is valid; every valid number in
the canonical spelling is written), and through llama.cpp's sampler for a few whole languages.
Bounds on "integer": our exact GBNF range rule against brute force and through the sampler."""

import json
import random
import re
from decimal import Decimal

import jsonschema
import pytest

from engine.grammar.schema import compile_response_format
from engine.grammar.number import MAX_SIGNIFICANT, language
from engine.grammar.rules import MAX_INT, integer_gbnf
from grammar_vocab import accepts, js, language as grammar_language, refused

ODD = ["-0", "-0.0", "-0.00", "00", "01", "-01", "1.", ".5", "1e2", "1E0", "+1", "1.50", "0.0", "-", "", "--1", "1..2"]




def canonical(s: str) -> bool:
    """The spelling the grammar writes: no exponent, no leading zero, no -0 (and at most 15 digits)."""
    return bool(re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", s)) and not (s[0] == "-" and Decimal(s) == 0)


def grid() -> list[str]:
    out = [str(n) for n in range(-120, 121)]
    out += [f"{n / 10:.1f}" for n in range(-60, 61)] + [f"{n / 100:.2f}" for n in range(-300, 301)]
    out += [f"{n / 1000:.3f}" for n in range(-1100, 1101, 7)] + ["0.05", "0.10", "2.50", "2.500", "-1.500", "99.99"]
    return sorted(set(out + ODD))


def check(schema: dict, strings, integers_only: bool = False) -> None:
    """integers_only: a multiple is written as an integer (5, never 5.0)."""
    dfa, validator = language(schema), jsonschema.Draft202012Validator(schema)
    for s in strings:
        try:
            valid = validator.is_valid(json.loads(s))
        except ValueError:
            valid = False
        written = dfa.matches(s)
        assert not written or valid, (schema, s, "written but not valid")
        if canonical(s) and len(re.sub(r"\D", "", s)) <= MAX_SIGNIFICANT and not (integers_only and "." in s):
            assert written == valid, (schema, s)


@pytest.mark.parametrize("bounds", [
    {"minimum": 0}, {"exclusiveMinimum": 0}, {"maximum": 0}, {"exclusiveMaximum": 0},
    {"minimum": 0.5, "maximum": 2.5}, {"exclusiveMaximum": 1.25}, {"minimum": -1.5, "exclusiveMaximum": -0.25},
    {"minimum": 1, "maximum": 1}, {"minimum": 0.1}, {"minimum": 3, "exclusiveMinimum": 2.5}, {"minimum": 100},
    {"exclusiveMinimum": -0.05, "exclusiveMaximum": 0.05}, {"maximum": -1}, {"minimum": -2, "maximum": 99.99},
    {"exclusiveMinimum": 0, "maximum": 100}, {"minimum": 0.001, "maximum": 0.999},
])
def test_number_bounds_against_jsonschema(bounds):
    check({"type": "number", **bounds}, grid())


def test_random_bounds_against_jsonschema():
    rng = random.Random(23)
    strings = grid()
    for _ in range(60):
        a, b = sorted(round(rng.uniform(-50, 50), rng.choice([0, 1, 2])) for _ in range(2))
        lo, hi = rng.choice(["minimum", "exclusiveMinimum"]), rng.choice(["maximum", "exclusiveMaximum"])
        if a == b and "exclusive" in lo + hi:
            continue
        check({"type": "number", lo: a, hi: b}, strings)


@pytest.mark.parametrize("schema", [
    {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100},
    {"type": "integer", "multipleOf": 3},
    {"type": "integer", "multipleOf": 12, "minimum": -50, "exclusiveMaximum": 50},
    {"type": "integer", "multipleOf": 1},
    {"type": "integer", "multipleOf": 250.0, "minimum": 250},
    {"type": "number", "multipleOf": 5, "minimum": 0},
    {"type": "number", "multipleOf": 10, "exclusiveMaximum": 0},
])
def test_multiple_of_against_jsonschema(schema):
    strings = [str(n) for n in range(-1100, 1101)] + ["5.0", "10.5", "-0", "05", "1e1"]
    check(schema, strings, integers_only=True)
    assert not language(schema).matches("5.0")  # integer spellings only


def test_whole_languages_through_llama(vocab):
    cases = [({"type": "number", "minimum": 0, "maximum": 1}, "01.", 3),
             ({"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 0.5}, "-015.", 4),
             ({"type": "integer", "multipleOf": 4, "minimum": -8, "maximum": 12}, "-0123456789", 3)]
    for schema, alphabet, n in cases:
        grammar = compile_response_format(js(schema)).grammar
        got = grammar_language(vocab, grammar, alphabet, n)
        want = {s for s in _strings(alphabet, n) if canonical(s)
                and jsonschema.Draft202012Validator(schema).is_valid(json.loads(s))}
        assert got == want, (schema, sorted(got ^ want))


def _strings(alphabet: str, n: int) -> set[str]:
    out, level = set(), [""]
    for _ in range(n):
        level = [s + c for s in level for c in alphabet]
        out |= set(level)
    return out


def test_bounded_numbers_in_place(vocab):
    schema = {"type": "object", "required": ["price", "qty"], "additionalProperties": False,
              "properties": {"price": {"type": "number", "exclusiveMinimum": 0, "maximum": 99999.99},
                             "qty": {"type": "integer", "minimum": 1, "multipleOf": 50},
                             "discount": {"type": ["number", "null"], "minimum": 0, "maximum": 0.5}}}
    c = compile_response_format(js(schema))
    for text in ('{"price": 12.5, "qty": 500}', '{"price": 0.01, "qty": 50, "discount": null}',
                 '{"price": 99999.99, "qty": 100, "discount": 0.15}'):
        assert accepts(vocab, c.grammar, text) and c.validate(text) == [], text
    for text in ('{"price": 0, "qty": 50}', '{"price": 1, "qty": 75}', '{"price": 1, "qty": 0}',
                 '{"price": 100000, "qty": 50}', '{"price": 1, "qty": 50, "discount": 0.6}',
                 '{"price": 1e2, "qty": 50}'):
        assert not accepts(vocab, c.grammar, text), text


@pytest.mark.parametrize("schema, keyword, fragment", [
    ({"type": "number", "minimum": 2, "maximum": 1}, "minimum", "no number"),
    ({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1}, "exclusiveMinimum", "no number"),
    ({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6}, "minimum", "no number"),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf", "floating point"),
])
def test_number_refusals(schema, keyword, fragment):
    e = refused(js(schema))
    assert f'keyword "{keyword}"' in e.message and fragment in e.message, e.message


# --- integer bounds: an exact GBNF range of our own ---------------------------------------------

def test_bounds_without_a_type_say_to_give_one():
    e = refused(js({"minimum": 0}))
    assert '"minimum"' in e.message and 'HINT: bounds are enforced beside "type": "number"' in e.message, e.message


def test_integer_gbnf_against_brute_force():
    """The rule read as a regex (it is one: literals, classes, {n}, groups), over every integer of a
    window and the non-canonical spellings, for many random ranges and all small ones near 0."""
    strings = [str(n) for n in range(-1100, 1101)] + ["-0", "00", "01", "-01", "007", "+1", "1e2", "", "-"]
    rng = random.Random(7)
    ranges = [(lo, hi) for lo in range(-12, 13) for hi in range(lo, 13)]
    ranges += [sorted((rng.randint(-1050, 1050), rng.randint(-1050, 1050))) for _ in range(1500)]
    for lo, hi in ranges:
        regex = re.compile(integer_gbnf(lo, hi).replace('"', "").replace(" ", ""))
        assert {s for s in strings if regex.fullmatch(s)} == {str(n) for n in range(lo, hi + 1)}, (lo, hi)


@pytest.mark.parametrize("bounds, max_len, expected", [
    ({"minimum": 3, "maximum": 250}, 5, range(3, 251)),
    ({"minimum": 0}, 4, range(0, 10000)),  # "-0" and 01 never
    ({"exclusiveMaximum": 0}, 4, range(-999, 0)),
    ({"exclusiveMinimum": -17.5, "maximum": -3}, 4, range(-17, -2)),
    ({"minimum": -2.2, "maximum": 12.5, "exclusiveMaximum": 100}, 5, range(-2, 13)),
    ({"minimum": -5, "exclusiveMaximum": 6}, 5, range(-5, 6)),
    ({"minimum": 7, "maximum": 7}, 5, range(7, 8)),
])
def test_integer_bounds_allow_exactly_the_range(vocab, bounds, max_len, expected):
    """llama.cpp's sampler over every string of -0123456789 up to max_len characters."""
    grammar = compile_response_format(js({"type": "integer", **bounds})).grammar
    assert grammar_language(vocab, grammar, "-0123456789", max_len) == {str(n) for n in expected}


def test_integer_bounds_at_sixteen_digits(vocab):
    lo, hi = -123456789012345, 987654321098765
    grammar = compile_response_format(js({"type": "integer", "minimum": lo, "maximum": hi})).grammar
    for n in (lo, lo + 1, -1, 0, 1, hi - 1, hi, 10 ** 14, -10 ** 14):
        assert accepts(vocab, grammar, str(n)), n
    for n in (lo - 1, hi + 1, -10 ** 15, 10 ** 15):
        assert not accepts(vocab, grammar, str(n)), n
    grammar = compile_response_format(js({"type": "integer", "minimum": 0})).grammar  # open: as the converter's
    assert accepts(vocab, grammar, str(MAX_INT)) and not accepts(vocab, grammar, str(MAX_INT + 1))


def test_integer_ranges_in_place(vocab):
    """Inside objects, behind $refs (twice, and one unused), in a split type list, and in a oneOf."""
    schema = {"type": "object", "required": ["a", "b", "c", "q"], "additionalProperties": False,
              "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"},
                             "c": {"type": "integer", "maximum": -1}, "q": {"type": ["integer", "null"], "minimum": 0}},
              "$defs": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                        "unused": {"type": "integer", "minimum": 0}}}
    grammar = compile_response_format(js(schema)).grammar
    assert "\\u0001" not in grammar
    ok = '{"a": 1, "b": 9, "c": -1, "q": 0}'
    for text in (ok, '{"a":5,"b":5,"c":-40,"q":null}', '{"a": 1 , "b": 2, "c": -3, "q": 12 }'):
        assert accepts(vocab, grammar, text), text
    for old, new in (('"a": 1', '"a": 0'), ('"b": 9', '"b": 10'), ('"c": -1', '"c": 0'), ('"q": 0', '"q": -1'),
                     ('"q": 0', '"q": 01'), ('"q": 0', '"q": -0'), ('"q": 0', '"q": 1.5'), ('"q": 0', '"q": "1"')):
        assert not accepts(vocab, grammar, ok.replace(old, new)), new
    grammar = compile_response_format(js({"oneOf": [{"type": ["string", "null"], "minLength": 1},
                                                    {"type": "integer", "minimum": 0}]})).grammar
    assert all(accepts(vocab, grammar, t) for t in ('"x"', "null", "3")) and not accepts(vocab, grammar, "-3")
