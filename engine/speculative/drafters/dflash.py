"""The DFlash 2 drafter: a llama.cpp draft context fed with the target's layer features.

`DFlashDrafter` implements `engine.speculative.drafters.base.Drafter` for several concurrent
sequences. `attach` turns on layer-input capture on the target context for every tap of
the draft and creates the draft context (`ctx_other` = target, non-causal, nextn output
unmasked). `observe` copies the captured features of committed target rows, tap by tap;
the next `propose` decodes them into the draft context as an embedding batch at the
target positions (KV injection), many rows per call, then decodes one block
`[anchor, mask, ..., mask]` per sequence, reads the lattice (DESIGN.md §2, §3) and walks
it to a path.

Everything that would abort the process inside llama.cpp is checked here first: the
draft GGUF is validated before it is loaded (`inspect_draft`), and every call checks
tap ids, row counts against the draft's n_ubatch, block length against block_size and
that the target has decoded the rows it reads.

Not the path selector of record: `walk` is upstream's greedy walk (and a plain
softmax draw at temperature > 0); `engine/speculative/select.py` can take over from the raw
lattice kept in `Proposal.stats["lattice"]`. Not the loop either (`engine/speculative/loop.py`).
References: llama.cpp `common/speculative.cpp` (DFlash driver), `src/models/dflash.cpp`.
"""

from __future__ import annotations

import ctypes
import time

import llama_cpp
import numpy as np

from ...llama.context import Batch, Context
from ...errors import GenerationFailed, ModelLoadError
from ... import native
from ...llama.model import Model
from ...llama import ext
from .base import Proposal, SeqView
from .dflash_fit import HINT, DraftRefused, inspect_draft  # noqa: F401  (DraftRefused: what callers catch)
from ..select import select

MAX_PENDING = 512  # observed rows a sequence keeps before injecting anyway (~6 MB for SmolLM2's 5 taps)


class DraftStepError(GenerationFailed):
    """A draft call was refused before it reached llama.cpp, or llama.cpp failed it."""


def walk(lattice: np.ndarray, top_k: int, temperature: float = 0.0, rng: np.random.Generator | None = None):
    """Path through one block's lattice rows `[B, stride]` (row 0 = anchor, unused), by the
    native walk of select.py: upstream's greedy walk at temperature <= 0, otherwise a path
    drawn from q = softmax(score[pred] / temperature). Returns (tokens [T], cand_ids [T, K]
    or None, cand_q [T, K] or None) with T = B - 1.
    """
    T = lattice.shape[0] - 1
    if temperature <= 0.0:
        return select(lattice, T, top_k, "walk").ids.tolist(), None, None
    rng = rng if rng is not None else np.random.default_rng()
    sel = select(lattice, T, top_k, "walk", temperature, uniforms=rng.random(T, dtype=np.float32))
    return sel.ids.tolist(), sel.cand_ids, sel.q


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


