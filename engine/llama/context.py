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

from ..errors import GenerationFailed, ModelLoadError
from .model import Model


@dataclass(frozen=True)
class ContextConfig:
    n_ctx_seq: int = 4096  # context per sequence (prompt + output)
    n_seq: int = 4  # sequences decoded together
    n_batch: int = 512  # most tokens in one decode
    n_threads: int = 2


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

    def forget(self, seq_id: int, p0: int = -1) -> None:
        """Drop cells of `seq_id` from position p0 on (all of them by default)."""
        llama_cpp.llama_memory_seq_rm(self.memory, seq_id, p0, -1)

    def close(self) -> None:
        if getattr(self, "batch", None) is not None:
            self.batch.free()
            self.batch = None
        if getattr(self, "ptr", None):
            llama_cpp.llama_free(self.ptr)
            self.ptr = None
