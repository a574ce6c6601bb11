"""A sequence's speculation state: its drafter, block length policy, running acceptance
estimates and stats. One per speculating request, owned by its slot; what it learned is
pooled per drafter (`DrafterRecord`) so the next request starts from experience.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..llama.sampler import TargetDistribution
from .chooser import StepBatch, choose_path_len, expected_committed
from .costs import CostModel
from .drafters.base import Drafter
from .params import AUTO, DFLASH, LOOKUP, MAX_BLOCK, MeasuredGain, SpecParams, SpecStats

PROBE_BUDGET = 0.015  # probing a drafter the chooser benched may cost at most this share of plain time
MIN_PROBE_EVERY = 8
MAX_MISSES = 4  # auto mode retires a drafter after this many fruitless probes in a row
# Auto mode promises never to be slower than plain decoding by more than noise. A request's drafter
# that has cost more than it won, by over LOSS_SHARE of the plain time so far plus LOSS_SLACK plain
# tokens (the first draft calls and a prompt's injection come before any gain can), is retired for
# the rest of the request; and trials of a drafter that has not paid here may lose at most
# LOSS_SHARE of the time auto mode has decoded in all (TrialBudget).
LOSS_SHARE = 0.02
LOSS_SLACK = 4
RETIRABLE = (DFLASH, LOOKUP)  # drafters whose answer decodes plainly once retired


def source_key(sources: Sequence[str | None], i: int) -> tuple[str | None, bool]:
    """Token i's source, and whether it continues a run of that source (a copy's first token is
    the uncertain one; the next ones follow it)."""
    return sources[i], i > 0 and sources[i - 1] == sources[i]


class DrafterRecord:
    """What one drafter has shown on this engine, across requests: per-position acceptance
    and its cost. A new request starts from it instead of a blind prior, so a drafter that
    keeps missing (a random draft, lookup on chat) costs the first request, not every one.

    Acceptance is kept as counts (a Beta posterior around `prior` worth `strength` trials),
    capped at `memory` trials per position so that it follows a change of use."""

    def __init__(self, prior: float = 0.6, strength: float = 2.0, memory: float = 200.0):
        self.prior, self.strength, self.memory = prior, strength, memory
        self.hits = [0.0] * (MAX_BLOCK - 1)  # [MAX_BLOCK-1] accepted at position i
        self.trials = [0.0] * (MAX_BLOCK - 1)  # [MAX_BLOCK-1] drafted at position i (earlier ones accepted)
        self.draft_ms = 0.0  # cost of one draft call for one sequence (0: not measured yet)
        self.upkeep_ms = 0.0  # per committed token, paid with or without a verify (a draft's feature copies)
        # A combined drafter's path tokens by where they came from: (source, continues that source's
        # run) -> [accepted, tried] given the path's earlier tokens were accepted. A forced grammar
        # span is near certain where a copied one is not; pricing both at the drafter's positional
        # rate would cut long forced spans short. Shared live by this drafter's requests.
        self.by_source: dict[tuple[str | None, bool], list[float]] = {}
        # What its requests measured (upkeep and misses in): plain-equivalent over spent time
        self.gain = MeasuredGain(memory=20.0)

    @property
    def accept_rate(self) -> list[float]:
        n0 = self.strength
        return [(h + self.prior * n0) / (n + n0) for h, n in zip(self.hits, self.trials)]

    def useless(self, min_trials: float = 16.0, floor: float = 0.1) -> bool:
        """Shown, over enough tries, to almost never get a first token accepted: auto mode
        then prefers another drafter (a mismatched or random draft; lookup still copies)."""
        return self.trials[0] >= min_trials and self.accept_rate[0] < floor

    def speed(self, costs: CostModel, t_max: int = MAX_BLOCK - 1) -> float:
        """Expected committed tokens per millisecond of the best path length (plain if no
        length beats it), from this record's acceptance and cost on this machine (needs costs.ready).
        The drafter's upkeep is paid on every committed token, plain or verified: a draft that must see
        every row is slower than plain decoding without it unless its paths win more than that."""
        u = self.upkeep_ms
        best = 1.0 / (costs.cost(1) + u)
        for t in range(1, t_max + 1):
            e = expected_committed(self.accept_rate, t)
            best = max(best, e / (costs.cost(t + 1) + self.draft_ms + u * e))
        return best

    def source_rate(self, key: tuple[str | None, bool], fallback: float) -> float:
        hits, trials = self.by_source.get(key, (0.0, 0.0))
        return (hits + fallback * self.strength) / (trials + self.strength)

    def observe_sources(self, sources: list[str], n_accepted: int) -> None:
        """A verified path's tokens by source: 0..n_accepted-1 accepted, n_accepted (if any) not."""
        for i, src in enumerate(sources[:n_accepted + 1]):
            cell = self.by_source.setdefault(source_key(sources, i), [0.0, 0.0])
            cell[0] += i < n_accepted
            cell[1] += 1.0
            if cell[1] > self.memory:
                cell[0], cell[1] = cell[0] * self.memory / cell[1], self.memory

    def merge(self, state: "SpecState") -> None:
        st = state.stats
        if state.costs is not None and state.costs.ready:
            self.gain.add(st, state.costs.cost(1))
        for i, (a, d) in enumerate(zip(st.accepted_at, st.drafted_at)):
            # drafted_at[i] counts verifies that drafted i; only those whose i-1 was accepted test i
            tested = st.accepted_at[i - 1] if i else d
            self.hits[i] += a
            self.trials[i] += min(tested, d)
            if self.trials[i] > self.memory:
                scale = self.memory / self.trials[i]
                self.hits[i] *= scale
                self.trials[i] *= scale
        if state.draft_ms:
            self.draft_ms = state.draft_ms if not self.draft_ms else 0.5 * (self.draft_ms + state.draft_ms)
        tokens = st.committed + st.plain_steps
        if tokens and st.upkeep_ms:
            per = st.upkeep_ms / tokens
            self.upkeep_ms = per if not self.upkeep_ms else 0.5 * (self.upkeep_ms + per)


