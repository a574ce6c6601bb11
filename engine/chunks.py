"""How a prompt is cut into decodes, so that an answer never depends on what was cached or on
who else the engine was serving.

A prompt row is computed by the kernels of the decode it is in. Inside the verify band
(speculative/exactness.py) every width computes a row as a single token would; above it, stock
kernels take over and pick their arithmetic from the decode's width (the repacked K-quant GEMM
takes rows in groups of four and the last ones alone). Measured on a Q4_K_M model: a kept prefix
ending at token 61 instead of 60 moved the prompt's last logits by up to 0.058. So where that
holds, the rows a prompt gets depend on where a kept prefix ended and on which other sequences'
rows shared its decode, and greedy answers with them.

`measure` decodes one prompt four ways at load (in one decode; cut at an odd row; with its last
rows in a decode of their own, inside the band, as after a long kept prefix; beside another
sequence's row) and compares the last row's logits bit for bit:
- the same: prompt rows do not depend on the decode they are in. A prompt chunk joins the step's
  batch beside the other sequences' rows, and a kept prefix is reused to the token.
- not the same: every prompt is cut at fixed positions, multiples of `CHUNK`, and each chunk is
  decoded alone. A prompt's rows are then the same whatever was kept and whoever else is served,
  and a kept prefix is reused in whole chunks only (positions decoded as a whole chunk of a
  prompt, never an answer's rows, which were decoded one at a time).

Prompt speed hardly depends on the chunk: `python -m bench prompt_speed --chunk-sizes 64,512` times both.
Not the decode step itself (speculative/loop.py) nor which slot keeps what (prefix.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .llama.context import Context

CHUNK = 64  # where chunks are aligned: a prompt is cut at multiples of this
MEASURED = 40  # prompt tokens measured at load: past the 16-row band, so stock kernels run
CUT = 21  # the odd cut of the second way: two widths that are not multiples of four
TAIL = 5  # the third way's last decode: rows in the band, after many cells of the sequence


@dataclass(frozen=True)
class Chunks:
    aligned: bool  # cut at multiples of `size`, each chunk decoded alone; reuse in whole chunks
    why: str  # in words, for /health
    size: int = CHUNK

    def cut(self, n_past: int, pending: int, room: int) -> int:
        """Prompt rows a slot at `n_past` with `pending` prompt tokens decodes this step, given `room`."""
        n = min(pending, room)
        return min(n, self.size - n_past % self.size) if self.aligned else n

    def reusable(self, n: int) -> int:
        """The most of `n` shared positions a later prompt may take from a kept prefix."""
        return n - n % self.size if self.aligned else n

    def kept(self, n_past: int, n_prompt: int) -> int:
        """Positions of a finished sequence that a later prompt may reuse: aligned, the prompt's
        whole chunks (an answer's rows were decoded one by one, not as a prompt's)."""
        return min(n_past, self.reusable(n_prompt)) if self.aligned else n_past


def measure(ctx: Context, seq_ids: tuple[int, int] = (0, 1)) -> Chunks:
    """Are prompt rows the same whatever decode they are in? Decoded on free sequences (`seq_ids`:
    the prompt's and, if the context has two, a neighbour's), left empty. Call it on a thread that
    ends with it (context.on_own_thread)."""
    size = min(CHUNK, ctx.batch.capacity)
    n = min(MEASURED, ctx.batch.capacity - 1, ctx.n_ctx_seq - 1)
    bos = ctx.model.bos_id if ctx.model.bos_id >= 0 else 1
    prompt = [bos] + [(61 * i + 5) % ctx.model.n_vocab for i in range(1, n)]
    seq, other = seq_ids
    beside = ctx.n_seq > 1

    def last_logits(cuts: list[int], neighbour: bool = False) -> np.ndarray:
        ctx.forget(seq)
        if neighbour:
            ctx.forget(other)
            _decode(ctx, [(bos, 0, other, False)])
        start, row = 0, 0
        for end in cuts + [n]:
            rows = [(prompt[j], j, seq, j == n - 1) for j in range(start, end)]
            if neighbour and end == n:
                rows.append((prompt[1], 1, other, False))
            row = _decode(ctx, rows)
            start = end
        return np.array(ctx.logits([row])[0])

    try:
        ref = last_logits([])
        ways = [("cut at an odd row", [CUT], False), ("ending in a short chunk", [n - TAIL], False)]
        ways += [("beside another sequence", [], True)] if beside else []
        for name, cuts, neighbour in ways:
            diff = float(np.max(np.abs(last_logits(cuts, neighbour) - ref)))
            if diff != 0.0:
                return Chunks(True, f"prompt rows here depend on the decode they are in (a prompt {name} gives "
                                    f"logits up to {diff:.3g} apart), so prompts are cut at every {size}th token "
                                    f"and each chunk decoded alone: answers do not depend on what was cached or "
                                    f"who else is served; a kept prefix is reused in whole chunks", size)
        return Chunks(False, "prompt rows measured the same in any decode: prompt chunks join other requests' "
                             "steps, and a kept prefix is reused to the token", size)
    finally:
        ctx.forget(seq)
        if beside:
            ctx.forget(other)
        ctx.batch.clear()


def _decode(ctx: Context, rows: list[tuple[int, int, int, bool]]) -> int:
    """Decode (token, position, seq_id, logits) rows in one batch; returns the batch index of the last."""
    batch = ctx.batch
    batch.clear()
    last = 0
    for tok, pos, seq_id, logits in rows:
        i = batch.add(tok, pos, seq_id, logits=logits)
        last = i if logits else last
    ctx.decode(batch)
    return last
