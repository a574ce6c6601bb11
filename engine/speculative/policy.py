"""The speculation policy: whether a request speculates, with which drafter and block.

What it is: the engine's answer, at admission, to "how does this request decode?". It
holds the drafters the engine has, what each has shown here across requests
(`DrafterRecord`), and the machine's learned decode costs; `state_for` turns a
request into a `SpecState` (or None: plain decoding). Auto mode picks the DFlash draft
(DFlash 2 or v1 alike) unless its record shows it useless or no faster than plain decoding on this machine, then
prompt lookup, and gives the draft a request now and then so its record stays current. A
request with a grammar gets the grammar's forced spans on top of either (grammar+lookup,
grammar+lookup+dflash), the draft only while it adds speed to the spans.
What it is not: the per-step choice of path length (chooser.py, state.py) or the step
itself (loop.py). It never touches a llama.cpp context.
"""

from __future__ import annotations

from typing import Mapping


from ..llama.sampler import TargetDistribution
from ..prefix import costs_reuse
from .costs import CostModel
from .drafters.base import Drafter
from .params import AUTO, DFLASH, GRAMMAR_LOOKUP, GRAMMAR_LOOKUP_DFLASH, LOOKUP, MAX_BLOCK, OFF, SpecParams
from .state import DrafterRecord, SpecState, TrialBudget

EXPLORE_TRIALS = 16  # auto mode judges a DFlash draft once its record holds this many first-position trials
REFRESH = 8  # a drafter auto mode set aside gets every REFRESH-th request, so its record stays current
MIN_ANSWERS = 3  # auto judges prompt lookup by what its requests measured from this many on


