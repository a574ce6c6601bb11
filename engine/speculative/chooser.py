"""Choose each step's path length T (0 = decode plainly) from what this machine costs.

A verify of k rows is not free on a CPU: c(k) grows almost linearly (docs/llama-cpp.md, What it costs here).
With per-position acceptance rates a_i (the running estimate of P(position i accepted |
positions before it accepted)), a path of T tokens commits on average
E(T) = 1 + sum_{j=1..T} prod_{i<=j} a_i tokens for c(T+1) + d(T) milliseconds, plain
decoding commits 1 for c(1). We take the T with the best tokens per millisecond, so
speculation only runs where it is expected to pay. Several streams share one decode: a path
is priced on the batch it joins (`StepBatch`), from the cost model the engine learns from its
own decodes (costs.py). When plain wins, a cheap probe every `probe_every` steps keeps the
estimates alive (content changes: a quote starts, code repeats).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .costs import CostModel


def expected_committed(rates: list[float], t: int) -> float:
    """E[accepted + bonus] for a path of t tokens with conditional acceptance rates."""
    total, run = 1.0, 1.0
    for i in range(t):
        run *= rates[i]
        total += run
    return total


@dataclass
class StepBatch:
    """What a step's decode carries when one more sequence's path is priced: its rows per sequence
    id (prompt chunks, one row per generating sequence, the paths priced so far), the tokens it
    commits on average, and the draft time spent for it. Alone, a sequence's batch is its one row
    committing one token. llama.cpp computes a decode in ubatches (costs.ubatches): beside other
    streams' single rows, a path's rows are a ubatch of their own, and priced as one."""

    rows: dict[int, int] = field(default_factory=lambda: {0: 1})
    tokens: float = 1.0
    draft_ms: float = 0.0
    n_ubatch: int = 512

    def cost(self, costs: CostModel, seq_id: int = 0, t: int = 0) -> float:
        """The decode's estimated milliseconds, with `t` more rows for `seq_id`."""
        rows = {**self.rows, seq_id: self.rows.get(seq_id, 0) + t} if t else self.rows
        return costs.decode_cost(rows, self.n_ubatch)

    def add(self, seq_id: int, t: int, expected: float, draft_ms: float) -> None:
        """A path of t tokens for `seq_id` joins, expected to commit `expected` (its plain token was counted)."""
        if t:
            self.rows[seq_id] = self.rows.get(seq_id, 0) + t
            self.tokens += expected - 1.0
            self.draft_ms += draft_ms


def choose_path_len(rates: list[float], t_max: int, costs: CostModel, draft_ms: float = 0.0,
                    batch: StepBatch | None = None, seq_id: int = 0) -> int:
    """The path length for `seq_id` with the most expected committed tokens per millisecond of the
    whole step (0 = plain). With other streams in the batch, a path's rows cost what they add to
    the shared decode, measured against what that decode already commits: at 4 or 8 streams its
    rows are a ubatch of their own beside a decode that commits 4 or 8 tokens, and few paths pay."""
    b = batch or StepBatch({seq_id: 1})
    best_t, best_rate = 0, b.tokens / (b.cost(costs) + b.draft_ms)
    for t in range(1, t_max + 1):
        rate = (b.tokens - 1.0 + expected_committed(rates, t)) / (b.cost(costs, seq_id, t) + b.draft_ms + draft_ms)
        if rate > best_rate * 1.02:  # a 2% margin: do not speculate on noise
            best_t, best_rate = t, rate
    return best_t
