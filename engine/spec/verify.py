"""The verify stage: `[anchor] + path` as rows of the target batch, logits at every row,
and the target's own choice at each of them.

Verify rows share the step's one target decode with prompt chunks and plain tokens of
other sequences. On the CPU build, logits of a row in a verify batch are bit-identical
to those of the same token decoded alone, so at temperature 0 the target's argmax here
is exactly what plain decoding would have picked (the greedy-invariance tests check it).
"""

from __future__ import annotations

import numpy as np

from ..context import Batch, Context


def add_verify_rows(batch: Batch, seq_id: int, pos: int, anchor: int, path: list[int]) -> list[int]:
    """Anchor at `pos`, path tokens after it; every row outputs logits. Returns the rows."""
    rows = [batch.add(anchor, pos, seq_id, logits=True)]
    for j, tok in enumerate(path):
        rows.append(batch.add(tok, pos + 1 + j, seq_id, logits=True))
    return rows  # [T+1]


def target_logits(ctx: Context, rows: list[int]) -> np.ndarray:
    """Logits of the given batch rows after the last decode: [len(rows), n_vocab] (a copy)."""
    n_vocab = ctx.model.n_vocab
    out = np.empty((len(rows), n_vocab), dtype=np.float32)  # [T+1, V]
    for i, r in enumerate(rows):
        out[i] = np.ctypeslib.as_array(ctx.logits_ptr(r), shape=(n_vocab,))
    return out


def target_argmax(ctx: Context, rows: list[int]) -> np.ndarray:
    """The target's greedy token at each row: [len(rows)] int32 (ties -> lowest id, as llama.cpp)."""
    n_vocab = ctx.model.n_vocab
    return np.array([int(np.argmax(np.ctypeslib.as_array(ctx.logits_ptr(r), shape=(n_vocab,))))
                     for r in rows], dtype=np.int32)