class DFlashDrafter:
    """A DFlash 2 draft for one target model, drafting for all its sequences."""

    name = "dflash"

    def __init__(self, draft_path: str, target: Model, *, n_ubatch: int = 64, seed: int = 0, verbose: bool = False):
        self.info = inspect_draft(str(draft_path), target)  # raises DraftRefused; nothing loaded yet
        self.target = target
        self.n_ubatch_want = max(int(n_ubatch), self.info.block_size)
        self.rng = np.random.default_rng(seed)
        self.model = Model(draft_path, verbose=verbose)
        got_k = int(ext.llama_model_dflash_selector_top_k(self.model.ptr))
        got_taps = tuple(ext.target_layer_ids(self.model.ptr))
        got_mask = int(llama_cpp.llama_vocab_mask(self.model.vocab))
        if (got_k, got_taps, got_mask) != (self.info.top_k, self.info.target_layers, self.info.mask_token_id):
            self.model.close()
            raise DraftRefused(f"llama.cpp read draft {draft_path} differently than its metadata says "
                               f"(top_k {got_k}, taps {got_taps}, mask {got_mask}). {HINT}")
        self.n_embd = self.info.n_embd
        self.n_enc = len(self.info.target_layers) * self.n_embd  # width of one injected feature row
        self.ctx = None
        self.tctx: Context | None = None

    # -- setup --------------------------------------------------------------------------

    def attach(self, target_ctx: Context) -> None:
        """Enable capture on the target and create the draft context (before the target's first decode)."""
        if self.ctx is not None:
            raise DraftStepError("this DFlash drafter is already attached to a target context")
        if target_ctx.model.ptr != self.target.ptr:
            raise DraftStepError("attach() got a context of another model than the draft was validated for")
        mem = target_ctx.memory
        if any(llama_cpp.llama_memory_seq_pos_max(mem, s) >= 0 for s in range(target_ctx.n_seq)):
            raise DraftStepError("attach the DFlash drafter before the target's first decode (its KV is not empty)")
        for lid in self.info.target_layers:  # ids checked < target n_layer in inspect_draft
            ext.llama_set_embeddings_layer_inp(target_ctx.ptr, lid, True)
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = target_ctx.n_ctx_seq * target_ctx.n_seq
        p.n_seq_max = target_ctx.n_seq
        p.n_batch = p.n_ubatch = self.n_ubatch_want  # non-causal: one decode must fit one ubatch
        p.n_threads = llama_cpp.llama_n_threads(target_ctx.ptr)
        p.n_threads_batch = llama_cpp.llama_n_threads_batch(target_ctx.ptr)
        p.kv_unified = False  # one KV stream per sequence, like the target
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = True
        p.ctx_other = target_ctx.ptr  # the draft borrows the target's token embedding and output head
        ctx = llama_cpp.llama_init_from_model(self.model.ptr, p)
        if not ctx:
            for lid in self.info.target_layers:  # leave the target as it was
                ext.llama_set_embeddings_layer_inp(target_ctx.ptr, lid, False)
            raise ModelLoadError("llama.cpp could not create the DFlash draft context. HINT: lower --ctx or --parallel.")
        self.ctx, self.tctx = ctx, target_ctx
        ext.llama_set_embeddings_nextn(ctx, True, False)  # unmasked: one lattice row per block slot
        llama_cpp.llama_set_causal_attn(ctx, self.info.causal)
        self.mem = llama_cpp.llama_get_memory(ctx)
        self.n_ubatch = int(llama_cpp.llama_n_ubatch(ctx))
        self.n_seq = int(llama_cpp.llama_n_seq_max(ctx))
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(ctx))
        self.tokens = Batch(self.n_ubatch)
        self.embd = llama_cpp.llama_batch_init(self.n_ubatch, self.n_enc, 1)
        self.pending: dict[int, _Pending] = {}  # seq_id -> features observed but not yet injected
        self._layers = (ctypes.c_void_p * len(self.info.target_layers))()  # capture buffers of the last decode

    def close(self) -> None:
        """Free the draft context and model (before the target context they point into)."""
        if getattr(self, "ctx", None):
            self.tokens.free()
            llama_cpp.llama_batch_free(self.embd)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None) is not None:
            self.model.close()

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
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, seq_id))

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
            if llama_cpp.llama_memory_seq_pos_max(tctx.memory, seq_id) < items[-1][0]:
                # the target never decoded these rows: reading its feature buffers would abort
                raise DraftStepError(f"observe(): the target has not decoded position {items[-1][0]} "
                                     f"of sequence {seq_id}")
        for k, lid in enumerate(self.info.target_layers):
            self._layers[k] = ext.llama_get_embeddings_layer_inp(tctx.ptr, lid)  # [n_batch, n_embd] each
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
            llama_cpp.llama_memory_seq_rm(self.mem, seq_id, first, -1)
            have = int(llama_cpp.llama_memory_seq_pos_max(self.mem, seq_id))
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
            self._inject(order[start:start + self.n_ubatch], feats[start:start + self.n_ubatch])
        return broken

    def _inject(self, chunk: list[tuple[int, int]], feats: np.ndarray) -> None:
        b, n = self.embd, len(chunk)  # feats: [n, n_enc]
        ctypes.memmove(b.embd, feats.ctypes.data, feats.nbytes)
        for i, (seq_id, pos) in enumerate(chunk):
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq_id
            b.logits[i] = False
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            raise DraftStepError(f"draft KV injection of {n} rows failed with status {rc}")
        llama_cpp.llama_synchronize(self.ctx)  # (a GPU backend) the injection's time is the draft's

    def propose(self, seqs: list[SeqView], n_draft: int, temperature: float,
                unary: bool = False) -> list[Proposal]:
        """One block of n_draft + 1 slots per sequence, all blocks of equal length; one decode
        per group of sequences that fits the draft's n_ubatch. With `unary`, stats["unary"]
        [n_draft, K] holds the draft's logits of each slot's candidates (for top1)."""
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
                out[i] = Proposal([], stats={"skipped": "no room for a block before the end of the context"})
                continue
            llama_cpp.llama_memory_seq_rm(self.mem, seq_id, sv.pos, -1)  # a stale block from a previous call
            if seq_id in broken or llama_cpp.llama_memory_seq_pos_max(self.mem, seq_id) != sv.pos - 1:
                out[i] = Proposal([], stats={"skipped": "draft KV does not reach the anchor (rows not observed)"})
                continue
            ready.append(i)
        ready.sort(key=lambda i: seqs[i].seq_id)  # consecutive ids share one llama.cpp ubatch
        per_decode = self.n_ubatch // width
        for g in range(0, len(ready), per_decode):
            group = ready[g:g + per_decode]
            lattices, unaries, draft_ms = self._decode_blocks([seqs[i] for i in group], width, unary)
            for j, i in enumerate(group):
                t0 = time.perf_counter()
                tokens, cand_ids, cand_q = walk(lattices[j], self.info.top_k, temperature, self.rng)
                # draft_ms: the one decode this sequence shared with n_blocks - 1 others
                stats = {"draft_ms": draft_ms, "inject_ms": inject_ms, "inject_rows": inject_rows,
                         "select_ms": (time.perf_counter() - t0) * 1e3,
                         "n_blocks": len(group), "top_k": self.info.top_k, "lattice": lattices[j]}
                if unary:
                    stats["unary"] = unaries[j]
                out[i] = Proposal(tokens, cand_ids, cand_q, stats)
        return out  # type: ignore[return-value]

    def _decode_blocks(self, seqs: list[SeqView], width: int, unary: bool = False):
        """Decode the blocks of `seqs` in one call. Returns the lattice rows [width, n_embd]
        of each block, with unary: the candidates' draft logits [width - 1, K] of each
        block (else Nones), and the decode's milliseconds."""
        batch = self.tokens
        batch.clear()
        for sv in seqs:
            for j in range(width):
                # unary: flag every row, the anchor too: the draft's logits buffer holds its first
                # n_outputs rows in batch order, so flags on the slots alone would shift them by one
                batch.add(sv.tokens[-1] if j == 0 else self.info.mask_token_id, sv.pos + j, sv.seq_id, unary)
        batch.raw.n_tokens = batch.n
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self.ctx, batch.raw)
        if rc != 0:
            raise DraftStepError(f"draft block decode failed with status {rc}")
        ptr = ext.llama_get_embeddings_nextn(self.ctx)
        ms = (time.perf_counter() - t0) * 1e3
        if not ptr:
            raise DraftStepError("the draft produced no lattice (is this a DFlash 2 draft?)")
        rows = np.ctypeslib.as_array(ptr, shape=(batch.n, self.n_embd))  # [n_blocks * B, n_embd]
        # copies: the buffer is overwritten by the next draft decode
        lattices = [rows[j * width:(j + 1) * width].copy() for j in range(len(seqs))]
        unaries: list[np.ndarray | None] = [None] * len(seqs)
        if unary:
            K, n_vocab = self.info.top_k, self.target.n_vocab
            for j, lat in enumerate(lattices):
                cand = lat[1:, :K].astype(np.int64)  # [width-1, K] candidate ids stored as floats
                u = np.empty(cand.shape, np.float32)
                for t in range(width - 1):
                    # reduced-vocabulary drafts scatter their logits to the target's ids (-inf elsewhere)
                    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, j * width + t + 1),
                                                   shape=(n_vocab,))
                    u[t] = logits[cand[t]]
                unaries[j] = u
        return lattices, unaries, ms

    def keep_prefix(self, seq_id: int, n: int) -> bool:
        """The sequence's request ended and the next one may share its first `n` positions
        (engine/prefix.py): keep the draft KV of those, drop the rest. False (and nothing
        kept) when the draft KV does not hold every one of them."""
        self._attached()
        broken = self._flush([self._seq(seq_id)])  # rows observed but not yet injected
        llama_cpp.llama_memory_seq_rm(self.mem, seq_id, n, -1)
        if seq_id in broken or int(llama_cpp.llama_memory_seq_pos_max(self.mem, seq_id)) != n - 1:
            self.forget(seq_id)
            return False
        return True

    def forget(self, seq_id: int) -> None:
        """Drop every draft KV cell of the sequence (it ended or was cancelled)."""
        self._attached()
        self.pending.pop(self._seq(seq_id), None)  # its buffer goes too: the next request may never draft
        llama_cpp.llama_memory_seq_rm(self.mem, seq_id, -1, -1)
