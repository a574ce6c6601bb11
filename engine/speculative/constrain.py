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

from ..llama.grammar import Grammar


def accept_greedy(grammar: Grammar, path: list[int], target_argmax: np.ndarray, row_logits,
                  close_at: int) -> tuple[int, int]:
    """path [T], target_argmax [T+1] (unconstrained), row_logits(i) -> [V] logits of row i;
    rows from close_at on choose as Grammar.close does (the request is closing its JSON).
    Returns (n_accepted, bonus) as constrained plain decoding would commit them; the
    grammar has advanced over path[:n_accepted] + [bonus]."""
    for i, best in enumerate(target_argmax):
        best = int(best)
        if i >= close_at:
            token = grammar.close(row_logits(i))
        else:
            token = best if grammar.allows(best) else grammar.greedy(row_logits(i), best)
        grammar.accept(token)
        if i == len(path) or token != path[i]:
            return i, token
    raise AssertionError("target_argmax must have one row more than the path")


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
