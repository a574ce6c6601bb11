"""A sequence's speculation state: its drafter, block length policy, running acceptance
estimates and stats. One per speculating request, owned by its slot.
"""

from __future__ import annotations

import numpy as np

from ..sampling import TargetDistribution
from .chooser import CostCurve, choose_path_len
from .drafter import Drafter
from .params import SpecParams, SpecStats


class SpecState:
    def __init__(self, params: SpecParams, drafter: Drafter, block: int, n_ctx: int,
                 curve: CostCurve | None = None, selector: str | None = None, prior: float = 0.6,
                 probe_every: int = 8, dist: TargetDistribution | None = None, seed: int | None = None):
        self.params = params
        self.drafter = drafter
        self.block = block  # B: anchor + B-1 drafted slots (the most; the chooser may draft fewer)
        self.n_ctx = n_ctx
        self.curve = curve  # None: always draft the whole block (a fixed `block` was asked for)
        self.stats = SpecStats(mode=drafter.name, selector=selector)
        # Running estimate of P(position i accepted | positions < i accepted), for choosing T.
        self.accept_rate = [prior] * (block - 1)  # [B-1]
        self.draft_ms = 0.0  # running estimate of one draft call's cost for this sequence
        self.probe_every = probe_every  # doubles after every probe that gains nothing
        self.max_probe_every = 64  # beyond this, auto mode gives up speculating for the request
        self._plain_run = 0
        self._probing = False
        self.retired = False  # auto mode found this drafter useless here: plain to the end, no drafter work
        # Sampling (temperature > 0): the target's distribution and this request's own RNG.
        self.dist = dist
        self.rng = np.random.default_rng(seed)

    def free(self) -> None:
        if self.dist is not None:
            self.dist.free()

    def path_len(self, slot) -> int:
        """Path tokens to draft this step: 0 means decode plainly."""
        t_max = min(self.block - 1,
                    self.n_ctx - 1 - slot.n_past,  # the verify rows must fit the sequence's KV cells
                    slot.max_new - len(slot.output) - 1)  # accepted + bonus must fit max_tokens
        if self.retired or t_max <= 0:
            return 0
        if self.curve is None:
            return t_max
        t = choose_path_len(self.accept_rate, t_max, self.curve, self.draft_ms)
        self._probing = False
        if t == 0:
            self._plain_run += 1
            if self._plain_run >= self.probe_every:  # a cheap probe keeps the estimates honest
                self._plain_run, self._probing = 0, True
                return 1  # the cheapest verify there is: one drafted token
        return t

    def observe_acceptance(self, n_drafted: int, n_accepted: int, decay: float = 0.8) -> None:
        """Positions 0..n_accepted-1 were accepted; position n_accepted (if drafted) was not."""
        if self._probing:  # back off from a drafter that keeps missing; reset when it hits
            self.probe_every = 8 if n_accepted else self.probe_every * 2
            if self.probe_every > self.max_probe_every and self.params.mode == "auto":
                self.retired = True
        for i in range(min(n_drafted, n_accepted + 1)):
            hit = 1.0 if i < n_accepted else 0.0
            self.accept_rate[i] = decay * self.accept_rate[i] + (1.0 - decay) * hit

    def observe_draft_cost(self, ms: float, decay: float = 0.8) -> None:
        self.draft_ms = ms if self.stats.verifies == 0 else decay * self.draft_ms + (1.0 - decay) * ms
