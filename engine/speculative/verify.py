"""The verify stage: `[anchor] + path` as rows of the target batch, logits at every row,
and the target's own choice at each of them.

Verify rows share the step's one target decode with plain tokens of other sequences (and,
on the CPU build, prompt chunks). Where the load-time judge (exactness.py) measured a row
of a verify batch bit-identical to the same token decoded alone, the target's argmax here
is exactly what plain decoding would have picked (the greedy-invariance tests check it).
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..llama.context import Batch, Context


def add_verify_rows(batch: Batch, seq_id: int, pos: int, anchor: int, path: list[int]) -> list[int]:
    """Anchor at `pos`, path tokens after it; every row outputs logits. Returns the rows."""
    rows = [batch.add(anchor, pos, seq_id, logits=True)]
    for j, tok in enumerate(path):
        rows.append(batch.add(tok, pos + 1 + j, seq_id, logits=True))
    return rows  # [T+1]


def target_logits(ctx: Context, rows: list[int]) -> np.ndarray:
    """Logits of the given batch rows after the last decode: [len(rows), n_vocab] (a copy)."""
    return np.array(ctx.logits(rows))  # [T+1, V]


def token_logprobs(ctx: Context, rows: list[int], tokens: list[int]) -> list[float]:
    """log p(token) under the target's unconstrained softmax at each row (confidence, not sampling)."""
    logits = target_logits(ctx, rows).astype(np.float64)  # [n, V]
    top = logits.max(axis=1, keepdims=True)  # [n, 1]
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))  # [n]
    return [float(logits[i, t] - lse[i]) for i, t in enumerate(tokens)]


def target_argmax(ctx: Context, rows: list[int]) -> np.ndarray:
    """The target's greedy token at each row: [len(rows)] int32 (ties -> lowest id, as llama.cpp);
    a verify's rows are read in place (Context.logits)."""
    return native.argmax_rows(ctx.logits(rows))