def loss_ms(stats: SpecStats, c1_ms: float, baseline: float = 1.0) -> float:
    """What speculating cost this answer beyond decoding the same tokens at `baseline` times plain
    decoding's speed (negative: a gain)."""
    return stats.spent_ms - stats.plain_equivalent_ms(c1_ms) / baseline


class TrialBudget:
    """Auto mode's allowance for trying a drafter that has not paid here yet (a draft on chat that
    copies nothing costs its upkeep and misses): trials may lose at most LOSS_SHARE of the decoding
    time auto mode's answers took, counted over all of them; the first trial is always allowed, since
    nothing is known before it. Worker thread only."""

    def __init__(self):
        self.served_ms = 0.0  # decoding time of every answer auto mode speculated on
        self.lost_ms = 0.0  # what trials cost beyond plain decoding (gains count as nothing)
        self.trials = 0

    def allows(self) -> bool:
        return self.trials == 0 or self.lost_ms <= LOSS_SHARE * self.served_ms

    def add(self, stats: SpecStats, c1_ms: float, trial: bool, baseline: float = 1.0) -> None:
        """An auto answer's stats; `baseline`: the speed-up over plain decoding of what auto would
        have used instead of the drafter on trial (1.0: plain decoding)."""
        self.served_ms += stats.spent_ms
        if trial:
            self.trials += 1
            self.lost_ms += max(0.0, loss_ms(stats, c1_ms, baseline))


