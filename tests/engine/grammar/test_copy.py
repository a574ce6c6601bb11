"""x-copy (engine/grammar/copy.py): a copy field's value is a stretch of the request's own text.

The suffix automaton is checked against every substring of random texts; the compiled grammar is
run through llama.cpp's own grammar sampler over a byte vocabulary (grammar_vocab.py), so a value
that is not in the text cannot be written. No model, no threads.
"""

import itertools
import json
import random

import pytest

from engine.errors import InvalidRequest
from engine.grammar import copy
from engine.grammar.schema import compile_response_format
from grammar_vocab import accepts, js, refused

MESSAGE = 'Marco from Bellavista here.\nCall 0917 222 333 or "m@x.it", 20 aprons 兩件 L\\XL'


def _copies(texts: list[str]) -> set[str]:
    """Every copy by definition: non-empty substrings that neither start nor end with whitespace."""
    subs = {t[i:j] for t in texts for i in range(len(t)) for j in range(i + 1, len(t) + 1)}
    return {s for s in subs if s[0] not in copy.SPACE and s[-1] not in copy.SPACE}


def _language(dfa) -> set[str]:
    """Every string a DFA of finitely many strings accepts (each edge here reads single characters)."""
    out, todo = set(), [(0, "")]
    while todo:
        state, text = todo.pop()
        if state in dfa.accept:
            out.add(text)
        todo += [(t, text + chr(c)) for cs, t in dfa.trans[state] for lo, hi in cs for c in range(lo, hi + 1)]
    return out


def test_the_automaton_takes_exactly_the_copies_of_several_texts():
    rng = random.Random(7)
    for _ in range(500):
        texts = ["".join(rng.choice("ab \n") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 3))]
        dfa, want = copy.substrings(texts), _copies(texts)
        assert (dfa is None) == (not want), texts
        assert dfa is None or _language(dfa) == want, texts


def test_the_automaton_stays_linear_in_the_text():
    text = "".join(random.Random(3).choice("abcdefgh ,.") for _ in range(2000))
    assert copy.substrings([text]).size < 2 * len(text)


def _object(value_schema: dict, message: str = MESSAGE) -> str:
    c = compile_response_format(js({"type": "object", "properties": {"v": value_schema}, "required": ["v"]}))
    assert c.copy_rules
    return c.grammar_for([message])


def _doc(value) -> str:
    return '{ "v": ' + json.dumps(value, ensure_ascii=False) + " }"


def test_a_value_not_in_the_message_cannot_be_written(vocab):
    grammar = _object({"type": "string", "x-copy": True})
    for value in ["Bellavista", "0917 222 333", "m@x.it", "兩件", "L\\XL", "Marco from Bellavista here.\nCall"]:
        assert accepts(vocab, grammar, _doc(value)), value
    for value in ["Bellavista Pizzeria", "0917222333", "marco", "三件", "", " Marco", "here. ", "Marco  from"]:
        assert not accepts(vocab, grammar, _doc(value)), value
    assert not accepts(vocab, grammar, _doc(None))  # not nullable here


def test_the_grammar_writes_every_copy_of_a_short_text_and_nothing_else(vocab):
    grammar = _object({"type": "string", "x-copy": True}, message="ab a")
    want = _copies(["ab a"])
    for n in range(6):
        for value in map("".join, itertools.product("ab ", repeat=n)):
            assert accepts(vocab, grammar, _doc(value)) == (value in want), value


def test_null_stays_allowed_where_the_schema_allows_it(vocab):
    grammar = _object({"type": ["string", "null"], "x-copy": True})
    assert accepts(vocab, grammar, _doc(None)) and accepts(vocab, grammar, _doc("Marco"))
    assert not accepts(vocab, grammar, _doc("Polo"))


def test_a_separator_joins_several_copies(vocab):
    grammar = _object({"type": "string", "x-copy": {"separator": "; "}})
    assert accepts(vocab, grammar, _doc("0917 222 333; m@x.it"))
    assert accepts(vocab, grammar, _doc("m@x.it"))
    assert not accepts(vocab, grammar, _doc("0917 222 333, m@x.it"))
    assert not accepts(vocab, grammar, _doc("0917 222 333; "))


