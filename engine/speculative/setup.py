"""What an engine speculates with, built in one place: the speculative package's composition root.

What it is: `Speculation(model, ctx, config, chunks)` makes the drafters (prompt lookup, the grammar's
forced spans, both together, and with a paired DFlash draft that draft and the spans over it),
judges once whether speculation is lossless on this build and device (exactness.py, before the
worker starts, while the context is free), loads the decode costs learned here (costs.py) and
builds the stepper that runs every step. It holds the one `Exactness`, the policy that answers
each request at admission, the idle fill-in of the cost curve, and what speculation did for recent
answers. The worker admits, steps and commits; it asks this object, never a drafter.

What it is not: the step (loop.py) or the choice per request (policy.py).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, cast

from .. import prefix
from ..chunks import Chunks
from ..errors import EngineError, InvalidRequest
from ..llama import ggml
from ..llama.context import Context, on_own_thread
from ..llama.model import Model
from ..stats import MeasuredSpeedup, SpeculationFacts
from .costs import CURVE_ROWS, CostModel, FillIn
from .drafters.base import Drafter
from .drafters.combined import GrammarLookupDrafter, SpanDFlashDrafter
from .drafters.dflash import DFlashDrafter
from .drafters.grammar import GrammarDrafter
from .drafters.lookup import PromptLookupDrafter
from .exactness import judge
from .loop import Stepper
from .params import AUTO, DFLASH, OFF, MeasuredGain, Mode, Selector, SpecParams
from .policy import Policy
from .state import SpecState

if TYPE_CHECKING:  # the worker's request and slot: admitted, stepped, never kept here
    from ..request import GenerationRequest
    from ..slot import Slot

log = logging.getLogger("flashdesk.engine")

SAVE_EVERY_S = 60.0  # the learned decode costs are written beside the model at most this often

# A drafter made from the engine's model and the drafters it has so far (one that wraps the DFlash draft)
DrafterFactory = Callable[[Model, Mapping[str, Drafter]], Drafter]


class SpecConfig(Protocol):
    """The engine settings speculation reads (engine.EngineConfig has them all); read-only, as a frozen
    dataclass's fields are."""

    @property
    def spec_mode(self) -> Mode: ...

    @property
    def selector(self) -> Selector: ...

    @property
    def spec_block(self) -> int: ...

    @property
    def draft(self) -> str | None: ...

    @property
    def spec_inexact(self) -> bool: ...

    @property
    def cost_cache(self) -> str | None: ...

    @property
    def measured_cache(self) -> str | None: ...

    @property
    def n_threads(self) -> int: ...

    @property
    def verbose(self) -> bool: ...


