"""Per-request speculation settings (`SpecParams`), what a request counts while it runs (`SpecStats`)
and reports back at its end (`SpecReport`: tau, accepted per position, where the time went)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from ..errors import InvalidRequest

# Each mode's name, defined once: a drafter's `name` is its mode, and the policy names modes by these. The
# Literal is what the server's settings and API accept (pydantic refuses the rest); the engine itself takes
# any drafter's name, since a test may add drafters of its own.
Mode = Literal["auto", "off", "dflash", "lookup", "grammar", "grammar+lookup", "grammar+lookup+dflash"]
MODES: tuple[Mode, ...] = get_args(Mode)
AUTO, OFF, DFLASH, LOOKUP, GRAMMAR, GRAMMAR_LOOKUP, GRAMMAR_LOOKUP_DFLASH = MODES
COPY: Final = "copy"  # a path token's source, not a mode: a copy field's unique continuation (drafters/grammar.py)
Selector = Literal["walk", "viterbi", "dp", "top1"]  # DFlash 2's path selectors (engine/speculative/select.py)
SELECTORS: tuple[Selector, ...] = get_args(Selector)
MAX_BLOCK = 16


@dataclass(frozen=True)
class SpecParams:
    mode: Mode = AUTO  # auto: the best drafter there is, or plain when faster (any drafter's name works at run time)
    selector: Selector | None = None  # DFlash 2 path selector; None = the engine's default
    block: int | None = None  # B = anchor + (B-1) drafted slots; None = chosen per step

    def validate(self) -> None:
        """Ranges only; whether a drafter of that mode exists is the engine's question."""
        if self.selector is not None and self.selector not in SELECTORS:
            raise InvalidRequest(f"selector must be one of {', '.join(SELECTORS)} (got {self.selector!r})",
                                 param="speculative.selector")
        if self.block is not None and not 2 <= self.block <= MAX_BLOCK:
            raise InvalidRequest(f"block must be between 2 and {MAX_BLOCK} (got {self.block})",
                                 param="speculative.block")


@dataclass
class SpecStats:
    mode: str = OFF  # what actually ran: off or one of MODES' drafters
    selector: str | None = None
    verifies: int = 0
    drafted: int = 0  # path tokens sent to verification
    accepted: int = 0  # path tokens the target agreed with
    committed: int = 0  # accepted + bonus tokens, over all verifies
    accepted_at: list[int] = field(default_factory=list)  # [B-1] verifies whose position i was accepted
    drafted_at: list[int] = field(default_factory=list)  # [B-1] verifies that drafted position i
    draft_ms: float = 0.0
    select_ms: float = 0.0
    verify_ms: float = 0.0  # this request's share of target batches that carried its verify rows
    plain_steps: int = 0  # steps decoded without speculation (the chooser found plain faster)
    plain_ms: float = 0.0  # target time of those steps
    upkeep_ms: float = 0.0  # keeping the drafter in step with committed rows (a draft's feature copies and catch-up)
    accepted_from: dict[str, int] = field(default_factory=dict)  # accepted path tokens per source (grammar, ...)

    @property
    def tau(self) -> float:
        return self.committed / self.verifies if self.verifies else 0.0

    def plain_equivalent_ms(self, c1_ms: float) -> float:
        """What this answer's decoding would have taken plainly: the tokens it decoded at the plain
        per-token cost, which is what its own plain steps took when it had a few (same load, same
        context length), else the learned c(1)."""
        per_token = self.plain_ms / self.plain_steps if self.plain_steps >= 4 else c1_ms
        return (self.committed + self.plain_steps) * per_token

    @property
    def spent_ms(self) -> float:
        """What its decoding took: drafts, selections, verifies, plain steps and the drafter's upkeep."""
        return self.draft_ms + self.select_ms + self.verify_ms + self.plain_ms + self.upkeep_ms

    def speedup(self, c1_ms: float) -> float | None:
        """Estimated speed-up over plain decoding for this answer (None when it never verified a
        draft: nothing was sped up)."""
        if not self.verifies or self.spent_ms <= 0:
            return None
        return round(self.plain_equivalent_ms(c1_ms) / self.spent_ms, 2)

    def record(self, n_drafted: int, n_accepted: int, sources: list[str] | None = None) -> None:
        """One verify: n_accepted of n_drafted path tokens accepted; `sources` names where each
        accepted token came from (the drafter, or a combined drafter's part)."""
        for src in sources or ():
            self.accepted_from[src] = self.accepted_from.get(src, 0) + 1
        self.verifies += 1
        self.drafted += n_drafted
        self.accepted += n_accepted
        self.committed += n_accepted + 1
        grow = n_drafted - len(self.drafted_at)
        if grow > 0:
            self.drafted_at.extend([0] * grow)
            self.accepted_at.extend([0] * grow)
        for i in range(n_drafted):
            self.drafted_at[i] += 1
            if i < n_accepted:
                self.accepted_at[i] += 1

    def report(self, speedup: float | None = None) -> SpecReport:
        """A frozen copy for the answer's usage (`speedup`: estimated by the engine at its end)."""
        return SpecReport(
            mode=self.mode, selector=self.selector, verifies=self.verifies, drafted=self.drafted,
            accepted=self.accepted, tau=self.tau, plain_steps=self.plain_steps,
            accepted_at=tuple(self.accepted_at), drafted_at=tuple(self.drafted_at), draft_ms=self.draft_ms,
            select_ms=self.select_ms, verify_ms=self.verify_ms, plain_ms=self.plain_ms, upkeep_ms=self.upkeep_ms,
            # committed tokens by who wrote them: drafters' accepted tokens, the target's bonus and plain steps
            committed_by_source=dict(self.accepted_from, target=self.verifies + self.plain_steps),
            speedup=speedup)


