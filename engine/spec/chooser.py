"""Choose each step's path length T (0 = decode plainly) from what this machine measured.

A verify of k rows is not free on a CPU: c(k) grows almost linearly (DESIGN.md §5).
With per-position acceptance rates a_i (the running estimate of P(position i accepted |
positions before it accepted)), a path of T tokens commits on average
E(T) = 1 + sum_{j=1..T} prod_{i<=j} a_i tokens for c(T+1) + d(T) milliseconds, plain
decoding commits 1 for c(1). We take the T with the best tokens per millisecond, so
speculation only runs where it is expected to pay. When plain wins, a cheap probe every
`probe_every` steps keeps the estimates alive (content changes: a quote starts, code
repeats).

`CostCurve.measure` times the target on this machine once per (model, threads) and the
result is cached as JSON beside the model.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..context import Context

MAX_ROWS = 16


@dataclass
class CostCurve:
    verify_ms: list[float]  # [MAX_ROWS + 1] c(k): one decode of k rows of one sequence; index 0 unused
    n_threads: int
    context_tokens: int  # tokens already in the cache while measuring

    def cost(self, rows: int) -> float:
        return self.verify_ms[min(max(rows, 1), len(self.verify_ms) - 1)]

    @classmethod
    def measure(cls, ctx: Context, n_threads: int, seq_id: int = 0, context_tokens: int = 256,
                reps: int = 3) -> "CostCurve":
        """Time decodes of 1..MAX_ROWS rows after `context_tokens` of history on a free sequence
        (fewer when the sequence's context is small: history plus rows must fit in it)."""
        context_tokens = max(1, min(context_tokens, ctx.n_ctx_seq - MAX_ROWS))
        batch = ctx.batch
        filler = [ctx.model.bos_id if ctx.model.bos_id >= 0 else 0] * context_tokens
        try:
            batch.clear()
            for i, tok in enumerate(filler):
                batch.add(tok, i, seq_id, logits=False)
            ctx.decode(batch)
            curve = [0.0]
            for k in range(1, MAX_ROWS + 1):
                times = []
                for _ in range(reps):
                    batch.clear()
                    for j in range(k):
                        batch.add(filler[0], context_tokens + j, seq_id, logits=True)
                    t0 = time.perf_counter()
                    ctx.decode(batch)
                    times.append((time.perf_counter() - t0) * 1000.0)
                    ctx.forget(seq_id, context_tokens)
                # the fastest of the repeats: other processes only ever add time
                curve.append(min(times))
        finally:
            ctx.forget(seq_id)
            batch.clear()
        for k in range(2, len(curve)):  # more rows never cost less: smooth the noise away
            curve[k] = max(curve[k], curve[k - 1])
        return cls(curve, n_threads, context_tokens)

    @classmethod
    def cached(cls, ctx: Context, n_threads: int, path: str | os.PathLike | None, seq_id: int = 0) -> "CostCurve":
        if path is not None:
            try:
                data = json.loads(Path(path).read_text("utf-8"))
                if data.get("n_threads") == n_threads and len(data.get("verify_ms", [])) == MAX_ROWS + 1:
                    return cls(**data)
            except (OSError, ValueError, TypeError):
                pass
        curve = cls.measure(ctx, n_threads, seq_id)
        if path is not None:
            try:
                Path(path).write_text(json.dumps(asdict(curve), indent=1), "utf-8")
            except OSError:
                pass  # a read-only store: measure again next time
        return curve


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