class Policy:
    def __init__(self, drafters: Mapping[str, Drafter], costs: CostModel, *, mode: str, selector: str,
                 block: int, n_ctx: int, n_vocab: int, enabled: bool = True, max_rows: int | None = None,
                 max_rollback: int | None = None):
        """`drafters`: the engine's modes, fixed before the first request; `costs`: what decodes cost
        here, learned from them; `enabled`: speculation is lossless on this backend (or the user
        allowed inexact); `max_rows`: a banded GPU build verifies rows exactly up to this many;
        `max_rollback`: a recurrent memory rolls back at most this many rejected tokens."""
        self.mode = mode  # default for requests that leave it to us ("auto")
        self.selector = selector  # default DFlash 2 path selector (a v1 draft has no lattice to select)
        self.block = block  # the largest B the chooser may pick (or B itself for a fixed block)
        self.n_ctx, self.n_vocab = n_ctx, n_vocab
        self.enabled = enabled
        self.max_rows = max_rows
        self.max_rollback = max_rollback
        self.costs = costs
        self.drafters = dict(drafters)
        self.records = {name: DrafterRecord() for name in self.drafters}  # what each has shown here
        self._auto_requests = 0
        self._auto_constrained = 0
        self.budget = TrialBudget()  # what auto mode's trials of unproven drafters may cost

    @property
    def max_block(self) -> int:
        """The largest block B (anchor + B-1 drafted tokens) this backend verifies exactly and whose
        rejected tokens this model's memory can roll back."""
        rollback = MAX_BLOCK if self.max_rollback is None else self.max_rollback + 1
        return min(MAX_BLOCK, self.max_rows or MAX_BLOCK, rollback)

    def state_for(self, params: SpecParams, sampling, prompt: list[int], slot,
                  constrained: bool = False) -> SpecState | None:
        """How a request with these settings, admitted into `slot`, speculates; None for plain decoding.
        `constrained`: the request has a grammar, whose forced spans auto mode drafts with lookup's."""
        mode = self.mode if params.mode == AUTO else params.mode
        if mode == OFF or not self.enabled:
            return None
        trial = False
        if mode == AUTO:
            mode, trial = self.auto_drafter()
            # re-decoding a long shared prompt would cost more than the draft earns; a trial gives up
            # no kept prompt at all (its record counts a prompt decoded again for it as upkeep, but at 8
            # streams a trial every REFRESH-th request that decodes 50 prompt tokens again costs 4%)
            if costs_reuse(slot, prompt, self.drafters.get(mode), least=1 if trial else 64):
                mode, trial = LOOKUP, False
            if constrained:  # the grammar's forced spans join whichever drafter auto chose
                adds, trial = self._draft_adds() if mode == DFLASH else (False, False)
                mode = GRAMMAR_LOOKUP_DFLASH if adds else GRAMMAR_LOOKUP
        if mode not in self.drafters:
            return None
        if sampling.presence_penalty or sampling.frequency_penalty:
            return None  # penalties depend on every accepted token: those requests decode plainly
        if sampling.seed is not None and not sampling.greedy and params.mode == AUTO:
            # Speculative sampling draws its uniforms per verify block (accept.py), so the tokens
            # a seed yields would depend on the drafts and on the chooser's per-step, timing-based
            # choices, not on the seed alone. A seeded request that leaves the mode to us decodes
            # plainly, where the same seed draws the same tokens.
            return None
        # A fixed block drafts B-1 every step; otherwise the chooser picks T (or plain) per step.
        costs = None if params.block else self.costs
        drafter = self.drafters[mode]
        # the path selector works on a lattice: a v1 draft (or lookup) proposes its path itself
        lattice = drafter.lattice
        selector = (params.selector or self.selector) if lattice else None
        info = drafter.info  # a DFlash draft cannot draft past its block_size
        block = min(params.block or self.block, info.block_size if info else MAX_BLOCK, self.max_block)
        dist = None if sampling.greedy else TargetDistribution(sampling, self.n_vocab)
        return SpecState(params, drafter, block, self.n_ctx, costs, selector, self.records[mode], dist=dist,
                         seed=sampling.seed, trial=trial, budget=self.budget if params.mode == AUTO else None,
                         baseline=self._baseline(mode) if trial else 1.0)

    def _baseline(self, mode: str) -> float:
        """The speed-up over plain decoding of what auto would use instead of `mode` on trial: the
        grammar's spans alone for the spans with the draft (as their answers measured), else plain."""
        spans = self.records.get(GRAMMAR_LOOKUP)
        speedup = spans.gain.speedup if spans is not None else None  # None: no answers measured
        if mode == GRAMMAR_LOOKUP_DFLASH and speedup is not None:
            return max(1.0, speedup)
        return 1.0

    def _draft_adds(self) -> tuple[bool, bool]:
        """For a request with a grammar: is the draft worth its call beside the forced and copied
        spans, and is that a trial? A trial until the combined drafter has EXPLORE_TRIALS
        first-position trials here, while the trial budget allows; then only while its record is
        faster than grammar+lookup's at this machine's costs (on work orders the spans write nearly
        everything and the draft's call is pure cost), with every REFRESH-th such request trying it
        again, budget allowing."""
        mixed, spans = self.records.get(GRAMMAR_LOOKUP_DFLASH), self.records.get(GRAMMAR_LOOKUP)
        if mixed is None:
            return False, False
        if mixed.trials[0] < EXPLORE_TRIALS or not self.costs.ready or spans is None:
            allowed = self.budget.allows()
            return allowed, allowed
        if mixed.speed(self.costs, self.max_block - 1) > spans.speed(self.costs, self.max_block - 1):
            return True, False
        self._auto_constrained += 1
        again = self._auto_constrained % REFRESH == 0 and self.budget.allows()
        return again, again

    def auto_drafter(self) -> tuple[str, bool]:
        """The drafter auto mode uses for the next unconstrained request, and whether it is on trial
        (not tried yet, or tried again; else chosen on its record): the DFlash draft, unless its
        record shows it useless (random, mismatched), or, once a request has used it, no faster than
        plain decoding at this machine's costs with its upkeep on every token counted (a lossless
        draft whose verify costs more than its tau earns, as on a 2-core CPU), or slower than prompt
        lookup by what its requests measured; then prompt lookup, which still wins on copy-heavy text,
        unless its requests measured it slower than plain decoding (chat that copies nothing, many
        streams): then "off". Every REFRESH-th request set aside tries the preferred drafter again,
        so its record follows a change of use and of load."""
        rec, lookup = self.records.get(DFLASH), self.records.get(LOOKUP)
        costs = self.costs
        preferred = DFLASH if rec is not None and not rec.useless() else LOOKUP
        tried = rec is not None and preferred == DFLASH and costs.ready and (rec.gain.answers or rec.upkeep_ms)
        if preferred == DFLASH and not tried and self.budget.allows():
            return DFLASH, True  # not tried yet: try it
        pick = LOOKUP
        if tried and rec is not None and rec.speed(costs, self.max_block - 1) > 1.0 / costs.cost(1):
            rival = lookup.gain.speedup if lookup is not None and lookup.gain.answers else None
            if rec.gain.speedup is None or rec.gain.speedup > max(1.0, rival or 1.0):
                pick = DFLASH
        if (pick == LOOKUP and lookup is not None and lookup.gain.answers >= MIN_ANSWERS
                and (lookup.gain.speedup or 0.0) < 1.0):
            pick = OFF
        if pick == preferred:
            return pick, False
        self._auto_requests += 1
        again = self._auto_requests % REFRESH == 0 and self.budget.allows()
        return (preferred, True) if again else (pick, False)