class Speculation:
    """The worker's one door into speculation, in the manner of llama.cpp's common/speculative.h: `admit`
    a request into a slot, `step` the active slots, give it the engine's `idle` time, and say when a
    request `finished`. Nothing else of the package is the worker's to touch."""

    def __init__(self, model: Model, ctx: Context, config: SpecConfig, chunks: Chunks, *, on_gpu: bool,
                 drafters: Iterable[Drafter | DrafterFactory] = ()):
        """`drafters`: modes beside the built-in ones (tests bring oracles), each a drafter or a factory,
        added after the built-in ones and before the worker starts: no request sees the set change."""
        self.ctx, self.config, self.chunks = ctx, config, chunks
        self.drafters: dict[str, Drafter] = {}  # name -> drafter: the speculative modes this engine has
        lookup, grammar = PromptLookupDrafter(), GrammarDrafter(model)
        for drafter in (lookup, grammar, GrammarLookupDrafter(grammar, lookup)):
            self._add(drafter)
        self.draft_error: str | None = None  # why a configured draft is not in use
        if config.draft:
            self._load_draft(model, config.draft)
        for extra in drafters:
            self._add(extra if isinstance(extra, Drafter) else extra(model, self.drafters))
        # Speculation is only lossless when verify rows compute exactly like single tokens. A patched
        # GPU build is exact only for decodes of up to `max_rows` rows: the policy and the stepper keep to it.
        self.exactness = on_own_thread(lambda: judge(ctx, on_gpu=on_gpu, block=config.spec_block))
        # spec_inexact accepts other numerics, never a memory that cannot roll back (corrupted state)
        self.enabled = self.exactness.exact or (config.spec_inexact and self.exactness.possible)
        # The chooser prices paths from what decodes cost here, learned from every decode the stepper
        # times (kept beside the model); the fill-in times the one-sequence rows traffic has not
        # visited while the engine is idle, on its last sequence.
        self.costs = CostModel.load(config.cost_cache, config.n_threads, ggml.build_id())
        self.policy = Policy(self.drafters, self.costs, mode=config.spec_mode, selector=config.selector,
                             block=config.spec_block, n_ctx=ctx.n_ctx_seq, n_vocab=model.n_vocab,
                             enabled=self.enabled, max_rows=self.exactness.max_rows, max_rollback=ctx.rollback)
        self.stepper = Stepper(ctx, chunks, self.exactness.max_rows, self.costs)
        self.gain = MeasuredGain()  # what speculation did for recent answers here (the Models page says it)
        self.curve_ready = threading.Event()  # set once c(1..16) of one sequence are all measured
        self.fill_in: FillIn | None = None
        if self.enabled and self.costs.missing():
            self.fill_in = FillIn(ctx, self.costs, seq_id=ctx.n_seq - 1)
        elif self.enabled:
            self.curve_ready.set()
        self._t_measure: float | None = None  # when the idle fill-in started
        self._saved = time.monotonic()
        self._warn()

    def _add(self, drafter: Drafter) -> None:
        """A new mode, before the first request; a name already taken is refused (it would orphan a
        drafter that holds a context)."""
        if drafter.name in self.drafters:
            raise ValueError(f"a drafter named {drafter.name!r} is already here")
        drafter.attach(self.ctx)
        self.drafters[drafter.name] = drafter

    def _load_draft(self, model: Model, path: str) -> None:
        """Pair a DFlash draft (2 or v1); a draft that does not fit is refused and the engine runs without it."""
        drafter = None
        try:
            drafter = DFlashDrafter(path, model, verbose=self.config.verbose)
            self._add(drafter)
        except EngineError as e:
            if drafter is not None:
                drafter.close()
            self.draft_error = e.message
            log.error("DFlash draft not used: %s", e.message)
            return
        spans = cast(GrammarLookupDrafter, self.drafters[GrammarLookupDrafter.name])  # a built-in, added above
        self._add(SpanDFlashDrafter(spans, drafter))

    def _warn(self) -> None:
        why = self.exactness.why
        if not self.exactness.possible:
            log.warning("speculative decoding is off for this model: %s", why)
        elif not self.exactness.exact:
            log.warning("speculative decoding would not be bit-identical to plain decoding here: %s %s",
                        why, "It runs anyway (allowed by spec_inexact)." if self.enabled
                        else "It is off. HINT: --allow-inexact-speculation turns it on (output then follows "
                             "the target's batched numerics, not plain decoding bit for bit).")

    @property
    def cost_curve(self) -> str:
        """"ready": c(1..16) of one sequence are all timed; "learning": the chooser prices from the
        decodes timed so far (every request speculates where that pays) while the idle fill-in
        times the rest; "none": speculation is off here."""
        if not self.enabled:
            return "none"
        return "ready" if self.curve_ready.is_set() else "learning"

    def facts(self) -> SpeculationFacts:
        d = self.drafters.get(DFLASH)
        info = d.info if d is not None else None
        draft = None if info is None else {"kind": info.kind, "block_size": info.block_size, "top_k": info.top_k}
        ex = self.exactness
        return SpeculationFacts(sorted(self.drafters), self.config.spec_mode, ex.exact, ex.why, self.enabled,
                                ex.max_rows, draft, self.draft_error, self.cost_curve, self.gain.as_dict(),
                                prompt_chunk=self.chunks.size if self.chunks.aligned else None,
                                prompt_why=self.chunks.why,
                                draft_measured=self._draft_measured())

    def _draft_measured(self) -> dict | None:
        """What the DFlash draft did for the answers it drafted for, pooled over the modes it drafts in."""
        return MeasuredGain.pooled([r.gain for mode, r in self.policy.records.items() if DFLASH in mode.split("+")])

    def check(self, params: SpecParams) -> None:
        """Refuse a request for a mode this engine does not have (any thread)."""
        if params.mode not in (AUTO, OFF) and params.mode not in self.drafters:
            raise InvalidRequest(f"speculative mode {params.mode!r} is not available here; this engine "
                                 f"has: {AUTO}, {OFF}, {', '.join(self.drafters)}", param="speculative.mode")

    # -- worker thread only, from here on ---------------------------------------------

    def gap_tokens(self, mean_answer: float) -> float | None:
        """Prompt tokens worth as much as one more ubatch in every step of an answer of `mean_answer`
        tokens (prefix.best_slot): its single-row decodes over a prompt row's share of a full decode;
        None until decodes have been timed here."""
        if not self.costs.ready:
            return None
        return mean_answer * self.costs.cost(1) / (self.costs.cost(CURVE_ROWS) / CURVE_ROWS)

    def admit(self, req: GenerationRequest, slot: Slot) -> tuple[SpecState | None, int]:
        """How `req`, admitted into `slot`, speculates (None: it decodes plainly), and how many of its
        prompt tokens the slot's kept prefix spares it. A draft that keeps a KV of its own beside the
        target's must decode a kept prompt again: that upkeep is counted against the request's drafter."""
        self._pause_fill_in()  # requests first: the fill-in goes on when the engine is idle again
        state = self.policy.state_for(req.speculative, req.sampling, req.prompt_tokens, slot,
                                      constrained=bool(req.grammar))
        drafter = state.drafter if state is not None else None
        follows = drafter is not None and drafter.follows_kv  # a draft KV beside the target's
        shared = prefix.common_prefix(slot.cached, req.prompt_tokens[:-1]) if follows else 0
        reused = prefix.reuse(slot, self.ctx, req.prompt_tokens, drafter, self.chunks)
        if state is not None and shared > reused and self.costs.ready:  # shared > 0: it has a drafter
            state.stats.upkeep_ms += self.costs.cost(shared - reused)
        return state, reused

    def step(self, slots: list[Slot]) -> dict[int, list[int]]:
        """One target decode for the active `slots` (loop.Stepper): seq_id -> tokens committed."""
        return self.stepper.step(slots)

    @property
    def has_idle_work(self) -> bool:
        """Whether the engine, with no request running or waiting, has decode costs left to measure."""
        return self.fill_in is not None

    def _pause_fill_in(self) -> None:
        if self.fill_in is not None:
            self.fill_in.pause()

    def idle(self, slot: Slot) -> None:
        """One decode of the idle fill-in, on `slot`'s sequence (the last; only while no request runs or waits)."""
        m = self.fill_in
        if m is None:
            return
        if not m.primed:
            prefix.drop(slot, self.ctx)  # whatever this sequence kept: it is measured on
            if self._t_measure is None:
                self._t_measure = time.perf_counter()
        try:
            done = m.step()
        except Exception:  # a failed decode: the chooser goes on with what traffic teaches it
            log.exception("the idle measurement of decode costs failed; the chooser learns from requests alone")
            self.fill_in = None
            return
        if done:
            self.fill_in = None
            self.save_costs()
            if not self.curve_ready.is_set():
                self.curve_ready.set()
                assert self._t_measure is not None  # set when the fill-in began
                log.info("measured this machine's decode costs, %.1f s after it began (c(1) %.1f ms, c(8) %.1f ms)",
                         time.perf_counter() - self._t_measure, self.costs.cost(1), self.costs.cost(8))

    def finished(self, spec: SpecState | None) -> float | None:
        """A request ended (`spec`: its SpecState, None if it decoded plainly): count what it gained, keep
        what traffic taught (written at most every SAVE_EVERY_S, so it survives a restart), and measure
        rows unvisited for long again when idle. Returns its estimated speed-up (None: unknown)."""
        speedup = None
        if spec is not None and self.costs.ready:
            speedup = spec.stats.speedup(self.costs.cost(1))
            self.gain.add(spec.stats, self.costs.cost(1))
        if self.enabled and time.monotonic() - self._saved > SAVE_EVERY_S:
            self.save_costs()
            if self.fill_in is None and self.costs.missing():
                self.fill_in = FillIn(self.ctx, self.costs, seq_id=self.ctx.n_seq - 1)
        return speedup

    def save_costs(self) -> None:
        """Keep what decodes cost here, and what speculation did for answers (the catalog shows it)."""
        if self.config.cost_cache:
            self.costs.save(self.config.cost_cache)
        got = self.gain.as_dict()
        if self.config.measured_cache and got:
            MeasuredSpeedup(time.time(), got["answers"], got["speedup"], self._draft_measured()).save(
                self.config.measured_cache)
        self._saved = time.monotonic()

    def close(self) -> None:
        """Keep what was learned, and free the drafters (draft contexts point into the target context:
        before it is freed)."""
        if self.enabled:
            self.save_costs()
        for d in self.drafters.values():
            d.close()

