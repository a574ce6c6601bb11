"""The constrain stage: a request's grammar applied to the target's logits at every verify row.

A path is judged against what plain constrained decoding would have done, so the grammar
acts on the target's side only: at row i its parse state is the one after the committed
tokens and path[:i], and a drafted token the grammar forbids is simply rejected there
(the target's constrained choice cannot be it). Drafters know nothing of grammars.

Greedy: row by row, the constrained argmax (`Grammar.greedy`: the plain argmax when the
grammar allows it) is compared with the path token; the grammar advances only over
committed tokens, so nothing is rolled back. Sampling: the target distribution of each row
is computed on the masked logits along a clone of the grammar, then acceptance runs as
without a grammar; the real grammar then advances over what was committed.

Not the acceptance math (accept.py) nor the grammar itself (engine/llama/grammar.py).
"""

from __future__ import annotations

import numpy as np

from ..llama.context import Context
from ..llama.grammar import Grammar
from .verify import target_argmax, target_logits


def accept_constrained(slot, path: list[int], ctx: Context, rows: list[int]) -> tuple[int, int]:
    """Greedy acceptance of `path` [T] verified at batch `rows` [T+1], with `slot`'s grammar choosing
    at each row: the plain argmax where the grammar allows it, else the grammar's own greedy choice
    (the row's logits are read only then), and from the row where the answer must close its JSON to
    fit max_tokens (`slot.close_from`) on, what Grammar.close chooses. Returns (n_accepted, bonus) as
    constrained plain decoding would commit them; the grammar has advanced over path[:n_accepted] + [bonus]."""
    grammar = slot.sampler.grammar
    close_at = len(rows) if slot.close_from is None else slot.close_from - len(slot.output)
    for i, best in enumerate(target_argmax(ctx, rows)):  # [T+1], unconstrained
        best = int(best)
        if i >= close_at:
            token = grammar.close(target_logits(ctx, rows[i:i + 1])[0])
        elif grammar.allows(best):
            token = best
        else:
            token = grammar.greedy(target_logits(ctx, rows[i:i + 1])[0], best)
        grammar.accept(token)
        if i == len(path) or token != path[i]:
            return i, token
    raise AssertionError("a verify has one row more than its path")


def target_probs(grammar: Grammar, dist, logits: np.ndarray, path: list[int]) -> np.ndarray:
    """logits [T+1, V] -> p [T+1, V]: the constrained target distribution at each row, along
    the path. Rows after the first path token the grammar forbids are never reached by
    acceptance (that token has p = 0); they repeat the last computed row."""
    g = grammar.clone()
    try:
        rows = []
        for i, row in enumerate(logits):
            rows.append(dist.probs(g.mask(row)))  # [V]
            if i == len(path) or not g.allows(path[i]):
                break
            g.accept(path[i])
    finally:
        g.free()
    rows += [rows[-1]] * (len(logits) - len(rows))
    return np.stack(rows)  # [T+1, V]


def advance(grammar: Grammar, tokens: list[int]) -> None:
    """Move the grammar past what a sampled verify committed."""
    for t in tokens:
        grammar.accept(t)
