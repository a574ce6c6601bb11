"""The grammar drafter's span ends where the model's own tokens would (issue 42): a last token the
model writes glued to the next character is never offered, since it is a certain rejection. With
SmolLM2's tokenizer: `":` alone, or `":"` glued, depending on whether this output puts a blank
after the colon."""

from __future__ import annotations

from engine.grammar import gbnf
from engine.grammar.schema import compile_response_format
from engine.speculative.drafters.base import SeqView
from engine.speculative.drafters.grammar import GrammarDrafter, _Follow
from engine.speculative.params import COPY, GRAMMAR

FIELDS = r'''root ::= "{" field "," space field "}"
field ::= "\"" ("name" | "unit") "\":" space ("\"" [a-z]+ "\"" | "null")
space ::= " "?
'''


def span(drafter: GrammarDrafter, model, written: str) -> list[bytes]:
    tokens = model.tokenize(written, add_bos=False, special=False)
    drafter.forget(0)
    return [model.piece(t) for t in drafter.span(SeqView(0, tokens, len(tokens) - 1, FIELDS, 0), 8)[0]]


def test_a_token_glued_to_the_next_character_is_not_offered(engine):
    model = engine.model
    assert model.tokenize('":"', add_bos=False, special=False) != model.tokenize('":', add_bos=False, special=False)
    d = GrammarDrafter(model)
    # spaced, as json.dumps writes: after `":` comes the blank, which the model writes with the quote
    assert span(d, model, '{"name": "ann", "unit') == [b'":']
    # compact: this output put no blank after its first colon; `":` would be rejected for `":"`
    assert span(d, model, '{"name":"ann","unit') == []
    assert span(d, model, '{"name":null,"unit') == []


# -- copy fields (issue 52): inside a copy, the message says what comes next ---------------------

COPY_SCHEMA = {"type": "object", "properties": {
    "customer": {"anyOf": [{"type": "string", "x-copy": True}, {"type": "null"}]},
    "contact": {"type": "string", "x-copy": {"separator": "; "}},
    "note": {"type": "string"}},
    "required": ["customer", "contact", "note"]}
MESSAGE = 'Order from Bellavista Pizzeria, call 0912-345-678 or "Ann" at\nann@bella.tw. Bella says hi.'


def ahead(written: str, message: str = MESSAGE) -> list[tuple[str, str]]:
    grammar = compile_response_format({"type": "json_schema", "json_schema": {"name": "o", "schema": COPY_SCHEMA}}
                                      ).grammar_for([message])
    f = _Follow(gbnf.Recognizer(grammar), grammar)
    f.feed(written.encode())
    return f.ahead()[0]


def test_a_copy_goes_on_as_the_message_does_to_where_the_value_ends():
    # "Bellav" is written once: the copy continues to the comma, then the value closes and the grammar
    # writes the next key
    assert ahead('{"customer": "Bellav') == [('ista Pizzeria"', COPY), (', "contact": "', GRAMMAR)]
    # at the comma itself: the value closes
    assert ahead('{"customer": "Bellavista Pizzeria') == [('"', COPY), (', "contact": "', GRAMMAR)]
    # the message's quotes are written as JSON escapes, and a line break ends the value
    assert ahead('{"customer": "Bellavista Pizzeria", "contact": "\\"A') == [('nn\\" at', COPY)]


def test_nothing_is_guessed_where_the_message_branches():
    assert ahead('{"customer": "') == []  # where a copy starts is the model's choice
    assert ahead('{"customer": "Bella') == []  # "Bellavista" or "Bella says": two places
    # a joined copy may go on after its separator: the value is not closed for it
    assert ahead('{"customer": "Bellavista Pizzeria", "contact": "ann') == [("@bella.tw", COPY)]
    # free text is free
    assert ahead('{"customer": null, "contact": "ann@bella.tw", "note": "B') == []


def test_a_blank_inside_a_copy_is_the_messages_not_a_habit():
    # The JSON habit is a blank after a comma (this output wrote one); the message has none after
    # "A5,": the copy follows the message, to the message's end, where the value must close.
    assert ahead('{"customer": "A5,', "sizes A5,A4 please") == [('A4 please"', COPY), (', "contact": "', GRAMMAR)]


def test_copied_tokens_are_named_as_such(engine):
    model = engine.model
    grammar = compile_response_format({"type": "json_schema", "json_schema": {"name": "o", "schema": COPY_SCHEMA}}
                                      ).grammar_for([MESSAGE])
    written = '{"customer": "Bellav'
    tokens = model.tokenize(written, add_bos=False, special=False)
    got, sources = GrammarDrafter(model).span(SeqView(0, tokens, len(tokens) - 1, grammar, 0), 16)
    assert model.detokenize(got).startswith('ista Pizzeria", "contact":')
    text = b""
    for tok, source in zip(got, sources):  # each token is named for the piece its first byte is in
        assert source == (COPY if len(text) < len('ista Pizzeria"') else GRAMMAR), (text, source)
        text += model.piece(tok)
