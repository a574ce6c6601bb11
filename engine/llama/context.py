"""A llama.cpp decoding context over a loaded model, and the token batch it decodes.

One context serves several sequences at once (continuous batching): each active
request owns a sequence id, and every `decode` carries tokens of many sequences.
The KV cache is *not* unified (`kv_unified=false`): each sequence gets its own KV
stream of `n_ctx_seq` cells, so a sequence's attention sees exactly the same cells in
the same order whether it runs alone or beside others. Flash attention is off: with
it on, the CPU kernel's result for a sequence changed with what else was in the batch
(measured: 1 of 8 dev prompts diverged at token 9; with a unified cache 6 of 8 did).
With both choices, greedy output is independent of concurrency, bit for bit.

Not thread-safe: only the engine worker thread touches a Context.
References: llama.cpp `include/llama.h` (context, batch, memory sections).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp
import numpy as np

from ..errors import GenerationFailed, ModelLoadError
from . import ext
from .model import Model


@dataclass(frozen=True)
class ContextConfig:
    """No defaults: the engine's are EngineConfig's (engine/worker.py), the one place they live."""

    n_ctx_seq: int  # context per sequence (prompt + output)
    n_seq: int  # sequences decoded together
    n_batch: int  # most tokens in one decode
    n_threads: int


class Batch:
    """A reusable `llama_batch` of up to `capacity` tokens, one sequence id per token."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.raw = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its row index (where its logits will be)."""
        i = self.n
        if i >= self.capacity:
            raise IndexError("batch full")
        b = self.raw
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq_id
        b.logits[i] = logits
        self.n = i + 1
        return i

    @property
    def room(self) -> int:
        return self.capacity - self.n

    def free(self) -> None:
        if self.raw is not None:
            llama_cpp.llama_batch_free(self.raw)
            self.raw = None


class Context:
    """Owns a `llama_context *` with `n_seq` KV streams of `n_ctx_seq` cells each."""

    def __init__(self, model: Model, cfg: ContextConfig):
        self.model = model
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = cfg.n_ctx_seq * cfg.n_seq
        p.n_seq_max = cfg.n_seq
        p.n_batch = cfg.n_batch
        p.n_ubatch = cfg.n_batch
        p.n_threads = cfg.n_threads
        p.n_threads_batch = cfg.n_threads
        p.kv_unified = False
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = True
        self.ptr = llama_cpp.llama_init_from_model(model.ptr, p)
        if not self.ptr:
            raise ModelLoadError(
                f"llama.cpp could not create a context of {cfg.n_ctx_seq} tokens x {cfg.n_seq} "
                "sequences. HINT: lower --ctx or --parallel."
            )
        # llama.cpp pads the per-sequence context up to a multiple of 256.
        self.n_ctx_seq = int(llama_cpp.llama_n_ctx_seq(self.ptr))
        self.n_seq = int(llama_cpp.llama_n_seq_max(self.ptr))
        self.n_batch = int(llama_cpp.llama_n_batch(self.ptr))
        self.memory = llama_cpp.llama_get_memory(self.ptr)
        self.batch = Batch(self.n_batch)

    def decode(self, batch: Batch) -> None:
        if batch.n == 0:
            return
        batch.raw.n_tokens = batch.n
        rc = llama_cpp.llama_decode(self.ptr, batch.raw)
        if rc != 0:
            # 1: no KV slot for the batch; 2: aborted; < 0: error. The batch left no trace.
            raise GenerationFailed(f"llama_decode failed with status {rc}")
        # A GPU backend returns before the work is done; reading logits would wait anyway.
        # Waiting here keeps the timings honest (verify time is the target's, not Python's).
        llama_cpp.llama_synchronize(self.ptr)

    def logits_ptr(self, row: int) -> ctypes.POINTER(ctypes.c_float):
        """Logits of batch row `row` of the last decode: [n_vocab] floats, owned by llama.cpp."""
        return llama_cpp.llama_get_logits_ith(self.ptr, row)

    def logits(self, rows: list[int]) -> np.ndarray:
        """Logits of the given batch rows after the last decode: [len(rows), n_vocab] float32.
        Consecutive output rows (a verify) are one block of llama.cpp's buffer and come back
        as a view of it, valid until the next decode; other rows are copied (per-row NumPy
        views cost ~40 us a row)."""
        n_vocab = self.model.n_vocab
        first = ctypes.cast(self.logits_ptr(rows[0]), ctypes.c_void_p).value
        last = ctypes.cast(self.logits_ptr(rows[-1]), ctypes.c_void_p).value
        if last - first == 4 * n_vocab * (len(rows) - 1):
            return np.ctypeslib.as_array(ctypes.cast(first, ctypes.POINTER(ctypes.c_float)),
                                         shape=(len(rows), n_vocab))  # [n, V] in place
        out = np.empty((len(rows), n_vocab), dtype=np.float32)  # [n, V]
        for i, r in enumerate(rows):
            out[i] = np.ctypeslib.as_array(self.logits_ptr(r), shape=(n_vocab,))
        return out

    def forget(self, seq_id: int, p0: int = -1) -> bool:
        """Drop cells of `seq_id` from position p0 on (all of them by default). False where the memory
        cannot drop a tail (recurrent state without rollback): the sequence is then unchanged."""
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq_id, p0, -1))

    def pos_max(self, seq_id: int) -> int:
        """The last position of `seq_id` in the KV cache (-1: none)."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.memory, seq_id))

    @property
    def n_threads(self) -> tuple[int, int]:
        return int(llama_cpp.llama_n_threads(self.ptr)), int(llama_cpp.llama_n_threads_batch(self.ptr))

    # -- layer capture (DFlash: the draft reads the target's hidden states) -------------

    def capture_layer_inputs(self, layer_ids, on: bool = True) -> None:
        """Copy out the input hidden state of these layers for every decoded token (ids must be
        < n_layer and set before the first decode: llama.cpp aborts otherwise)."""
        for lid in layer_ids:
            ext.llama_set_embeddings_layer_inp(self.ptr, lid, on)

    def layer_inputs(self, layer_id: int):
        """`float *` to the captured [n_batch, n_embd] inputs of a layer in the last decode (only
        for a layer capture was turned on for, and after a decode: llama.cpp aborts otherwise)."""
        return ext.llama_get_embeddings_layer_inp(self.ptr, layer_id)

    def close(self) -> None:
        if getattr(self, "batch", None) is not None:
            self.batch.free()
            self.batch = None
        if getattr(self, "ptr", None):
            llama_cpp.llama_free(self.ptr)
            self.ptr = None
