"""The grammar drafter's span ends where the model's own tokens would (issue 42): a last token the
model writes glued to the next character is never offered, since it is a certain rejection. With
SmolLM2's tokenizer: `":` alone, or `":"` glued, depending on whether this output puts a blank
after the colon."""

from __future__ import annotations

from engine.speculative.drafters.base import SeqView
from engine.speculative.drafters.grammar import GrammarDrafter

GRAMMAR = r'''root ::= "{" field "," space field "}"
field ::= "\"" ("name" | "unit") "\":" space ("\"" [a-z]+ "\"" | "null")
space ::= " "?
'''


def span(drafter: GrammarDrafter, model, written: str) -> list[bytes]:
    tokens = model.tokenize(written, add_bos=False, special=False)
    drafter.forget(0)
    return [model.piece(t) for t in drafter.span(SeqView(0, tokens, len(tokens) - 1, GRAMMAR, 0), 8)]


def test_a_token_glued_to_the_next_character_is_not_offered(engine):
    model = engine.model
    assert model.tokenize('":"', add_bos=False, special=False) != model.tokenize('":', add_bos=False, special=False)
    d = GrammarDrafter(model)
    # spaced, as json.dumps writes: after `":` comes the blank, which the model writes with the quote
    assert span(d, model, '{"name": "ann", "unit') == [b'":']
    # compact: this output put no blank after its first colon; `":` would be rejected for `":"`
    assert span(d, model, '{"name":"ann","unit') == []
    assert span(d, model, '{"name":null,"unit') == []
