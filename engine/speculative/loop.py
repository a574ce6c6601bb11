"""The decode step: one target forward for every active sequence, speculative or not.

Each step plans one `Work` record per slot: a prompt chunk (prefill), one token (plain),
or `[anchor] + path` (verify, T path tokens). Speculating slots draft first, one draft
call per drafter and path length, and a drafter's lattice goes through the select stage.
All rows go into one target batch, decoded once; then each slot settles: plain rows are
sampled, verified paths keep their longest agreeing prefix plus the target's bonus token,
and only then does the slot's `n_past` move to its new committed frontier. Whatever the
target did not commit is rolled back from its KV cache in `finally`, so an error anywhere
leaves every sequence exactly at its committed frontier. Drafters see each committed row
right after the decode (DFlash injects its features).

Where prompt rows depend on the decode they are in (engine/chunks.py), and on a build whose
rows are exact only in decodes of at most `max_rows` rows (a GPU build with flashdesk's patch,
exactness.py), a step holds either one prompt chunk alone, cut as if its request were the only
one, or generating slots' plain and verify rows (`max_rows` at most in all); the two kinds of
step take turns. Elsewhere prompt chunks join the generating slots' rows in one decode.

Not the worker: admission, cancellation, text and finishing stay in worker.py.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np

from .. import prefix
from ..chunks import Chunks
from ..errors import EngineError
from ..llama.context import Context
from . import accept, constrain
from .drafters.base import Proposal, SeqView
from .chooser import StepBatch, expected_committed
from .costs import CostModel
from .params import MAX_BLOCK
from .select import Path, path_from
from .verify import add_verify_rows, target_argmax, target_logits, token_logprobs

if TYPE_CHECKING:  # the engine's slot: loop.py reads and advances it, the worker owns it
    from ..slot import Slot

log = logging.getLogger("flashdesk.engine")


@dataclass
class Work:
    """What one slot does in this step's target decode."""

    slot: Slot
    kind: Literal["prefill", "plain", "verify"]
    path: Path | None = None  # verify: the T tokens under test
    rows: list[int] = field(default_factory=list)  # batch rows: prompt chunk [n] | [last] [1] | [anchor]+path [T+1]
    commit: list[int] = field(default_factory=list)  # tokens committed this step (sampled, or accepted + bonus)
    kept: int = 0  # rows now committed: the chunk, the plain token, or anchor + accepted
    settled: bool = False  # n_past has moved past the kept rows


