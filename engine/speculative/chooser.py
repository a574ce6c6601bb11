"""Choose each step's path length T (0 = decode plainly) from what this machine measured.

A verify of k rows is not free on a CPU: c(k) grows almost linearly (DESIGN.md §5).
With per-position acceptance rates a_i (the running estimate of P(position i accepted |
positions before it accepted)), a path of T tokens commits on average
E(T) = 1 + sum_{j=1..T} prod_{i<=j} a_i tokens for c(T+1) + d(T) milliseconds, plain
decoding commits 1 for c(1). We take the T with the best tokens per millisecond, so
speculation only runs where it is expected to pay. Several streams share one decode: a path
is priced on the batch it joins, from a cost surface over rows and sequences (`StepBatch`).
When plain wins, a cheap probe every `probe_every` steps keeps the estimates alive (content
changes: a quote starts, code repeats).

The engine measures the curve (CurveMeasurement) while it is idle, once per (model,
threads): the result is cached as JSON beside the model.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..llama import ggml
from ..llama.context import Context

MAX_ROWS = 16


SEQS = (2, 4, 8)  # the cost surface's sequence counts (one sequence is verify_ms)
ROWS_PER_SEQ = (1, 2, 4, 8, 16)  # and rows per sequence


@dataclass
class CostCurve:
    verify_ms: list[float]  # [MAX_ROWS + 1] c(k): one decode of k rows of one sequence; index 0 unused
    n_threads: int
    context_tokens: int  # tokens already in the cache while measuring (per sequence)
    # The cost surface: batch_ms[i][j], one decode of SEQS[i] sequences of ROWS_PER_SEQ[j] rows each
    # (only the sequence counts the context holds). Several streams share a decode, and its cost
    # grows with all of their rows: a path is priced on the batch it joins.
    batch_ms: list[list[float]] = field(default_factory=list)
    build: str = ""  # ggml.build_id() of the llama.cpp that measured it: another build's kernels cost otherwise

    def cost(self, rows: int) -> float:
        return self.verify_ms[min(max(rows, 1), len(self.verify_ms) - 1)]

    def batch_cost(self, rows: int, seqs: int) -> float:
        """One decode of `rows` rows over `seqs` sequences: c(rows) for one, else interpolated
        on the surface (linear in rows per sequence and in sequences, extrapolated past its edge)."""
        if seqs <= 1 or not self.batch_ms:
            return self.cost(rows) if rows <= MAX_ROWS else self._extend(self.cost, rows, MAX_ROWS)
        counts = [1] + list(SEQS[:len(self.batch_ms)])
        s = min(seqs, counts[-1])
        i = max(k for k in range(len(counts)) if counts[k] <= s)
        lo = self._at(i, rows / seqs)
        if counts[i] == s or i + 1 == len(counts):
            return lo * (seqs / counts[i]) if seqs > counts[-1] else lo
        hi = self._at(i + 1, rows / seqs)
        w = (s - counts[i]) / (counts[i + 1] - counts[i])
        return lo + w * (hi - lo)

    def _at(self, i: int, per_seq: float) -> float:
        """The surface at sequence count index i (0: one sequence), `per_seq` rows each."""
        if i == 0:
            return self.cost(round(per_seq)) if per_seq <= MAX_ROWS else self._extend(self.cost, per_seq, MAX_ROWS)
        ms = self.batch_ms[i - 1]
        xs = ROWS_PER_SEQ
        per_seq = max(per_seq, xs[0])
        j = next((k for k in range(1, len(xs)) if xs[k] >= per_seq), len(xs) - 1)
        return ms[j - 1] + (ms[j] - ms[j - 1]) * (per_seq - xs[j - 1]) / (xs[j] - xs[j - 1])

    @staticmethod
    def _extend(cost, rows: float, last: int) -> float:
        """Past the measured rows: the last slope goes on (a prompt chunk in the same batch)."""
        return cost(last) + (cost(last) - cost(last - 1)) * (rows - last)

    @classmethod
    def load(cls, path: str | os.PathLike, n_threads: int, build: str = "") -> "CostCurve | None":
        """The curve measured earlier for this thread count and build (None: none, or another)."""
        try:
            data = json.loads(Path(path).read_text("utf-8"))
            if (data.get("n_threads") == n_threads and len(data.get("verify_ms", [])) == MAX_ROWS + 1
                    and data.get("build", "") == build
                    and "batch_ms" in data):  # a curve from before the surface: measured again
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
    seconds for it). Each `step()` is one decode of at most SEQS[-1] x MAX_ROWS rows, so a request
    waits at most that long; the last step returns the curve. `pause()` gives the sequences back to
    the engine: the filler history is removed and decoded again later, the timings so far are kept.

    The timed decodes run after `context_tokens` of history on each of the free sequences up to
    `seq_id` (fewer tokens when a sequence's context is small: history plus rows must fit): c(k) on
    one, then the surface on SEQS of them."""

    def __init__(self, ctx: Context, n_threads: int, seq_id: int, context_tokens: int = 256, reps: int = 3):
        self.ctx, self.n_threads, self.reps = ctx, n_threads, reps
        self.context_tokens = max(1, min(context_tokens, ctx.n_ctx_seq - MAX_ROWS))
        self.filler = ctx.model.bos_id if ctx.model.bos_id >= 0 else 0
        # The surface over sequences would decode filler into other slots' sequences and lose the
        # prompt prefixes they keep (a regression test_rollback_memory caught): off until it can
        # measure on sequences of its own.
        self.seqs: list[int] = []
        self.seq_ids = list(range(seq_id + 1 - max(self.seqs, default=1), seq_id + 1))  # the last is c(k)'s
        self.points = [(1, k) for k in range(1, MAX_ROWS + 1)] + [(s, r) for s in self.seqs for r in ROWS_PER_SEQ]
        self.times: dict[tuple[int, int], list[float]] = {p: [] for p in self.points}  # (seqs, rows each) -> ms
        self.history = dict.fromkeys(self.seq_ids, 0)  # filler tokens in each sequence's cache so far

    @property
    def primed(self) -> bool:
        return any(self.history.values())

    def step(self) -> CostCurve | None:
        ctx, batch, n = self.ctx, self.ctx.batch, self.context_tokens
        point = next((p for p in self.points if len(self.times[p]) < self.reps), None)
        try:
            batch.clear()
            if point is not None:
                seqs, rows = point
                ids = self.seq_ids[-seqs:]
                short = [q for q in ids if self.history[q] < n]
                if short:  # the history first, MAX_ROWS tokens per sequence per step
                    for q in short:
                        for i in range(self.history[q], min(self.history[q] + MAX_ROWS, n)):
                            batch.add(self.filler, i, q, logits=False)
                    ctx.decode(batch)
                    for q in short:
                        self.history[q] = min(self.history[q] + MAX_ROWS, n)
                    return None
                for q in ids:
                    for j in range(rows):
                        batch.add(self.filler, n + j, q, logits=True)
                t0 = time.perf_counter()
                ctx.decode(batch)
                self.times[point].append((time.perf_counter() - t0) * 1000.0)
                if not all(ctx.forget(q, n) for q in ids):  # recurrent memory rolls back only inside a decode
                    self.pause()  # the history is decoded again next step
        except BaseException:
            self.pause()
            raise
        finally:
            batch.clear()
        if any(len(t) < self.reps for t in self.times.values()):
            return None
        self.pause()
        fastest = {p: min(t) for p, t in self.times.items()}  # the fastest repeat: other processes only add time
        curve = [0.0] + _rising([fastest[(1, k)] for k in range(1, MAX_ROWS + 1)])
        surface = [_rising([fastest[(s, r)] for r in ROWS_PER_SEQ]) for s in self.seqs]
        return CostCurve(curve, self.n_threads, n, surface, ggml.build_id())

    def pause(self) -> None:
        for q, filled in self.history.items():
            if filled:
                self.ctx.forget(q)
                self.history[q] = 0


