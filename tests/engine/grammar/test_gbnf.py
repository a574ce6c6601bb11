"""engine/grammar/gbnf.py, the Python GBNF recognizer the grammar drafter walks, against llama.cpp's own
grammar sampler (a byte vocabulary, tests/grammar_vocab.py): the same texts pass, prefix by
prefix; the same small languages; the forced text is what the grammar leaves no choice about."""

import json
import random

import pytest
from llama_cpp import llama_grammar

from conftest import EVAL_DATA
from engine.grammar import gbnf
from engine.errors import InvalidRequest
from engine.grammar.schema import compile_response_format
from grammar_vocab import language, walk

CORPUS = sorted((EVAL_DATA / "schemas").glob("*.json"))


def follow(g: gbnf.Recognizer, text: str):
    """The state after `text`, or None where the recognizer refuses a character."""
    st = g.start()
    for ch in text:
        st = g.advance(st, ch)
        if not st:
            return None
    return st


def corpus_grammars():
    out = []
    for path in CORPUS:
        entry = json.loads(path.read_text("utf-8"))
        try:
            c = compile_response_format({"type": "json_schema",
                                         "json_schema": {"name": "t", "schema": entry["schema"]}})
        except InvalidRequest:
            continue
        out.append((path.stem, c.grammar))
    return out + [("json_object", llama_grammar.JSON_GBNF)]


@pytest.mark.parametrize("name,grammar", corpus_grammars())
def test_texts_llama_cpp_writes_are_followed_to_their_end(vocab, name, grammar):
    g = gbnf.Recognizer(grammar)
    rng = random.Random(name)
    for _ in range(4):
        text = walk(vocab, grammar, rng)
        if text is None:
            continue
        st = follow(g, text)
        assert st is not None, (name, text)
        assert g.next_chars(st)[1], f"{name}: the recognizer does not let {text!r} end"


SMALL = [
    'root ::= "a" [bc]* "d"?',
    'root ::= ("ab" | "a" x) x{1,2}\nx ::= [a-c] | "\\x62b"',
    'root ::= item ("," item){0,2}\nitem ::= [0-9]+ | "-"',
    'root ::= [^a-b] . | ("c" (root)?)',
    'root ::= # comment\n  "a" (\n  "b" |\n  "c" )* # more\n',
]


@pytest.mark.parametrize("grammar", SMALL)
def test_small_languages_equal_llama_cpps(vocab, grammar):
    alphabet = "abcd0,-"
    want = language(vocab, grammar, alphabet, 5)
    g = gbnf.Recognizer(grammar)
    got = set()
    todo = [("", g.start())]
    while todo:
        text, st = todo.pop()
        if g.next_chars(st)[1]:
            got.add(text)
        for c in alphabet if len(text) < 5 else "":
            nxt = g.advance(st, c)
            if nxt:
                todo.append((text + c, nxt))
    assert got == want


def test_forced_text_is_where_the_schema_leaves_no_choice():
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}},
              "required": ["name", "qty"], "additionalProperties": False}
    g = gbnf.Recognizer(compile_response_format({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
                     .grammar)
    st = follow(g, '{"name": "Acme", ')
    forced = ""
    while True:
        chars, ends = g.next_chars(st)
        if ends or chars is None or len(chars) != 1:
            break
        forced += next(iter(chars))
        st = g.advance(st, forced[-1])
    assert forced == '"qty"'  # then an optional space: a choice
    assert g.next_chars(st) == ({" ", ":"}, False)
    assert g.next_chars(follow(g, '{"name": "Ac'))[0] is None  # inside a string: anything


@pytest.mark.parametrize("bad", ['root ::= "a', "root ::= [a-", "root ::= (a", "root ::= a)", "root ::= x",
                                 "x ::= \"a\"", "root ::= *", 'root ::= "\\q"', "root ::= \"a\"{3,1}"])
def test_bad_grammars_are_refused(bad):
    with pytest.raises(gbnf.GrammarError):
        gbnf.Recognizer(bad)


def test_a_thousand_nested_groups_parse_without_recursion():
    text = "root ::= " + '("a" ' * 3000 + ")?" * 3000
    g = gbnf.Recognizer(text)
    assert follow(g, "a" * 3000) is not None and follow(g, "a" * 3001) is None
