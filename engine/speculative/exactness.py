"""The load-time judge of lossless speculation: are verify rows bit-identical to single tokens here?

Greedy speculation emits what plain decoding would only where the target computes a row of a
k-row verify batch exactly as it computes that token decoded alone. Whether it does depends on
the build and the device, so the engine measures it once at load (`judge`), before its worker
starts, and speculation turns on by itself only where the measurement says yes:

- the CPU build (llamafile's sgemm off) is exact at every width;
- a build with llamafile's sgemm is not (k >= 2 rows take other kernels);
- a stock CUDA or Metal build is not (on an H200, SmolLM2's 1- and 2-row logits differed by up
  to 8.0, with argmax flips): llama.cpp picks kernels by batch width;
- a GPU build with flashdesk's patch (native/llama-patches) promises a band: batches of up to
  `max_rows` rows computed alike. The measurement then covers every width of the band at every
  offset, across a 256-cell padding boundary of the KV length, and the engine caps every decode
  that holds plain or verify rows at that many rows.

Before any of that, speculation needs a rollback: rejected tokens must leave the target's memory
exactly as plain decoding would have it (`rollback_refusal`). A recurrent (or hybrid) model's
state cannot drop a tail in a context made as flashdesk makes them today, and a sliding-window
cache may already have dropped cells a rollback needs: for those models speculation stays off,
with the reason, until their rollback is built (issue 20). The check is measured where it can
be: llama.cpp itself says whether the tail removal happened.

Not the verify stage itself (verify.py), nor the decision per request (policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..llama import ggml
from ..llama.context import Context

N_TOKENS = 16  # decoded singly as the reference, then in batches
BOUNDARY_HISTORY = 250  # tokens before them in the GPU check, so that batches cross n_kv's 256 padding


@dataclass(frozen=True)
class Exactness:
    exact: bool  # verify rows (up to max_rows) are bit-identical to single-token decodes, measured
    why: str  # in words, for /health, the doctor and the Models page
    max_rows: int | None = None  # the most rows a decode may hold and stay exact; None: any number


def judge(ctx: Context, on_gpu: bool) -> Exactness:
    """Which case holds for this build, device and model, measured where it can be."""
    why = rollback_refusal(ctx)
    if why:
        return Exactness(False, why)
    if ggml.uses_llamafile():
        return Exactness(False, "this llama.cpp build uses llamafile's sgemm, which computes batches of 2 or more "
                                "rows with other kernels than single tokens. HINT: reinstall with scripts/setup.sh.")
    band, mode = ggml.row_band(), ggml.batch_invariant()
    if band is not None and on_gpu:
        exact, what = verify_is_exact(ctx, sizes=tuple(range(2, band + 1)),
                                      history=BOUNDARY_HISTORY, offsets=True)
        if exact:
            return Exactness(True, f"this graphics-card build has flashdesk's batch-invariant patch, and verify "
                                   f"batches of up to {band} rows measured bit-identical to single tokens here: "
                                   f"speculation checks at most {band - 1} drafted tokens per step", band)
        return Exactness(False, f"this graphics-card build has flashdesk's batch-invariant patch, but on this "
                                f"card {what}, so speculation would change the output: it stays off. HINT: report "
                                "the card's model to flashdesk (flashdesk doctor shows it).", band)
    exact, what = verify_is_exact(ctx)
    if exact:
        return Exactness(True, "verify rows measured bit-identical to single-token decodes")
    if mode == "off":
        return Exactness(False, f"flashdesk's batch-invariant mode is switched off (GGML_BATCH_INVARIANT=0), and "
                                f"{what}. HINT: unset GGML_BATCH_INVARIANT.")
    if on_gpu:
        return Exactness(False, f"this graphics-card build of llama.cpp lacks flashdesk's batch-invariant patch, and "
                                f"{what}. HINT: reinstall with scripts/setup.sh, which applies native/llama-patches "
                                "to CUDA and Metal builds.")
    return Exactness(False, what)


def rollback_refusal(ctx: Context, seq_id: int = 0) -> str | None:
    """Why rejected tokens could not be rolled back on this model's memory; None when they can."""
    if ctx.model.n_swa > 0:
        return (f"this model uses sliding-window attention (window {ctx.model.n_swa}), whose cache can drop cells "
                "that rolling back rejected tokens needs, so speculation could change its output: it stays off "
                "for this model (it answers at plain speed, exactly)")
    batch, bos = ctx.batch, ctx.model.bos_id if ctx.model.bos_id >= 0 else 1
    try:
        batch.clear()
        for i in range(4):
            batch.add(bos if i == 0 else (31 * i + 7) % ctx.model.n_vocab, i, seq_id, logits=i == 3)
        ctx.decode(batch)
        if not ctx.forget(seq_id, 2) or ctx.pos_max(seq_id) != 1:
            return ("this model's memory cannot remove rejected tokens (recurrent layers, as in Qwen3.5-3.8 and "
                    "other hybrid models), so speculation would corrupt its state: it stays off for this model "
                    "(it answers at plain speed, exactly)")
        return None
    finally:
        ctx.forget(seq_id)
        batch.clear()


def verify_is_exact(ctx: Context, seq_id: int = 0, sizes=(2, 3, 8, 16), history: int = 0,
                    offsets: bool = False) -> tuple[bool, str]:
    """Measure whether this backend computes a verify row exactly like a single-token decode.

    After `history` filler tokens (one prompt-like decode), decodes N_TOKENS fixed tokens one at
    a time, then again in batches of each size (first `o` of them singly, for every offset o <
    size when `offsets`), on a free sequence, and compares the logits bit for bit.
    Returns (exact, what differed). The sequence is left empty."""
    n = N_TOKENS
    history = max(0, min(history, ctx.n_ctx_seq - n - 1, ctx.batch.capacity - 1))
    bos = ctx.model.bos_id if ctx.model.bos_id >= 0 else 1
    toks = [(97 * j + 13) % ctx.model.n_vocab for j in range(n)]
    start = 1 + history  # position of toks[0]
    batch = ctx.batch

    def decode(first: int, count: int) -> list[np.ndarray]:
        batch.clear()
        rows = [batch.add(tok, start + first + j, seq_id, logits=True)
                for j, tok in enumerate(toks[first:first + count])]
        ctx.decode(batch)
        return list(np.array(ctx.logits(rows)))

    try:
        batch.clear()
        for i in range(start):
            batch.add(bos if i == 0 else (31 * i + 7) % ctx.model.n_vocab, i, seq_id, logits=False)
        ctx.decode(batch)
        ref = np.stack([decode(j, 1)[0] for j in range(n)])  # [n, V]
        for k in sizes:
            for o in range(k) if offsets else (0,):
                ctx.forget(seq_id, start)
                got = [row for j in range(o) for row in decode(j, 1)]
                for first in range(o, n, k):
                    got.extend(decode(first, min(k, n - first)))
                diff = float(np.max(np.abs(np.stack(got) - ref)))
                if diff != 0.0:
                    at = f" after {o} single tokens" if o else ""
                    return False, (f"a batch of {k} rows{at} gives other logits than single tokens "
                                   f"(max |diff| {diff:.3g})")
        return True, "verify rows are bit-identical to single-token decodes"
    finally:
        ctx.forget(seq_id)
        batch.clear()
