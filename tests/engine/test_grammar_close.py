"""Grammar.close (the last close_within tokens of a constrained answer): it must end the JSON,
not keep it open. Found when a portable llama.cpp build shifted logits slightly: inside a string,
a quote-and-comma token ("," then another member) scored above a quote-and-brace one, and the
answer went on with empty members until max_tokens."""

from __future__ import annotations

import numpy as np

from engine.llama.grammar import Grammar
from engine.grammar.schema import compile_response_format

JSON = compile_response_format({"type": "json_object"}).grammar


def test_close_ends_a_string_before_continuing_it(engine):
    model = engine.model
    quoted = {t: model.piece(t) for t in range(model.n_vocab) if model.piece(t).startswith(b'"')}
    ends = [t for t, p in quoted.items() if p[1:] and set(p[1:]) <= set(b"]} \n\t")]  # '"}', '"]' ...
    more = [t for t, p in quoted.items() if b"," in p and set(p[1:]) <= set(b"]},: \n\t")]  # '",' ...
    assert ends and more

    g = Grammar(model.vocab, model.n_vocab, JSON, piece=model.piece)
    try:
        for t in model.tokenize('{"items": [{"name": "A5 flyers', add_bos=False, special=False):
            g.accept(t)
        assert g.in_string
        logits = np.zeros(model.n_vocab, dtype=np.float32)
        logits[more] = 5.0  # the model would rather go on ('",' and the like)
        logits[ends] = 1.0
        out = []
        while len(out) < 12:
            t = g.close(logits)
            out.append(t)
            g.accept(t)
            if b"".join(model.piece(x) for x in out).count(b"}") >= 2:
                break
        text = b"".join(model.piece(x) for x in out).decode()
        assert "," not in text and text.count("}") == 2 and text.count("]") == 1, text  # '"}]}' in a few tokens
    finally:
        g.free()