def test_copies_come_from_any_of_the_texts_but_never_across_two(vocab):
    c = compile_response_format(js({"type": "object", "properties": {"v": {"type": "string", "x-copy": True}}}))
    grammar = c.grammar_for(["first part", "second"])
    assert accepts(vocab, grammar, _doc("part")) and accepts(vocab, grammar, _doc("second"))
    assert not accepts(vocab, grammar, _doc("partsecond")) and not accepts(vocab, grammar, _doc("part second"))


@pytest.mark.parametrize("node, fragment", [
    ({"type": "string", "x-copy": True, "maxLength": 10}, '"maxLength"'),
    ({"type": "string", "x-copy": True, "pattern": "^a"}, '"pattern"'),
    ({"type": "number", "x-copy": True}, '"x-copy"'),
    ({"type": "integer", "x-copy": {"separator": ","}}, "on an integer"),
    ({"type": "integer", "x-copy": True, "multipleOf": 2}, '"multipleOf"'),
    ({"type": "string", "x-copy": "yes"}, "must be true or"),
    ({"type": "string", "x-copy": {"separator": " "}}, "separator"),
    ({"type": "string", "x-copy": {"separator": '"'}}, "separator"),
    ({"type": "string", "x-copy": {"join": "; "}}, "must be true or"),
])
def test_what_a_copy_cannot_be_is_refused_by_name(node, fragment):
    e = refused(js({"type": "object", "properties": {"v": node}}))
    assert fragment in e.message and "/properties/v" in e.message, e.message


def test_an_integer_copy_is_a_number_the_text_writes_in_digits(vocab):
    grammar = _object({"type": ["integer", "null"], "x-copy": True, "minimum": 1, "maximum": 999})
    for value in (20, 917, 222, 333, None):  # 0917 is 917; 1,000 is above the maximum
        assert accepts(vocab, grammar, _doc(value)), value
    for value in (0, 2, 12, 1000, 2000, 21):
        assert not accepts(vocab, grammar, _doc(value)), value
    assert accepts(vocab, _object({"type": "integer", "x-copy": True}, "1,000 menus, 2，500 cards"), _doc(2500))


def test_an_integer_copy_with_no_number_in_the_text_leaves_null(vocab):
    grammar = _object({"type": ["integer", "null"], "x-copy": True}, message="no digits here")
    assert accepts(vocab, grammar, _doc(None)) and not accepts(vocab, grammar, _doc(1))
    assert copy.numbers(["1,000 menus, 0912-345-678, ８件, 2,5000"]) == {1000, 912, 345, 678, 8, 2, 5000}
    assert copy.written(1000, "1000 or 1,000") == (0, 4) and copy.written(7, "17") is None


def test_nothing_to_copy_is_a_clear_error():
    c = compile_response_format(js({"type": "object", "properties": {"v": {"type": "string", "x-copy": True}}}))
    with pytest.raises(InvalidRequest, match="nothing to copy"):
        c.grammar_for([" \n ", ""])


def test_a_schema_without_copies_needs_no_text():
    c = compile_response_format(js({"type": "object", "properties": {"v": {"type": "string"}}}))
    assert c.copy_rules == () and c.grammar_for([]) == c.grammar


def test_copy_fields_are_found_by_instance_path():
    schema = {"type": "object", "$defs": {"item": {"type": "object", "properties": {
        "color": {"type": ["string", "null"], "x-copy": True}, "n": {"type": "integer"}}}},
        "properties": {"name": {"x-copy": True, "type": "string"}, "n": {"type": "integer", "x-copy": True},
                       "contact": {"type": "string", "x-copy": {"separator": "; "}},
                       "items": {"type": "array", "items": {"$ref": "#/$defs/item"}}}}
    assert copy.fields(schema) == {"name": copy.Copy(), "n": copy.Copy(), "contact": copy.Copy("; "),
                                   "items[].color": copy.Copy()}
    assert copy.fields(copy.without(schema)) == {}

