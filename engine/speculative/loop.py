"""The decode step: one target forward for every active sequence, speculative or not.

Each step drafts a path for every speculating sequence (one draft pass per drafter and
path length), puts prompt chunks, single tokens of plain sequences and `[anchor] + path`
of speculating ones into one target batch, decodes it once, then samples the plain rows
and accepts the longest agreeing prefix of each path plus the target's bonus token.
Whatever the target did not commit is rolled back from its KV cache in `finally`, so an
error anywhere leaves every sequence exactly at its committed frontier. Drafters see
each committed row right after the decode (DFlash injects its features).

Not the worker: admission, cancellation, text and finishing stay in worker.py.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import numpy as np

from ..llama.context import Context
from ..errors import EngineError
from . import accept, constrain
from .drafters.base import Drafter, Proposal, SeqView
from .params import MAX_BLOCK
from .select import select
from .verify import add_verify_rows, target_argmax, target_logits, token_logprobs


log = logging.getLogger("flashdesk.engine")


class Stepper:
    def __init__(self, ctx: Context):
        self.ctx = ctx

    def step(self, slots: list) -> dict[int, list[int]]:
        """Decode once for all `slots`; returns seq_id -> tokens committed this step."""
        plan = {s.seq_id: s.spec.path_len(s) for s in slots if s.spec is not None and not s.prefilling}
        paths = self._draft([s for s in slots if plan.get(s.seq_id, 0) > 0], plan)
        batch = self.ctx.batch
        batch.clear()
        rows: dict[int, list[int]] = {}
        room = batch.capacity - sum(1 + len(paths[s.seq_id].tokens) if s.seq_id in paths else 1
                                    for s in slots if not s.prefilling)
        for slot in slots:  # in sequence id order, which keeps llama.cpp's ubatches whole
            if slot.prefilling:
                rows[slot.seq_id] = self._prompt_chunk(slot, room)
                room -= len(rows[slot.seq_id])
            elif slot.seq_id in paths:
                rows[slot.seq_id] = add_verify_rows(batch, slot.seq_id, slot.n_past, slot.last,
                                                    paths[slot.seq_id].tokens)
            else:
                rows[slot.seq_id] = [batch.add(slot.last, slot.n_past, slot.seq_id, logits=True)]
                slot.n_past += 1
        committed: dict[int, list[int]] = {}
        try:
            t0 = time.perf_counter()
            self.ctx.decode(batch)
            verify_ms = (time.perf_counter() - t0) * 1000.0
            for slot in slots:
                r = rows[slot.seq_id]
                if slot.seq_id in paths:
                    committed[slot.seq_id] = self._accept(slot, paths[slot.seq_id], r, verify_ms)
                elif not slot.prefilling and r:
                    committed[slot.seq_id] = [slot.sampler.sample(self.ctx.ptr, r[-1], len(slot.output))]
                    if slot.spec is not None and len(r) == 1:  # not the step that ended the prompt
                        slot.spec.stats.plain_steps += 1
                        slot.spec.stats.plain_ms += verify_ms
                kept = len(committed[slot.seq_id]) if slot.seq_id in paths else len(r)  # anchor + accepted
                if slot.req.logprobs and slot.seq_id in committed:  # the row each token was chosen at
                    at = r[:kept] if slot.seq_id in paths else r[-1:]
                    slot.logprobs_step = token_logprobs(self.ctx, at, committed[slot.seq_id])
                self._observe(slot, r[:kept])
        finally:
            for slot in slots:
                if slot.seq_id in paths:  # rejected path rows (all of them if anything failed)
                    self.ctx.forget(slot.seq_id, slot.n_past)
        return committed

    def _draft(self, slots: list, plan: dict[int, int]) -> dict[int, Proposal]:
        """One propose() per (drafter, path length): equal block lengths in each draft call."""
        groups: dict[tuple[int, int], list] = defaultdict(list)
        for slot in slots:
            groups[(id(slot.spec.drafter), plan[slot.seq_id])].append(slot)
        out: dict[int, Proposal] = {}
        for (_, n_draft), group in groups.items():
            drafter: Drafter = group[0].spec.drafter
            t0 = time.perf_counter()
            views = [SeqView(s.seq_id, s.history(), s.n_past) for s in group]
            try:
                proposals = drafter.propose(views, n_draft, 0.0,
                                            unary=any(s.spec.stats.selector == "top1" for s in group))
            except EngineError as e:  # a drafter failing costs this step's speculation, not the requests
                log.warning("%s drafter failed, decoding plainly this step: %s", drafter.name, e.message)
                continue
            share = (time.perf_counter() - t0) * 1000.0 / len(group)
            # the chooser wants the cost of one more draft call: without a catch-up injection of
            # rows kept while it decoded plainly (a prompt, a plain run), which is paid once
            # either way; injecting what the last verify committed is part of every step
            st = proposals[0].stats if proposals else {}
            caught_up = st.get("inject_rows", 0) > MAX_BLOCK * len(group)
            catch_up = st.get("inject_ms", 0.0) / len(group) if caught_up else 0.0
            for slot, prop in zip(group, proposals):
                slot.spec.stats.draft_ms += share
                slot.spec.observe_draft_cost(share - catch_up)
                lattice = prop.stats.get("lattice")
                if lattice is not None and slot.spec.stats.selector:  # the select stage
                    prop = self._select(slot, prop, lattice)
                if prop.tokens:  # an empty path: this sequence decodes plainly this step
                    out[slot.seq_id] = Proposal(prop.tokens[:n_draft], prop.cand_ids, prop.cand_q, prop.stats)
        return out

    def _select(self, slot, prop: Proposal, lattice) -> Proposal:
        """The path through the lattice: the slot's selector at temperature 0; at T > 0 a
        path drawn from q = softmax(S / T), which acceptance needs to stay lossless."""
        t0 = time.perf_counter()
        spec, temp = slot.spec, slot.req.sampling.temperature
        T, K = len(prop.tokens), prop.stats["top_k"]
        if spec.dist is None:
            unary = prop.stats.get("unary")
            sel = select(lattice, T, K, spec.stats.selector, unary=None if unary is None else unary[:T])
        else:
            sel = select(lattice, T, K, "walk", temp, uniforms=spec.rng.random(T, dtype=np.float32))
        spec.stats.select_ms += (time.perf_counter() - t0) * 1000.0
        return Proposal(sel.ids.tolist(), sel.cand_ids, sel.q, prop.stats)

    def _prompt_chunk(self, slot, room: int) -> list[int]:
        n = max(0, min(len(slot.pending), room))
        chunk, slot.pending = slot.pending[:n], slot.pending[n:]
        rows = [self.ctx.batch.add(tok, slot.n_past + j, slot.seq_id, logits=not slot.pending and j == n - 1)
                for j, tok in enumerate(chunk)]
        slot.n_past += n
        return rows

    def _accept(self, slot, prop: Proposal, rows: list[int], verify_ms: float) -> list[int]:
        spec, grammar = slot.spec, slot.sampler.grammar
        if spec.dist is None and grammar is None:  # temperature 0: the longest prefix the target's argmax agrees with
            n, bonus = accept.accept_greedy(prop.tokens, target_argmax(self.ctx, rows))  # target: [T+1]
        elif spec.dist is None:  # the same, with the grammar's choice at each row
            close_at = len(rows) if slot.close_from is None else slot.close_from - len(slot.output)
            n, bonus = constrain.accept_greedy(grammar, prop.tokens, target_argmax(self.ctx, rows),
                                               lambda i: target_logits(self.ctx, rows[i:i + 1])[0], close_at)
        else:  # rejection sampling against the target sampler's own distribution at each row
            logits = target_logits(self.ctx, rows)  # [T+1, V]
            p = (np.stack([spec.dist.probs(row) for row in logits]) if grammar is None
                 else constrain.target_probs(grammar, spec.dist, logits, prop.tokens))  # [T+1, V]
            u = spec.rng.random(2 * len(rows), dtype=np.float32)  # [2(T+1)]
            n, bonus = accept.accept_sample(p, prop.tokens, prop.cand_ids, prop.cand_q, u)
            if grammar is not None:
                constrain.advance(grammar, list(prop.tokens[:n]) + [int(bonus)])
        spec.stats.record(len(prop.tokens), n)
        spec.stats.verify_ms += verify_ms
        spec.observe_acceptance(len(prop.tokens), n)
        slot.n_past += n + 1  # the anchor and the accepted path tokens are now committed
        return list(prop.tokens[:n]) + [int(bonus)]

    def _observe(self, slot, rows: list[int]) -> None:
        """Tell the slot's drafter which of its rows the target committed in this decode
        (they end at the slot's committed frontier n_past). A drafter that cannot follow
        loses this sequence, which then decodes plainly to the end."""
        if slot.spec is None or not rows:
            return
        if slot.spec.retired:  # auto mode gave up on this drafter: stop feeding it
            slot.spec.drafter.forget(slot.seq_id)
            return
        first = slot.n_past - len(rows)
        try:
            slot.spec.drafter.observe([(slot.seq_id, first + j, row) for j, row in enumerate(rows)])
        except EngineError as e:
            log.warning("%s drafter lost sequence %d, decoding it plainly: %s",
                        slot.spec.drafter.name, slot.seq_id, e.message)
            slot.spec.drafter.forget(slot.seq_id)
            slot.spec.free()
            slot.spec = None
