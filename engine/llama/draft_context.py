"""A DFlash draft's llama.cpp context: KV injection and the block decode that yields lattices
(DFlash 2) or logits per block slot (plain DFlash v1).

What it is: the llama.cpp half of the DFlash drafter. The context is created with
`ctx_other` = the target context (the draft borrows the target's token embedding and output
head), non-causal when the draft says so; for a DFlash 2 draft (`lattice`) with the nextn
output unmasked so every block slot returns a lattice row. A v1 draft has no nextn output
(dflash.cpp sets none without a selector), so nextn stays off and its logits are read
instead. `inject` decodes target feature rows as an embedding batch at the target positions
(this writes the draft's KV cache); `decode` runs a token batch of blocks
`[anchor, mask, ..., mask]`; `lattice_rows` and `logits_row` read what it left.

The draft's graph computes the output head for every row of a block and llama.cpp copies the
first n_outputs of them: whoever reads logits must flag *every* row of the batch, or the rows
come back shifted (the drafter does).
What it is not: the drafter's bookkeeping (engine/speculative/drafters/dflash.py checks every
call that would abort llama.cpp before it reaches this module).

References: llama.cpp `src/llama-ext.h`, `common/speculative.cpp` (the DFlash driver).
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from ..errors import GenerationFailed, ModelLoadError
from . import ext
from .context import Batch, Context
from .model import Model


def dflash_facts(model: Model) -> tuple[int, tuple[int, ...], int]:
    """(selector top_k, target layer ids, mask token id) of a loaded draft, as llama.cpp read them
    (top_k 0: a plain DFlash v1 draft, no candidate selector)."""
    return (int(ext.llama_model_dflash_selector_top_k(model.ptr)), tuple(ext.target_layer_ids(model.ptr)),
            model.mask_id)


class DraftContext:
    """Owns the draft's `llama_context *`, one KV stream per target sequence, and its two batches."""

    def __init__(self, model: Model, target: Context, *, n_ubatch: int, n_enc: int, causal: bool,
                 lattice: bool = True):
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = target.n_ctx_seq * target.n_seq
        p.n_seq_max = target.n_seq
        p.n_batch = p.n_ubatch = n_ubatch  # non-causal: one decode must fit one ubatch
        p.n_threads, p.n_threads_batch = target.n_threads
        p.kv_unified = False  # one KV stream per sequence, like the target
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = True
        p.ctx_other = target.ptr
        self.ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise ModelLoadError("llama.cpp could not create the DFlash draft context. "
                                 "HINT: lower --ctx or --parallel.")
        self.lattice = lattice
        if lattice:
            ext.llama_set_embeddings_nextn(self.ptr, True, False)  # unmasked: one lattice row per block slot
        llama_cpp.llama_set_causal_attn(self.ptr, causal)
        self.memory = llama_cpp.llama_get_memory(self.ptr)
        self.n_ubatch = int(llama_cpp.llama_n_ubatch(self.ptr))
        self.n_seq = int(llama_cpp.llama_n_seq_max(self.ptr))
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(self.ptr))
        self.n_embd, self.n_vocab = model.info.n_embd, target.model.n_vocab
        self.tokens = Batch(self.n_ubatch)
        self.embd = llama_cpp.llama_batch_init(self.n_ubatch, n_enc, 1)

    def forget(self, seq_id: int, p0: int = -1) -> None:
        llama_cpp.llama_memory_seq_rm(self.memory, seq_id, p0, -1)

    def pos_max(self, seq_id: int) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq_id))

    def inject(self, chunk: list[tuple[int, int]], feats: np.ndarray) -> None:
        """Decode feature rows feats [n, n_enc] at (seq_id, pos) of `chunk` into the draft KV
        (n <= n_ubatch: the caller splits)."""
        b, n = self.embd, len(chunk)
        ctypes.memmove(b.embd, feats.ctypes.data, feats.nbytes)
        for i, (seq_id, pos) in enumerate(chunk):
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq_id
            b.logits[i] = False
        b.n_tokens = n
        rc = llama_cpp.llama_decode(self.ptr, b)
        if rc != 0:
            raise GenerationFailed(f"draft KV injection of {n} rows failed with status {rc}")
        llama_cpp.llama_synchronize(self.ptr)  # (a GPU backend) the injection's time is the draft's

    def decode(self) -> None:
        """Decode `self.tokens` (blocks the caller added)."""
        batch = self.tokens
        batch.raw.n_tokens = batch.n
        rc = llama_cpp.llama_decode(self.ptr, batch.raw)
        if rc != 0:
            raise GenerationFailed(f"draft block decode failed with status {rc}")

    def lattice_rows(self) -> np.ndarray | None:
        """The nextn output of the last block decode: [n_tokens, n_embd] float32, a view that the
        next decode overwrites (None: no lattice, not a DFlash 2 draft)."""
        ptr = ext.llama_get_embeddings_nextn(self.ptr) if self.lattice else None
        return np.ctypeslib.as_array(ptr, shape=(self.tokens.n, self.n_embd)) if ptr else None

    def logits_row(self, row: int) -> np.ndarray:
        """The draft's logits of an output row of the last decode, over the target's ids: [n_vocab]
        (a reduced-vocabulary draft scatters its logits there, -inf elsewhere); a view."""
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ptr, row), shape=(self.n_vocab,))

    def close(self) -> None:
        if self.ptr:
            self.tokens.free()
            llama_cpp.llama_batch_free(self.embd)
            llama_cpp.llama_free(self.ptr)
            self.ptr = None