def _rising(ms: list[float]) -> list[float]:
    """More rows never cost less: smooth the noise away."""
    out = list(ms)
    for k in range(1, len(out)):
        out[k] = max(out[k], out[k - 1])
    return out


def expected_committed(rates: list[float], t: int) -> float:
    """E[accepted + bonus] for a path of t tokens with conditional acceptance rates."""
    total, run = 1.0, 1.0
    for i in range(t):
        run *= rates[i]
        total += run
    return total


@dataclass
class StepBatch:
    """What a step's decode carries when one more sequence's path is priced: its rows (this
    sequence's own row included), its sequences, the tokens it commits on average, and the draft
    time spent for it. Alone, a sequence's batch is one row committing one token."""

    rows: int = 1
    seqs: int = 1
    tokens: float = 1.0
    draft_ms: float = 0.0

    def add(self, t: int, expected: float, draft_ms: float) -> None:
        """A path of t tokens joins, expected to commit `expected` (its plain token was counted)."""
        if t:
            self.rows += t
            self.tokens += expected - 1.0
            self.draft_ms += draft_ms


def choose_path_len(rates: list[float], t_max: int, curve: CostCurve, draft_ms: float = 0.0,
                    batch: StepBatch | None = None) -> int:
    """The path length with the most expected committed tokens per millisecond of the whole
    step (0 = plain). With other streams in the batch, a path's rows cost what they add to
    the shared decode, measured against what that decode already commits: at 4 or 8 streams a
    row costs more than it does to one sequence alone, and fewer paths pay."""
    b = batch or StepBatch()
    best_t, best_rate = 0, b.tokens / (curve.batch_cost(b.rows, b.seqs) + b.draft_ms)
    for t in range(1, t_max + 1):
        rate = (b.tokens - 1.0 + expected_committed(rates, t)) / (
            curve.batch_cost(b.rows + t, b.seqs) + b.draft_ms + draft_ms)
        if rate > best_rate * 1.02:  # a 2% margin: do not speculate on noise
            best_t, best_rate = t, rate
    return best_t
