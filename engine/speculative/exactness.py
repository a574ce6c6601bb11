"""The load-time judge of lossless speculation: are verify rows bit-identical to single tokens here?

Greedy speculation emits what plain decoding would only where the target computes a row of a
k-row verify batch exactly as it computes that token decoded alone. Whether it does depends on
the build and the device, so the engine measures it once at load (`judge`), before its worker
starts, and speculation turns on by itself only where the measurement says yes:

- the CPU build carries flashdesk's patch too (native/llama-patches): batches of up to 16 rows take
  one matmul path whatever their width, for every weight type (stock ggml-cpu switches to the
  repacked GEMM at 4 rows and the tiled K-quant kernel at 8, so a Q4_K_M model's rows differ). The
  measurement covers the widths where stock paths switch, and decodes keep to the band;
- a build with llamafile's sgemm and no band is not exact (k >= 2 rows take other kernels); the
  patch keeps its band off llamafile, which then serves only prompt chunks above it;
- a stock CUDA or Metal build is not (on an H200, SmolLM2's 1- and 2-row logits differed by up
  to 8.0, with argmax flips): llama.cpp picks kernels by batch width;
- a GPU build with flashdesk's patch (native/llama-patches) promises a band: batches of up to
  `max_rows` rows computed alike. The measurement then covers every width of the band at every
  offset, across a 256-cell padding boundary of the KV length, and the engine caps every decode
  that holds plain or verify rows at that many rows.

Before any of that, speculation needs a rollback: rejected tokens must leave the target's memory
exactly as plain decoding would have it. It is measured on this model's own memory (attention,
recurrent snapshots, a sliding window: engine/llama/context.py says which removals each allows):
after a verify-like decode, every depth of rejected tail a verify of the engine's block can leave
is dropped and the next token decoded. `rollback_refusal`: the removal must happen and leave no
trace of what was rejected; where it does not, speculation stays off with the reason, and no
setting (not even spec_inexact) turns it on, since that would speculate into corrupted state.
`rollback_is_exact`: the next token's logits must then equal plain decoding's bit for bit, a
question of the build's batch numerics like the verify rows' own.

Not the verify stage itself (verify.py), nor the decision per request (policy.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..llama import ggml
from ..llama.context import Context

N_TOKENS = 16  # decoded singly as the reference, then in batches
CPU_SIZES = (2, 3, 4, 5, 8, 9, 16)  # the CPU band's widths measured at load: around stock ggml-cpu's switches (4, 8)
SWA_MEASURED = 256  # sliding windows up to this size are crossed before the rollback check
BOUNDARY_HISTORY = 250  # tokens before them in the GPU check, so that batches cross n_kv's 256 padding


@dataclass(frozen=True)
class Exactness:
    exact: bool  # verify rows (up to max_rows) are bit-identical to single-token decodes, measured
    why: str  # in words, for /health, the doctor and the Models page
    max_rows: int | None = None  # the most rows a decode may hold and stay exact; None: any number
    possible: bool = True  # False: rejected tokens cannot be rolled back here, so no setting may speculate


def judge(ctx: Context, on_gpu: bool, block: int = 8) -> Exactness:
    """Which case holds for this build, device and model, measured where it can be; `block`: the
    largest verify (anchor + path) the engine will decode, whose rejected tails must roll back."""
    why = rollback_refusal(ctx, depth=block - 1)
    if why:
        return Exactness(False, why, possible=False)
    verdict = _rows(ctx, on_gpu)
    if not verdict.exact:
        return verdict
    exact, what = rollback_is_exact(ctx, depth=min(block, verdict.max_rows or block) - 1)
    if not exact:
        return Exactness(False, f"{what}, so speculation would change the output: it stays off (the model answers "
                                "at plain speed, exactly)", verdict.max_rows)
    return verdict


def _rows(ctx: Context, on_gpu: bool) -> Exactness:
    """Are verify rows computed like single tokens on this build and device?"""
    case, band = ggml.exactness_case()
    if case == ggml.LLAMAFILE:
        return Exactness(False, "this llama.cpp build uses llamafile's sgemm, which computes batches of 2 or more "
                                "rows with other kernels than single tokens. HINT: reinstall with scripts/setup.sh.")
    if case == ggml.BANDED and on_gpu:
        assert band is not None, "a banded build says its band"
        exact, what = verify_is_exact(ctx, sizes=tuple(range(2, band + 1)),
                                      history=BOUNDARY_HISTORY, offsets=True)
        if exact:
            return Exactness(True, f"this graphics-card build has flashdesk's batch-invariant patch, and verify "
                                   f"batches of up to {band} rows measured bit-identical to single tokens here: "
                                   f"speculation checks at most {band - 1} drafted tokens per step", band)
        return Exactness(False, f"this graphics-card build has flashdesk's batch-invariant patch, but on this "
                                f"card {what}, so speculation would change the output: it stays off. HINT: report "
                                "the card's model to flashdesk (flashdesk doctor shows it).", band)
    if case == ggml.BANDED:  # the CPU backend's band
        assert band is not None, "a banded build says its band"
        exact, what = verify_is_exact(ctx, sizes=tuple(k for k in CPU_SIZES if k <= band))
        if exact:
            return Exactness(True, f"this build has flashdesk's batch-invariant patch, and verify batches of up to "
                                   f"{band} rows measured bit-identical to single tokens here", band)
        return Exactness(False, f"this build has flashdesk's batch-invariant patch, but on this computer {what}, so "
                                "speculation would change the output: it stays off. HINT: report this computer's "
                                "processor to flashdesk (flashdesk doctor shows it).", band)
    exact, what = verify_is_exact(ctx)
    if exact:
        return Exactness(True, "verify rows measured bit-identical to single-token decodes")
    if case == ggml.SWITCHED_OFF:
        return Exactness(False, f"flashdesk's batch-invariant mode is switched off (GGML_BATCH_INVARIANT=0), and "
                                f"{what}. HINT: unset GGML_BATCH_INVARIANT.")
    device = "graphics-card build" if on_gpu else "build"
    return Exactness(False, f"this {device} of llama.cpp lacks flashdesk's batch-invariant patch, and {what}. HINT: "
                            "reinstall with scripts/setup.sh, which applies native/llama-patches to every build.")


class _Probe:
    """A verify-like decode and its rollback on a free sequence: a prefix (past a small sliding
    window, so the cache has reused cells first), the kept token x_0 decoded together with d
    rejected ones, the rejected ones dropped, then the next token y. Returns y's logits."""

    def __init__(self, ctx: Context, seq_id: int, depth: int):
        model = ctx.model
        self.ctx, self.seq_id = ctx, seq_id
        # a large window would cost a long prefill per depth; the rule that keeps its cells is the same
        n = 8 + (model.n_swa if model.n_swa <= SWA_MEASURED else 0)
        self.n = max(1, min(n, ctx.n_ctx_seq - depth - 4, ctx.batch.capacity))
        bos = model.bos_id if model.bos_id >= 0 else 1
        self.prefix = [bos] + [(31 * i + 7) % model.n_vocab for i in range(1, self.n)]
        self.x0, self.y = 11, (model.n_vocab // 2) + 5
        # attention alone drops a tail exactly at any depth: one depth shows the removal works
        top = max(1, min(depth, ctx.n_ctx_seq - 32, ctx.batch.capacity - 1))
        self.depths = range(1, top + 1) if model.recurrent or model.n_swa else (top,)

    def tail(self, d: int, salt: int) -> list[int]:
        return [(53 * j + 17 * salt + 29) % self.ctx.model.n_vocab for j in range(d)]

    def _decode(self, tokens: list[int], start: int, logits: bool) -> None:
        batch = self.ctx.batch
        batch.clear()
        for j, tok in enumerate(tokens):
            batch.add(tok, start + j, self.seq_id, logits=logits and j == len(tokens) - 1)
        self.ctx.decode(batch)

    def next_logits(self, rejected: list[int]) -> np.ndarray | None:
        """[V] logits of y; None where the memory refused to drop the rejected tokens."""
        ctx = self.ctx
        ctx.forget(self.seq_id)
        self._decode(self.prefix, 0, False)
        self._decode([self.x0] + rejected, self.n, False)
        if rejected and (not ctx.forget(self.seq_id, self.n + 1) or ctx.pos_max(self.seq_id) != self.n):
            return None
        self._decode([self.y], self.n + 1, True)
        return np.array(ctx.logits([0])[0])

    def close(self) -> None:
        self.ctx.forget(self.seq_id)
        self.ctx.batch.clear()


def rollback_refusal(ctx: Context, seq_id: int = 0, depth: int = 7) -> str | None:
    """Why rejected tokens cannot be rolled back on this model's memory (the removal is refused, or
    what was rejected still shows in the next token's logits); None when every rollback of 1..depth
    tokens leaves no trace. Comparing two rejected tails of the same shape keeps the build's batch
    numerics out of it: that is `rollback_is_exact`'s question. The sequence is left empty."""
    if ctx.model.recurrent and (ctx.rollback or 0) < depth:
        return (f"this model has recurrent layers (as in Qwen3.5-3.8 and other hybrid models) and this llama.cpp "
                f"keeps {ctx.rollback or 0} of the {depth} state snapshots per sequence that rolling back "
                "rejected tokens needs, so speculation would corrupt its state: it stays off for this model "
                "(it answers at plain speed, exactly)")
    probe = _Probe(ctx, seq_id, depth)
    try:
        for d in probe.depths:
            a, b = probe.next_logits(probe.tail(d, 1)), probe.next_logits(probe.tail(d, 2))
            if a is None or b is None:
                return ("this model's memory cannot remove rejected tokens (recurrent layers without rollback "
                        "snapshots, as in some hybrid models), so speculation would corrupt its state: it stays off "
                        "for this model (it answers at plain speed, exactly)")
            if not np.array_equal(a, b):
                return (f"rolled-back tokens still change this model's next answer (after rolling back {d}, the "
                        f"logits differ by up to {float(np.max(np.abs(a - b))):.3g}), so speculation would corrupt "
                        "its state: it stays off for this model (it answers at plain speed, exactly)")
        return None
    finally:
        probe.close()


def rollback_is_exact(ctx: Context, seq_id: int = 0, depth: int = 7) -> tuple[bool, str]:
    """Is the next token after a rollback of 1..depth rejected tokens computed exactly as in plain
    decoding (every token alone)? Returns (exact, what differed). The sequence is left empty."""
    probe = _Probe(ctx, seq_id, depth)
    try:
        ref = probe.next_logits([])  # x_0 alone, then y: plain decoding
        for d in probe.depths:
            got = probe.next_logits(probe.tail(d, 1))
            # judge() asks only where rollback works; a refusal here failed before as it fails now
            assert got is not None and ref is not None, "the memory refused a rollback"
            diff = float(np.max(np.abs(got - ref)))
            if diff != 0.0:
                return False, (f"after a rollback of {d} rejected tokens the next token's logits differ from plain "
                               f"decoding by up to {diff:.3g}")
        return True, "rollbacks measured exact"
    finally:
        probe.close()


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

    def history_only() -> None:  # the sequence holds the history and nothing after it
        if ctx.pos_max(seq_id) >= start - 1 and ctx.forget(seq_id, start):
            return
        ctx.forget(seq_id)  # empty, or a memory that cannot drop this tail: decode the history (again)
        batch.clear()
        for i in range(start):
            batch.add(bos if i == 0 else (31 * i + 7) % ctx.model.n_vocab, i, seq_id, logits=False)
        ctx.decode(batch)

    try:
        ctx.forget(seq_id)
        history_only()
        ref = np.stack([decode(j, 1)[0] for j in range(n)])  # [n, V]
        for k in sizes:
            for o in range(k) if offsets else (0,):
                history_only()
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
