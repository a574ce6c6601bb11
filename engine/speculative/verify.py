"""The verify stage: `[anchor] + path` as rows of the target batch, logits at every row,
and the target's own choice at each of them.

Verify rows share the step's one target decode with prompt chunks and plain tokens of
other sequences. On the CPU build, logits of a row in a verify batch are bit-identical
to those of the same token decoded alone, so at temperature 0 the target's argmax here
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


def verify_is_exact(ctx: Context, seq_id: int = 0, sizes=(2, 3, 8, 16)) -> tuple[bool, str]:
    """Measure whether this backend computes a verify row exactly like a single-token decode.

    Decodes 16 fixed tokens one at a time, then again in batches of each size, on a free
    sequence, and compares the logits bit for bit. Greedy speculation is lossless only
    where they are identical: the CPU build (llamafile sgemm off) is; CUDA is not (on an
    H200, 1-row and 2-row logits of SmolLM2 differed by up to 8.0, with argmax flips).
    Returns (exact, what differed)."""
    n = 16
    toks = [(ctx.model.bos_id if ctx.model.bos_id >= 0 else 1)] + [(97 * j + 13) % ctx.model.n_vocab for j in range(n)]
    batch = ctx.batch
    try:
        batch.clear()
        batch.add(toks[0], 0, seq_id, logits=False)
        ctx.decode(batch)
        single = []
        for j, tok in enumerate(toks[1:]):
            batch.clear()
            row = batch.add(tok, 1 + j, seq_id, logits=True)
            ctx.decode(batch)
            single.append(target_logits(ctx, [row])[0])
        ref = np.stack(single)  # [n, V]
        for k in sizes:
            ctx.forget(seq_id, 1)
            got = []
            for start in range(0, n, k):
                batch.clear()
                rows = [batch.add(tok, 1 + start + j, seq_id, logits=True)
                        for j, tok in enumerate(toks[1 + start:1 + start + k])]
                ctx.decode(batch)
                got.extend(target_logits(ctx, rows))
            diff = float(np.max(np.abs(np.stack(got) - ref)))
            if diff != 0.0:
                return False, f"a batch of {k} rows gives other logits than single tokens (max |diff| {diff:.3g})"
        return True, "verify rows are bit-identical to single-token decodes"
    finally:
        ctx.forget(seq_id)
        batch.clear()