@dataclass(frozen=True)
class SpecReport:
    """What speculation did for one answer (`Usage.speculation`), as its SpecStats stood at the end.
    Its JSON shape is the server's (server/http/openai_format.py)."""

    mode: str
    selector: str | None
    verifies: int
    drafted: int
    accepted: int
    tau: float  # committed tokens per verify
    plain_steps: int
    accepted_at: tuple[int, ...]  # verifies whose position i was accepted
    drafted_at: tuple[int, ...]  # verifies that drafted position i
    draft_ms: float
    select_ms: float
    verify_ms: float
    plain_ms: float
    upkeep_ms: float
    committed_by_source: dict[str, int]
    speedup: float | None = None  # estimated over plain decoding; None: unknown, or nothing verified

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at)]


class MeasuredGain:
    """What speculation did for this computer's recent answers, for the people who use it: the
    plain-equivalent time over the time spent, summed over about the last `memory` answers that
    could speculate (those the chooser decoded plainly count as 1.0x). An estimate: in company a
    request's plain steps also carry other streams' verify rows, so it leans high there (measured
    at 8 streams: about 1.05x where the aggregate was 0.75-0.85x). Worker thread only."""

    def __init__(self, memory: float = 50.0):
        self.keep = 1.0 - 1.0 / memory
        self.plain_ms = self.spent_ms = 0.0
        self.answers = 0

    def add(self, stats: SpecStats, c1_ms: float) -> None:
        if stats.spent_ms > 0:
            self.plain_ms = self.keep * self.plain_ms + stats.plain_equivalent_ms(c1_ms)
            self.spent_ms = self.keep * self.spent_ms + stats.spent_ms
            self.answers += 1

    @property
    def speedup(self) -> float | None:
        return self.plain_ms / self.spent_ms if self.answers else None

    def as_dict(self) -> dict | None:
        if not self.answers:
            return None
        return {"answers": self.answers, "speedup": round(self.plain_ms / self.spent_ms, 2)}

    @staticmethod
    def pooled(gains: list["MeasuredGain"]) -> dict | None:
        """as_dict of several drafters' answers together."""
        answers, spent = sum(g.answers for g in gains), sum(g.spent_ms for g in gains)
        if not answers or spent <= 0:
            return None
        return {"answers": answers, "speedup": round(sum(g.plain_ms for g in gains) / spent, 2)}
