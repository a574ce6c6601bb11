"""The DFlash drafter (DFlash 2 and plain DFlash v1): a llama.cpp draft context fed with the
target's layer features.

`DFlashDrafter` implements `drafters.base.Drafter` for several concurrent sequences.
`attach` turns on layer-input capture on the target context for every tap of the draft
and creates the draft context (engine/llama/draft_context.py). `observe` copies the
captured features of committed target rows, tap by tap; the next `propose` decodes them
into the draft context as an embedding batch at the target positions (KV injection),
many rows per call, then decodes one block `[anchor, mask, ..., mask]` per sequence and
returns each block's lattice (DFlash 2, docs/llama-cpp.md, The lattice) or, for a v1 draft (no
candidate selector), a path: each slot's top-1, the argmax of that slot's draft logits.
A v1 path is deterministic, so acceptance verifies it as a point mass (accept.py), at
temperature 0 and above, exactly like a prompt-lookup path.

Everything that would abort the process inside llama.cpp is checked here first: the
draft GGUF is validated before it is loaded (`inspect_draft`), and every call checks
tap ids, row counts against the draft's n_ubatch, block length against block_size and
that the target has decoded the rows it reads.

Not the path selector: the select stage (engine/speculative/select.py) turns a DFlash 2
lattice into a path (a v1 draft has no lattice to select through). Not the loop either (engine/speculative/loop.py).
References: llama.cpp `common/speculative.cpp` (DFlash driver), `src/models/dflash.cpp`.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from ... import native
from ...errors import GenerationFailed
from ...llama.context import Context
from ...llama.draft_context import DraftContext, dflash_facts
from ...llama.model import Model
from gguf_tools.dflash import DFLASH2

from ..params import DFLASH
from .base import Drafter, Lattice, Proposal, SeqView
from .dflash_fit import HINT, DraftInfo, DraftRefused, inspect_draft  # noqa: F401  (DraftRefused: what callers catch)

MAX_PENDING = 512  # observed rows a sequence keeps before injecting anyway (~6 MB for SmolLM2's 5 taps)


class DraftStepError(GenerationFailed):
    """A draft call was refused before it reached llama.cpp, or llama.cpp failed it."""


class _Pending:
    """Feature rows of one sequence, observed but not yet injected: consecutive positions
    from `first`, rows [n_rows, n_taps * n_embd] in a buffer that grows by doubling."""

    def __init__(self, n_enc: int, capacity: int):
        self.first = -1  # position of the first kept row
        self.n_rows = 0
        self.buf = np.empty((capacity, n_enc), np.float32)

    def take(self, first: int, n: int) -> np.ndarray:
        """The buffer rows for positions first..first+n-1 (to be written by the caller)."""
        end = self.first + self.n_rows
        if self.n_rows and first > end:
            raise DraftStepError(f"observe(): position {end} was never observed (got {first})")
        if self.n_rows and first < end:  # the target decoded these positions again: the newer rows win
            self.n_rows = max(first - self.first, 0)
        if not self.n_rows:
            self.first = first
        need = self.n_rows + n
        if need > len(self.buf):
            grown = np.empty((max(need, 2 * len(self.buf)), self.buf.shape[1]), np.float32)
            grown[:self.n_rows] = self.buf[:self.n_rows]
            self.buf = grown
        self.n_rows = need
        return self.buf[need - n:need]


class DFlashDrafter(Drafter):
    """A DFlash draft (2 or v1) for one target model, drafting for all its sequences."""

    name = DFLASH
    info: DraftInfo  # always, where the base class has None
    follows_kv = True  # its draft KV holds the injected features of every committed row

    def __init__(self, draft_path: str, target: Model, *, n_ubatch: int = 64, verbose: bool = False):
        self.info = inspect_draft(str(draft_path), target)  # raises DraftRefused; nothing loaded yet
        self.target = target
        self.kind = self.info.kind  # "dflash2": lattices for the select stage; "dflash1": paths
        self.n_ubatch_want = max(int(n_ubatch), self.info.block_size)
        self.ctx: DraftContext | None = None  # from attach() on
        self.tctx: Context | None = None
        self.pending: dict[int, _Pending] = {}  # seq_id -> features observed but not yet injected
        self.model = Model(draft_path, verbose=verbose)
        got = dflash_facts(self.model)
        if got != (self.info.top_k, self.info.target_layers, self.info.mask_token_id):
            self.model.close()
            raise DraftRefused(f"llama.cpp read draft {draft_path} differently than its metadata says "
                               f"(top_k, taps, mask: {got}). {HINT}")
        self.n_embd = self.info.n_embd
        self.n_enc = len(self.info.target_layers) * self.n_embd  # width of one injected feature row
        self._layers = (ctypes.c_void_p * len(self.info.target_layers))()  # capture buffers of the last decode

    # -- setup --------------------------------------------------------------------------

    def attach(self, target_ctx: Context) -> None:
        """Enable capture on the target and create the draft context (before the target's first decode)."""
        if self.ctx is not None:
            raise DraftStepError("this DFlash drafter is already attached to a target context")
        if target_ctx.model.ptr != self.target.ptr:
            raise DraftStepError("attach() got a context of another model than the draft was validated for")
        if any(target_ctx.pos_max(s) >= 0 for s in range(target_ctx.n_seq)):
            raise DraftStepError("attach the DFlash drafter before the target's first decode (its KV is not empty)")
        target_ctx.capture_layer_inputs(self.info.target_layers)  # ids checked < target n_layer in inspect_draft
        try:
            self.ctx = DraftContext(self.model, target_ctx, n_ubatch=self.n_ubatch_want, n_enc=self.n_enc,
                                    causal=self.info.causal, lattice=self.kind == DFLASH2)
        except BaseException:
            target_ctx.capture_layer_inputs(self.info.target_layers, False)  # leave the target as it was
            raise
        self.tctx = target_ctx
        self.n_ubatch, self.n_seq, self.n_ctx_seq = self.ctx.n_ubatch, self.ctx.n_seq, self.ctx.n_ctx_seq

    def close(self) -> None:
        """Free the draft context and model (before the target context they point into)."""
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
        self.model.close()

    @property
    def dctx(self) -> DraftContext:
        """The draft context; every caller runs after attach() (the loop attaches before the first step)."""
        assert self.ctx is not None, "the DFlash drafter is not attached"
        return self.ctx

    def _attached(self) -> Context:
        if self.ctx is None or self.tctx is None:
            raise DraftStepError("the DFlash drafter is not attached to a target context")
        return self.tctx

    def _seq(self, seq_id: int) -> int:
        if not 0 <= seq_id < self.n_seq:
            raise DraftStepError(f"sequence id {seq_id} is outside [0, {self.n_seq})")
        return seq_id

    def draft_pos_max(self, seq_id: int) -> int:
        """Last position in the draft KV of `seq_id` (-1: empty), after injecting what it kept."""
        self._attached()
        self._flush([self._seq(seq_id)], strict=True)
        return self.dctx.pos_max(seq_id)

    # -- Drafter ------------------------------------------------------------------------

    def observe(self, committed: list[tuple[int, int, int]]) -> None:
        """Keep the target features of committed rows (seq_id, pos, batch_row) for injection.

        The rows must belong to the target's last decode: llama.cpp keeps only that batch's
        features, so they are copied out now (native gather). The draft decode that puts
        them into the draft KV waits for the sequence's next propose(), or until it holds
        MAX_PENDING rows: while the chooser decodes plainly, a draft call per token would
        cost a few percent of every step, and injecting many rows at once costs about as
        much as injecting one."""
        tctx = self._attached()
        if not committed:
            return
        by_seq: dict[int, list[tuple[int, int]]] = {}
        for seq_id, pos, row in committed:
            if not 0 <= row < tctx.n_batch or pos < 0:
                raise DraftStepError(f"observe(): row {row} / position {pos} is outside the target batch")
            by_seq.setdefault(self._seq(seq_id), []).append((int(pos), int(row)))
        for seq_id, items in by_seq.items():
            if len(items) > 1:
                items.sort()
                if any(b[0] != a[0] + 1 for a, b in zip(items, items[1:])):
                    raise DraftStepError(f"observe(): positions of sequence {seq_id} are not consecutive")
            if tctx.pos_max(seq_id) < items[-1][0]:
                # the target never decoded these rows: reading its feature buffers would abort
                raise DraftStepError(f"observe(): the target has not decoded position {items[-1][0]} "
                                     f"of sequence {seq_id}")
        for k, lid in enumerate(self.info.target_layers):
            self._layers[k] = tctx.layer_inputs(lid)  # [n_batch, n_embd] each
        for seq_id, items in by_seq.items():
            pend = self.pending.get(seq_id)
            if pend is None:
                pend = self.pending[seq_id] = _Pending(self.n_enc, self.n_ubatch)
            rows = np.fromiter((r for _, r in items), np.int32, len(items))  # [R]
            native.gather_features(self._layers, self.n_embd, tctx.n_batch, rows, pend.take(items[0][0], len(rows)))
            if pend.n_rows >= MAX_PENDING:
                self._flush([seq_id], strict=True)

    def _flush(self, seq_ids, strict: bool = False) -> set[int]:
        """Decode the kept features of `seq_ids` into the draft KV (KV injection), several
        sequences per call, at most n_ubatch rows per call (more aborts llama.cpp).

        A sequence whose kept rows do not continue its draft KV loses them (and cannot
        draft until it is forgotten); it is returned, or raised about when `strict`."""
        order: list[tuple[int, int]] = []  # (seq, pos) of every row, each sequence's positions consecutive
        chunks, broken = [], set()
        for seq_id in sorted(seq_ids):
            pend = self.pending.get(seq_id)
            if pend is None or not pend.n_rows:
                continue
            first, n = pend.first, pend.n_rows
            pend.n_rows = 0  # the buffer stays for the next rows
            # drop the previous draft block (and anything the target re-decoded), then require continuity
            self.dctx.forget(seq_id, first)
            have = self.dctx.pos_max(seq_id)
            if first != have + 1:
                if strict:
                    raise DraftStepError(f"sequence {seq_id} resumes at position {first} but the draft "
                                         f"holds positions up to {have}: a committed row was not observed")
                broken.add(seq_id)
                continue
            order += [(seq_id, first + j) for j in range(n)]
            chunks.append(pend.buf[:n])
        if not order:
            return broken
        feats = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)  # [R, n_enc]
        for start in range(0, len(order), self.n_ubatch):
            self.dctx.inject(order[start:start + self.n_ubatch], feats[start:start + self.n_ubatch])
        return broken

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        """One block of n_draft + 1 slots per sequence, all blocks of equal length; one decode
        per group of sequences that fits the draft's n_ubatch. Each proposal carries its
        block's lattice (with `unary`, the candidates' draft logits too, for top1), or for a
        v1 draft its path of n_draft tokens."""
        self._attached()
        width = n_draft + 1  # anchor + n_draft masked slots
        if n_draft < 1 or width > self.info.block_size or width > self.n_ubatch:
            raise DraftStepError(f"propose(): n_draft {n_draft} must be in [1, {self.info.block_size - 1}]")
        if len({s.seq_id for s in seqs}) != len(seqs):
            raise DraftStepError("propose(): a sequence appears twice")
        out: list[Proposal | None] = [None] * len(seqs)
        t0 = time.perf_counter()
        inject_rows = sum(self.pending[s.seq_id].n_rows for s in seqs if s.seq_id in self.pending)
        broken = self._flush([self._seq(sv.seq_id) for sv in seqs])  # the KV injection they waited for
        inject_ms = (time.perf_counter() - t0) * 1e3
        ready = []
        for i, sv in enumerate(seqs):
            seq_id = self._seq(sv.seq_id)
            anchor = sv.tokens[-1] if sv.tokens else -1
            if not 0 <= anchor < self.target.n_vocab or sv.pos < 0:
                raise DraftStepError(f"propose(): sequence {seq_id} has no valid anchor or position")
            if sv.pos + width > self.n_ctx_seq:
                out[i] = Proposal(skipped="no room for a block before the end of the context")
                continue
            self.dctx.forget(seq_id, sv.pos)  # a stale block from a previous call
            if seq_id in broken or self.dctx.pos_max(seq_id) != sv.pos - 1:
                out[i] = Proposal(skipped="draft KV does not reach the anchor (rows not observed)")
                continue
            ready.append(i)
        ready.sort(key=lambda i: seqs[i].seq_id)  # consecutive ids share one llama.cpp ubatch
        per_decode = self.n_ubatch // width
        for g in range(0, len(ready), per_decode):
            group = ready[g:g + per_decode]
            blocks, draft_ms = self._decode_blocks([seqs[i] for i in group], width, unary)
            for j, i in enumerate(group):
                lat, path = (blocks[j], []) if self.kind == DFLASH2 else (None, blocks[j])
                out[i] = Proposal(path=path, lattice=lat, draft_ms=draft_ms, n_blocks=len(group),
                                  inject_ms=inject_ms, inject_rows=inject_rows)
        return out  # type: ignore[return-value]

    def _decode_blocks(self, seqs: list[SeqView], width: int, unary: bool = False) -> tuple[list, float]:
        """Decode the blocks of `seqs` in one call. Returns each block's lattice (rows
        [width, n_embd]; with unary, the candidates' draft logits [width - 1, K]), or for a v1
        draft each block's path [width - 1], and the decode's milliseconds."""
        logits = unary or self.kind != DFLASH2
        batch = self.dctx.tokens
        batch.clear()
        for sv in seqs:
            for j in range(width):
                # logits: flag every row, the anchor too: the draft's logits buffer holds its first
                # n_outputs rows in batch order, so flags on the slots alone would shift them by one
                batch.add(sv.tokens[-1] if j == 0 else self.info.mask_token_id, sv.pos + j, sv.seq_id, logits)
        t0 = time.perf_counter()
        try:
            self.dctx.decode()
        except GenerationFailed as e:
            raise DraftStepError(e.message) from None
        if self.kind != DFLASH2:  # plain DFlash: each slot's top-1 (first of tied maxima)
            paths = [[int(np.argmax(self.dctx.logits_row(j * width + t))) for t in range(1, width)]
                     for j in range(len(seqs))]  # [n_blocks][width - 1]; argmax syncs with the decode
            return paths, (time.perf_counter() - t0) * 1e3
        rows = self.dctx.lattice_rows()  # [n_blocks * B, n_embd]
        ms = (time.perf_counter() - t0) * 1e3
        if rows is None:
            raise DraftStepError("the draft produced no lattice (is this a DFlash 2 draft?)")
        K = self.info.top_k
        out = []
        for j in range(len(seqs)):
            lat = Lattice(rows[j * width:(j + 1) * width].copy(), K)  # a copy: the next decode overwrites rows
            if unary:
                cand = lat.rows[1:, :K].astype(np.int64)  # [width-1, K] candidate ids stored as floats
                lat.unary = np.stack([self.dctx.logits_row(j * width + t + 1)[cand[t]]
                                      for t in range(width - 1)])  # [width-1, K]
            out.append(lat)
        return out, ms

    def keep_prefix(self, seq_id: int, n: int) -> bool:
        """The sequence's request ended and the next one may share its first `n` positions
        (engine/prefix.py): keep the draft KV of those, drop the rest. False (and nothing
        kept) when the draft KV does not hold every one of them."""
        self._attached()
        broken = self._flush([self._seq(seq_id)])  # rows observed but not yet injected
        self.dctx.forget(seq_id, n)
        if seq_id in broken or self.dctx.pos_max(seq_id) != n - 1:
            self.forget(seq_id)
            return False
        return True

    def forget(self, seq_id: int) -> None:
        """Drop every draft KV cell of the sequence (it ended or was cancelled)."""
        self._attached()
        self.pending.pop(self._seq(seq_id), None)  # its buffer goes too: the next request may never draft
        self.dctx.forget(seq_id)