class Stepper:
    def __init__(self, ctx: Context, chunks: Chunks, max_rows: int | None = None, costs: CostModel | None = None):
        self.ctx = ctx
        self.chunks = chunks  # how prompts are cut: aligned chunks are decoded alone
        self.max_rows = max_rows  # None: rows compute alike in a batch of any size
        self._alone = chunks.aligned or max_rows is not None  # a prompt chunk is a step of its own
        self.costs = costs  # every decode's time goes in: the chooser prices from what they cost
        self._prefilled = False  # the last banded step was a prompt chunk
        self._turn = 0  # banded steps: where the rotation of generating slots starts

    def step(self, slots: list) -> dict[int, list[int]]:
        """Decode once for `slots` (on a banded build, for those whose turn it is); returns
        seq_id -> tokens committed this step."""
        if self._alone:
            slots = self._band(slots)
        work = self._plan(slots)  # prefill | plain | verify(T), drafts selected into paths
        self._fill(work)
        try:
            t0 = time.perf_counter()
            self.ctx.decode(self.ctx.batch)
            verify_ms = (time.perf_counter() - t0) * 1000.0
            if self.costs is not None:
                self.costs.observe_decode({w.slot.seq_id: len(w.rows) for w in work if w.rows},
                                          self.ctx.n_ubatch, verify_ms)
            for w in work:
                self._settle(w, verify_ms)  # sample or accept; n_past moves to the new frontier
                self._observe(w)  # the drafter sees the committed rows
        finally:
            for w in work:  # back to each committed frontier: rejected path rows, or rows never settled
                if w.rows and (w.kind == "verify" or not w.settled):
                    if not self.ctx.forget(w.slot.seq_id, w.slot.n_past):
                        # only rows never settled (an error is on its way) can reach past what this
                        # memory rolls back; keep nothing rather than a state that is not the frontier
                        self.ctx.forget(w.slot.seq_id)
                        w.slot.n_past = 0
        return {w.slot.seq_id: w.commit for w in work if w.commit}

    # -- plan ---------------------------------------------------------------------------

    def _band(self, slots: list) -> list:
        """This step's slots where prompt chunks go alone: one prompt chunk, or the generating
        slots (at most `max_rows` on a banded build, taking turns when there are more), alternately."""
        prefill = [s for s in slots if s.prefilling]
        gen = [s for s in slots if not s.prefilling]
        self._prefilled = bool(prefill) and (not gen or not self._prefilled)
        if self._prefilled:
            return prefill[:1]
        if self.max_rows is not None and len(gen) > self.max_rows:
            self._turn = (self._turn + 1) % len(gen)
            gen = sorted((gen[self._turn:] + gen[:self._turn])[:self.max_rows], key=lambda s: s.seq_id)
        return gen

    def _plan(self, slots: list) -> list[Work]:
        # Each path is priced on the batch it joins (the other slots' rows and what they commit); a
        # free drafter (no model call) is asked for the longest path and priced on what it offers.
        rows, room = {}, self.ctx.batch.capacity - sum(1 for s in slots if not s.prefilling)
        for s in sorted(slots, key=lambda s: s.seq_id):  # as _fill will fill the batch
            rows[s.seq_id] = 1 if not s.prefilling else self._chunk(s, room)
            room -= rows[s.seq_id] if s.prefilling else 0
        decoding = [s for s in slots if not s.prefilling]
        batch = StepBatch(rows, float(len(decoding)), n_ubatch=self.ctx.n_ubatch)
        want = {}
        for s in decoding:
            if s.spec is not None:
                want[s.seq_id] = s.spec.path_cap(s) if s.spec.drafter.free else self._price(s, batch)
        if self.max_rows is not None:  # the step's rows: one per slot, then paths while room lasts
            room = self.max_rows - len(slots)
            for seq_id in want:
                want[seq_id] = min(want[seq_id], room)
                room -= want[seq_id]
        paths = {}
        for n_draft, group in self._groups([s for s in slots if want.get(s.seq_id, 0) > 0], want):
            paths.update(self._draft(group, n_draft, batch))
        return [Work(s, "prefill") if s.prefilling else
                Work(s, "verify", paths[s.seq_id]) if s.seq_id in paths else Work(s, "plain") for s in slots]

    @staticmethod
    def _groups(slots: list, want: dict[int, int]) -> list[tuple[int, list]]:
        """The step's draft calls: one per (drafter, path length), so a call drafts equal blocks."""
        groups: dict[tuple[int, int], list] = defaultdict(list)
        for slot in slots:
            groups[(id(slot.spec.drafter), want[slot.seq_id])].append(slot)
        return [(n_draft, group) for (_, n_draft), group in groups.items()]

    def _draft(self, group: list, n_draft: int, batch: StepBatch) -> dict[int, Path]:
        """One draft call for `group` (one drafter, `n_draft` tokens each): its cost shared out, each
        proposal through the select stage, a free drafter's path cut to its price on `batch`."""
        drafter = group[0].spec.drafter
        t0 = time.perf_counter()
        views = [SeqView(s.seq_id, s.history(), s.n_past, s.req.grammar, len(s.req.prompt_tokens)) for s in group]
        try:
            proposals = drafter.propose(views, n_draft, unary=any(s.spec.selector == "top1" for s in group))
        except EngineError as e:  # a drafter failing costs this step's speculation, not the requests
            log.warning("%s drafter failed, decoding plainly this step: %s", drafter.name, e.message)
            return {}
        self._charge(group, proposals, (time.perf_counter() - t0) * 1000.0)
        out: dict[int, Path] = {}
        for slot, prop in zip(group, proposals):
            path = self._select(slot, prop, n_draft)
            if drafter.free and path.tokens:
                path = path.head(self._price(slot, batch, len(path.tokens), path.sources))
            if path.tokens:  # an empty path: this sequence decodes plainly this step
                out[slot.seq_id] = path
        return out

    @staticmethod
    def _charge(group: list, proposals: list[Proposal], ms: float) -> None:
        """A draft call's time, shared out over its sequences: the chooser wants the cost of one more
        draft call, so what is paid once either way counts as upkeep, not draft cost: a catch-up
        injection of rows kept while the sequence decoded plainly (a prompt, a plain run), and a
        request's own start (a grammar parsed once), which priced into every step would keep a fresh
        request from speculating for its first steps. Injecting what the last verify committed is
        part of every step."""
        share = ms / len(group)
        first = proposals[0] if proposals else Proposal()
        catch_up = first.inject_ms / len(group) if first.inject_rows > MAX_BLOCK * len(group) else 0.0
        for slot, prop in zip(group, proposals):
            once = catch_up + min(prop.setup_ms, share - catch_up)
            slot.spec.stats.draft_ms += share - once
            slot.spec.stats.upkeep_ms += once
            slot.spec.observe_draft_cost(share - once)

    @staticmethod
    def _price(slot, batch: StepBatch, available: int | None = None,
               sources: Sequence[str | None] | None = None) -> int:
        """The slot's path length on this step's batch, which then carries it."""
        t = slot.spec.plan_path(slot, available, batch, sources)
        batch.add(slot.seq_id, t, expected_committed(slot.spec.rates(sources), t), slot.spec.draft_ms)
        return t

    def _select(self, slot, prop: Proposal, n_draft: int) -> Path:
        """The select stage for a lattice: the slot's selector at temperature 0; at T > 0 a path
        drawn from q = softmax(S / T), which acceptance needs to stay lossless. A drafter's
        own path passes as it is, a point mass."""
        if prop.lattice is None:
            return Path(prop.path[:n_draft], sources=prop.sources[:n_draft] if prop.sources else None)
        t0 = time.perf_counter()
        spec = slot.spec
        if spec.dist is None:
            path = path_from(prop.lattice, n_draft, spec.selector or "walk")
        else:
            path = path_from(prop.lattice, n_draft, "walk", slot.req.sampling.temperature,
                             uniforms=spec.rng.random(n_draft, dtype=np.float32))
        spec.stats.select_ms += (time.perf_counter() - t0) * 1000.0
        return path

    def _fill(self, work: list[Work]) -> None:
        """The step's one target batch, in sequence id order (which keeps llama.cpp's ubatches
        whole): verify and plain rows first claim their room, prompt chunks take what is left."""
        batch = self.ctx.batch
        batch.clear()
        room = batch.capacity - sum(1 + len(w.path.tokens) if w.path else 1 for w in work if w.kind != "prefill")
        for w in work:
            s = w.slot
            if w.kind == "prefill":
                n = self._chunk(s, room)
                ends = n == len(s.pending)  # the prompt's last row: the first token is sampled there
                w.rows = [batch.add(tok, s.n_past + j, s.seq_id, logits=ends and j == n - 1)
                          for j, tok in enumerate(s.pending[:n])]
                room -= n
            elif w.kind == "verify":
                assert w.path is not None  # a verify has a path
                w.rows = add_verify_rows(batch, s.seq_id, s.n_past, s.last, w.path.tokens)
            else:
                w.rows = [batch.add(s.last, s.n_past, s.seq_id, logits=True)]

    def _chunk(self, slot, room: int) -> int:
        """The prompt rows `slot` decodes this step, with `room` rows left in the batch."""
        return self.chunks.cut(slot.n_past, len(slot.pending), max(0, room))

    # -- settle -------------------------------------------------------------------------

    def _settle(self, w: Work, verify_ms: float) -> None:
        """After the decode: what this slot commits, and its n_past moved past it."""
        s = w.slot
        if w.kind == "verify":
            assert w.path is not None  # a verify has a path
            w.commit = self._accept(s, w.path, w.rows, verify_ms)
            w.kept = len(w.commit)  # the anchor and the accepted path tokens
            at = w.rows[:w.kept]  # the row each committed token was chosen at
        else:
            w.kept = len(w.rows)
            if w.kind == "prefill":
                s.pending = s.pending[w.kept:]
            if s.prefilling or not w.rows:  # the prompt goes on next step: nothing to sample yet
                s.n_past += w.kept
                w.settled = True
                if w.rows:
                    prefix.checkpoint(s, self.ctx, self.chunks)
                return
            w.commit = [s.sampler.sample(self.ctx.ptr, w.rows[-1], len(s.output))]
            if s.spec is not None and w.kind == "plain":
                s.spec.stats.plain_steps += 1
                s.spec.stats.plain_ms += verify_ms
            at = w.rows[-1:]
        s.n_past += w.kept
        w.settled = True
        if w.kind == "prefill":  # the prompt's last chunk: its state is a prefix a later prompt may share
            prefix.checkpoint(s, self.ctx, self.chunks)
        if s.request.logprobs:
            s.logprobs_step = token_logprobs(self.ctx, at, w.commit)

    def _accept(self, slot, path: Path, rows: list[int], verify_ms: float) -> list[int]:
        """The accept stage: the committed tokens of a verified path [T] (accepted + bonus)."""
        spec, grammar = slot.spec, slot.sampler.grammar
        if spec.dist is None and grammar is None:  # temperature 0: the longest prefix the target's argmax agrees with
            n, bonus = accept.accept_greedy(path.tokens, target_argmax(self.ctx, rows))  # target: [T+1]
        elif spec.dist is None:  # the same, with the grammar's choice at each row
            n, bonus = constrain.accept_constrained(slot, path.tokens, self.ctx, rows)
        else:  # rejection sampling against the target sampler's own distribution at each row
            logits = target_logits(self.ctx, rows)  # [T+1, V]
            p = (np.stack([spec.dist.probs(row) for row in logits]) if grammar is None
                 else constrain.target_probs(grammar, spec.dist, logits, path.tokens))  # [T+1, V]
            u = spec.rng.random(2 * len(rows), dtype=np.float32)  # [2(T+1)]
            n, bonus = accept.accept_sample(p, path.tokens, path.cand_ids, path.cand_q, u)
            if grammar is not None:
                constrain.advance(grammar, list(path.tokens[:n]) + [int(bonus)])
        own = spec.drafter.source or spec.drafter.name  # a combined drafter names its parts
        spec.stats.record(len(path.tokens), n, [src or own for src in (path.sources or [None] * n)[:n]])
        spec.stats.verify_ms += verify_ms
        spec.observe_acceptance(len(path.tokens), n)
        if path.sources and all(path.sources):  # a combined drafter's path: what each source's tokens are worth
            spec.record.observe_sources(path.sources, n)
        return list(path.tokens[:n]) + [int(bonus)]

    def _observe(self, w: Work) -> None:
        """Tell the slot's drafter which of its rows the target committed in this decode
        (they end at the slot's committed frontier n_past). A drafter that cannot follow
        loses this sequence, which then decodes plainly to the end."""
        slot = w.slot
        if slot.spec is None or not w.kept:
            return
        if slot.spec.retired:  # auto mode gave up on this drafter: stop feeding it
            slot.spec.drafter.forget(slot.seq_id)
            return
        if not slot.prefilling and slot.spec.losing():  # auto mode: it cost more than it won; plain from now on
            slot.spec.retired = True
            slot.spec.drafter.forget(slot.seq_id)
            return
        first = slot.n_past - w.kept
        try:
            t0 = time.perf_counter()
            slot.spec.drafter.observe([(slot.seq_id, first + j, row) for j, row in enumerate(w.rows[:w.kept])])
            slot.spec.stats.upkeep_ms += (time.perf_counter() - t0) * 1000.0
        except EngineError as e:
            log.warning("%s drafter lost sequence %d, decoding it plainly: %s",
                        slot.spec.drafter.name, slot.seq_id, e.message)
            slot.spec.drafter.forget(slot.seq_id)
            slot.spec.free()
            slot.spec = None