class SpecState:
    """One speculating request, from admission to its last token (the slot holds it as `slot.spec`).

    What it holds: the request's drafter, its block B and path selector (None: the drafter proposes
    its own path), the costs its path lengths are priced with (None: a fixed block drafts B-1 every
    step), running estimates of acceptance per path position and of one draft call's cost, seeded
    from the drafter's record here, the probe schedule that keeps a benched drafter's estimates
    honest, and the request's stats. At temperature > 0 it also holds the target's distribution and
    the request's own RNG, which acceptance and the sampling walk draw from.
    What it decides: the path length of each step (`plan_path`; `path_len` is the priced choice
    alone) and, in auto mode, when its drafter is retired for the rest of the request.
    When it ends (`free`), what it learned is pooled into the drafter's record."""

    def __init__(self, params: SpecParams, drafter: Drafter, block: int, n_ctx: int,
                 costs: CostModel | None = None, selector: str | None = None,
                 record: DrafterRecord | None = None, dist: TargetDistribution | None = None,
                 seed: int | None = None, trial: bool = False, budget: TrialBudget | None = None,
                 baseline: float = 1.0):
        """`trial`: auto mode is trying this drafter out instead of what runs at `baseline` times plain
        speed; `budget`: auto mode's, which it reports to."""
        self.params = params
        self.trial, self.budget, self.baseline = trial, budget, baseline
        self.drafter = drafter
        self.block = block  # B: anchor + B-1 drafted slots (the most; the chooser may draft fewer)
        self.n_ctx = n_ctx
        self.costs = costs  # None: always draft the whole block (a fixed `block` was asked for)
        self.selector = selector  # the DFlash 2 path selector; None: the drafter proposes its own path
        self.stats = SpecStats(mode=drafter.name, selector=selector)
        self.record = record if record is not None else DrafterRecord()
        # Running estimate of P(position i accepted | positions < i accepted), for choosing T.
        self.accept_rate = list(self.record.accept_rate[:block - 1])  # [B-1]
        self.draft_ms = self.record.draft_ms  # running estimate of one draft call's cost for this sequence
        self.probe_every = MIN_PROBE_EVERY  # doubles after every probe that gains nothing
        self.misses = 0  # fruitless probes in a row
        self._plain_run = 0
        self._probing = False
        self.retired = False  # auto mode found this drafter useless here: plain to the end, no drafter work
        # Sampling (temperature > 0): the target's distribution and this request's own RNG.
        self.dist = dist
        self.rng = np.random.default_rng(None if seed is None else seed % 2**64)  # a seed may be negative (-1)

    def free(self) -> None:
        """The request ended: pool what it learned, free the sampler."""
        self.record.merge(self)
        if self.budget is not None and self.costs is not None and self.costs.ready:
            self.budget.add(self.stats, self.costs.cost(1), self.trial, self.baseline)
        if self.dist is not None:
            self.dist.free()

    def path_cap(self, slot) -> int:
        """The most path tokens this step may verify (0 once auto mode retired the drafter)."""
        t_max = min(self.block - 1,
                    self.n_ctx - 1 - slot.n_past,  # the verify rows must fit the sequence's KV cells
                    slot.max_new - len(slot.output) - 1)  # accepted + bonus must fit max_tokens
        return 0 if self.retired else max(t_max, 0)

    def rates(self, sources: Sequence[str | None] | None = None) -> list[float]:
        """P(path token i accepted | those before it were), for a path whose tokens came from
        `sources` (a combined drafter's), else by position alone."""
        if not sources:
            return self.accept_rate
        return [self.record.source_rate(source_key(sources, i), rate) if sources[i] else rate
                for i, rate in zip(range(len(sources)), self.accept_rate)]

    def path_len(self, slot, available: int | None = None, batch: StepBatch | None = None,
                 sources: Sequence[str | None] | None = None) -> int:
        """The priced path length this step (of the `available` a free drafter already offers, whose
        tokens came from `sources`), on the step's `batch` (None: this sequence alone); 0 means decode
        plainly. Pure: `plan_path` is the step's choice, probes included."""
        return self._priced(slot, available, batch, sources)[0]

    def plan_path(self, slot, available: int | None = None, batch: StepBatch | None = None,
                  sources: Sequence[str | None] | None = None) -> int:
        """This step's path length: the priced one (`path_len`), or, after a run of plain steps the
        chooser priced, a one-token probe (the cheapest verify there is), which keeps the estimates honest."""
        t, chosen = self._priced(slot, available, batch, sources)
        if not chosen:
            return t  # not the chooser's pick: the cap, or plain before any decode was timed
        self._probing = False
        if t == 0:
            self._plain_run += 1
            if self._plain_run >= max(self.probe_every, self._probe_floor(batch or StepBatch({slot.seq_id: 1}),
                                                                          slot.seq_id)):
                self._plain_run, self._probing = 0, True
                return 1
        return t

    def _priced(self, slot, available: int | None, batch: StepBatch | None,
                sources: Sequence[str | None] | None) -> tuple[int, bool]:
        """(the path length, whether the chooser picked it): path_len's answer, and plan_path's cue."""
        t_max = self.path_cap(slot) if available is None else min(self.path_cap(slot), available)
        if t_max <= 0:
            return 0, False
        if self.costs is None:
            return t_max, False
        if not self.costs.ready:  # the first decodes of a fresh install: timed plainly, then priced
            return 0, False
        batch = batch or StepBatch({slot.seq_id: 1})
        return choose_path_len(self.rates(sources), t_max, self.costs, self.draft_ms, batch, slot.seq_id), True

    def _probe_floor(self, batch: StepBatch, seq_id: int) -> int:
        """Plain steps between probes so that probes that miss cost at most PROBE_BUDGET of the
        time. A probe adds a draft call and a row to the step's decode, which every stream in it
        waits for, and each of those streams may probe as often; beside other streams that row is
        a ubatch of its own: at 8 streams on a 2-core CPU, half a step."""
        assert self.costs is not None  # only a state that prices its steps probes
        plain = batch.cost(self.costs)
        extra = batch.cost(self.costs, seq_id, 1) - plain + self.draft_ms
        return max(MIN_PROBE_EVERY, math.ceil(len(batch.rows) * extra / (PROBE_BUDGET * plain)))

    def losing(self) -> bool:
        """Auto mode: has this answer's drafter cost more than it won, by more than the allowance
        (LOSS_SHARE of the plain time so far, plus LOSS_SLACK plain tokens)? It is then retired.
        Not a drafter with the grammar's forced spans: retiring it would lose them too, and its
        trials are priced against the spans alone (`baseline`, TrialBudget)."""
        if (self.params.mode != AUTO or self.retired or self.costs is None or not self.costs.ready
                or self.drafter.name not in RETIRABLE):
            return False
        c1 = self.costs.cost(1)
        plain = self.stats.plain_equivalent_ms(c1)
        return loss_ms(self.stats, c1) > LOSS_SHARE * plain + LOSS_SLACK * c1

    def observe_acceptance(self, n_drafted: int, n_accepted: int, decay: float = 0.8) -> None:
        """Positions 0..n_accepted-1 were accepted; position n_accepted (if drafted) was not."""
        if self._probing:  # back off from a drafter that keeps missing; reset when it hits
            self.misses = 0 if n_accepted else self.misses + 1
            self.probe_every = MIN_PROBE_EVERY if n_accepted else self.probe_every * 2
            if self.misses >= MAX_MISSES and self.params.mode == AUTO:
                self.retired = True
        for i in range(min(n_drafted, n_accepted + 1)):
            hit = 1.0 if i < n_accepted else 0.0
            self.accept_rate[i] = decay * self.accept_rate[i] + (1.0 - decay) * hit

    def observe_draft_cost(self, ms: float, decay: float = 0.8) -> None:
        self.draft_ms = ms if not self.draft_ms else decay * self.draft_ms + (1.0 - decay) * ms
