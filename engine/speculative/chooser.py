"""Choose each step's path length T (0 = decode plainly) from what this machine measured.

A verify of k rows is not free on a CPU: c(k) grows almost linearly (DESIGN.md §5).
With per-position acceptance rates a_i (the running estimate of P(position i accepted |
positions before it accepted)), a path of T tokens commits on average
E(T) = 1 + sum_{j=1..T} prod_{i<=j} a_i tokens for c(T+1) + d(T) milliseconds, plain
decoding commits 1 for c(1). We take the T with the best tokens per millisecond, so
speculation only runs where it is expected to pay. When plain wins, a cheap probe every
`probe_every` steps keeps the estimates alive (content changes: a quote starts, code
repeats).

The engine measures the curve (CurveMeasurement) while it is idle, once per (model,
threads): the result is cached as JSON beside the model.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..llama.context import Context

MAX_ROWS = 16


@dataclass
class CostCurve:
    verify_ms: list[float]  # [MAX_ROWS + 1] c(k): one decode of k rows of one sequence; index 0 unused
    n_threads: int
    context_tokens: int  # tokens already in the cache while measuring

    def cost(self, rows: int) -> float:
        return self.verify_ms[min(max(rows, 1), len(self.verify_ms) - 1)]

    @classmethod
    def load(cls, path: str | os.PathLike, n_threads: int) -> "CostCurve | None":
        """The curve measured earlier for this thread count (None: none, or another count)."""
        try:
            data = json.loads(Path(path).read_text("utf-8"))
            if data.get("n_threads") == n_threads and len(data.get("verify_ms", [])) == MAX_ROWS + 1:
                return cls(**data)
        except (OSError, ValueError, TypeError):
            pass
        return None

    def save(self, path: str | os.PathLike) -> None:
        try:
            Path(path).write_text(json.dumps(asdict(self), indent=1), "utf-8")
        except OSError:
            pass  # a read-only store: measure again next time


class CurveMeasurement:
    """A CostCurve measured one decode at a time, so that the engine can measure while it is idle
    and still serve a request the moment it arrives (a fresh install's first chat must not wait
    seconds for it). Each `step()` is one decode of at most MAX_ROWS rows, so a request waits at
    most about c(MAX_ROWS); the last step returns the curve. `pause()` gives the sequence back to
    the engine: the filler history is removed and decoded again later, the timings so far are kept.

    The timed decodes run after `context_tokens` of history on a free sequence (fewer when the
    sequence's context is small: history plus rows must fit in it)."""

    def __init__(self, ctx: Context, n_threads: int, seq_id: int, context_tokens: int = 256, reps: int = 3):
        self.ctx, self.n_threads, self.seq_id, self.reps = ctx, n_threads, seq_id, reps
        self.context_tokens = max(1, min(context_tokens, ctx.n_ctx_seq - MAX_ROWS))
        self.filler = ctx.model.bos_id if ctx.model.bos_id >= 0 else 0
        self.times: list[list[float]] = [[] for _ in range(MAX_ROWS + 1)]  # [MAX_ROWS + 1][<= reps] ms
        self.history = 0  # filler tokens in the sequence's cache so far

    @property
    def primed(self) -> bool:
        return self.history > 0

    def step(self) -> CostCurve | None:
        ctx, batch, n = self.ctx, self.ctx.batch, self.context_tokens
        try:
            batch.clear()
            if self.history < n:  # the history first, MAX_ROWS tokens per step
                for i in range(self.history, min(self.history + MAX_ROWS, n)):
                    batch.add(self.filler, i, self.seq_id, logits=False)
                ctx.decode(batch)
                self.history += batch.n
                return None
            k = next(k for k in range(1, MAX_ROWS + 1) if len(self.times[k]) < self.reps)
            for j in range(k):
                batch.add(self.filler, n + j, self.seq_id, logits=True)
            t0 = time.perf_counter()
            ctx.decode(batch)
            self.times[k].append((time.perf_counter() - t0) * 1000.0)
            if not ctx.forget(self.seq_id, n):  # recurrent memory rolls back only inside a decode
                self.pause()  # the history is decoded again next step
        except BaseException:
            self.pause()
            raise
        finally:
            batch.clear()
        if len(self.times[MAX_ROWS]) < self.reps:
            return None
        self.pause()
        curve = [0.0] + [min(t) for t in self.times[1:]]  # the fastest repeat: other processes only add time
        for k in range(2, len(curve)):  # more rows never cost less: smooth the noise away
            curve[k] = max(curve[k], curve[k - 1])
        return CostCurve(curve, self.n_threads, n)

    def pause(self) -> None:
        if self.history:
            self.ctx.forget(self.seq_id)
            self.history = 0


def expected_committed(rates: list[float], t: int) -> float:
    """E[accepted + bonus] for a path of t tokens with conditional acceptance rates."""
    total, run = 1.0, 1.0
    for i in range(t):
        run *= rates[i]
        total += run
    return total


def choose_path_len(rates: list[float], t_max: int, curve: CostCurve, draft_ms: float = 0.0) -> int:
    """The path length with the most expected committed tokens per millisecond (0 = plain)."""
    best_t, best_rate = 0, 1.0 / curve.cost(1)
    for t in range(1, t_max + 1):
        rate = expected_committed(rates, t) / (curve.cost(t + 1) + draft_ms)
        if rate > best_rate * 1.02:  # a 2% margin: do not speculate on noise
            best_t, best_rate = t, rate
    return best_t
