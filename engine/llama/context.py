"""A llama.cpp decoding context over a loaded model, and the token batch it decodes.

One context serves several sequences at once (continuous batching): each active
request owns a sequence id, and every `decode` carries tokens of many sequences.
The KV cache is *not* unified (`kv_unified=false`): each sequence gets its own KV
stream of `n_ctx_seq` cells, so a sequence's attention sees exactly the same cells in
the same order whether it runs alone or beside others. Flash attention is off: with
it on, the CPU kernel's result for a sequence changed with what else was in the batch
(measured: 1 of 8 dev prompts diverged at token 9; with a unified cache 6 of 8 did).
With both choices, greedy output is independent of concurrency, bit for bit.

Rolling back (`forget` of a sequence's tail) is exact only where the memory still holds what
the kept positions need, and `forget` refuses (returns False, changing nothing) elsewhere:
- attention caches drop a tail exactly;
- recurrent state (Gated DeltaNet, Mamba; alone or in a hybrid) is one state per sequence. The
  pinned llama.cpp keeps `n_rs_seq` snapshots of it per sequence for the archs that support it
  (`llm_arch_supports_rs_rollback`: qwen35, qwen35moe, ...), written by each decode for its last
  min(rows, n_rs_seq + 1) tokens of the sequence, and a removal reads one of them. It checks
  only the depth, so a removal that reaches past the last decode of that sequence would read a
  stale snapshot: this module allows a tail removal only inside the sequence's last decode,
  keeping at least its first row, once per decode, at most `rollback` deep;
- a sliding-window cache is made full-size (`swa_full`, the pinned default, set here on purpose):
  it then drops no cell, so a tail removal is exact at any depth. A window-sized cache reuses
  cells the window has left behind: a removal reaching past the last decode could lose cells the
  next token needs, and even one that keeps the window was measured not bit-identical (the
  re-decoded rows land in reused cells, in another order).

Not thread-safe: only the engine worker thread touches a Context.
References: llama.cpp `include/llama.h` (context, batch, memory sections).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

import llama_cpp
import numpy as np

from ..errors import EngineStopped, GenerationFailed, ModelLoadError
from . import ext
from .model import Model

T = TypeVar("T")


@dataclass(frozen=True)
class ContextConfig:
    """No defaults: the engine's are EngineConfig's (engine/worker.py), the one place they live."""

    n_ctx_seq: int  # context per sequence (prompt + output)
    n_seq: int  # sequences decoded together
    n_batch: int  # most tokens in one decode
    n_threads: int
    rollback: int = 0  # the most tokens a tail removal may drop on recurrent memory (snapshots kept)


def on_own_thread(work: Callable[[], T]) -> T:
    """`work()` on a thread that ends with it; its result, or its exception raised here.

    For decodes outside the engine's worker thread (the load-time checks). ggml's CPU backend runs a
    decode's threads as an OpenMP team of the thread that calls it, and libgomp keeps a team for as
    long as its thread lives. With a second team alive beside the worker's, there are more OpenMP
    threads than cores, so libgomp throttles its spin-waits between graph nodes into sleeps: every
    later decode of the worker took about twice as long (measured on 2 cores, SmolLM2: 20 against
    10 ms a token, until the loading thread ended)."""
    out: list = []

    def run() -> None:
        try:
            out.append((True, work()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller as it is
            out.append((False, e))

    t = threading.Thread(target=run, name="flashdesk-decode-once")
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


class Batch:
    """A reusable `llama_batch` of up to `capacity` tokens, one sequence id per token."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.raw = llama_cpp.llama_batch_init(capacity, 0, 1)
        self.n = 0
        self.rows_of: dict[int, int] = {}  # seq_id -> rows of it in this batch

    def clear(self) -> None:
        self.n = 0
        self.rows_of = {}

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
        self.rows_of[seq_id] = self.rows_of.get(seq_id, 0) + 1
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
        p.n_rs_seq = cfg.rollback if model.recurrent else 0
        p.swa_full = True  # sliding-window layers keep every cell: rollback and prefix reuse stay exact
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
        self.n_ubatch = int(llama_cpp.llama_n_ubatch(self.ptr))  # a decode is computed in ubatches of at most this
        self.memory = llama_cpp.llama_get_memory(self.ptr)
        self.batch = Batch(self.n_batch)
        # recurrent memory: snapshots per sequence (llama.cpp clamps to 0 where the arch has none)
        self.rollback = int(llama_cpp.llama_n_rs_seq(self.ptr)) if model.recurrent else None
        self._last: dict[int, int] = {}  # seq_id -> first position of its last decode (recurrent memory)
        self._abort: object = None  # set_abort's ctypes callback: llama.cpp holds only its address

    def set_abort(self, flag: Callable[[], bool] | None) -> None:
        """While `flag()` is true, llama.cpp gives up a decode between graph nodes (status 2, which
        decode() raises as EngineStopped): a load that is stopped does not finish its checks."""
        # a CFUNCTYPE made with no argument is the NULL function pointer: no callback
        self._abort = llama_cpp.ggml_abort_callback() if flag is None else llama_cpp.ggml_abort_callback(
            lambda _: bool(flag()))
        llama_cpp.llama_set_abort_callback(self.ptr, self._abort, None)  # the ctypes callback lives on self

    def decode(self, batch: Batch) -> None:
        if batch.n == 0:
            return
        batch.raw.n_tokens = batch.n
        rc = llama_cpp.llama_decode(self.ptr, batch.raw)
        if rc == 2:
            raise EngineStopped("the server stopped while this decode ran")
        if rc != 0:
            # 1: no KV slot for the batch; 2: aborted; < 0: error. The batch left no trace.
            raise GenerationFailed(f"llama_decode failed with status {rc}")
        if self.rollback is not None:  # what a later tail removal may reach
            for seq_id, rows in batch.rows_of.items():
                self._last[seq_id] = self.pos_max(seq_id) - rows + 1
        # A GPU backend returns before the work is done; reading logits would wait anyway.
        # Waiting here keeps the timings honest (verify time is the target's, not Python's).
        llama_cpp.llama_synchronize(self.ptr)

    def logits_ptr(self, row: int) -> ctypes._Pointer[ctypes.c_float]:
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
        assert first is not None and last is not None, "llama.cpp has logits for these rows"
        if last - first == 4 * n_vocab * (len(rows) - 1):
            return np.ctypeslib.as_array(ctypes.cast(first, ctypes.POINTER(ctypes.c_float)),
                                         shape=(len(rows), n_vocab))  # [n, V] in place
        out = np.empty((len(rows), n_vocab), dtype=np.float32)  # [n, V]
        for i, r in enumerate(rows):
            out[i] = np.ctypeslib.as_array(self.logits_ptr(r), shape=(n_vocab,))
        return out

    def forget(self, seq_id: int, p0: int = -1) -> bool:
        """Drop cells of `seq_id` from position p0 on (all of them by default, or p0 <= 0). False
        where this memory cannot drop that tail exactly (module docstring): nothing changes then."""
        if p0 <= 0:
            self._last.pop(seq_id, None)
            return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq_id, -1, -1))
        if p0 > self.pos_max(seq_id):
            return True  # no tail there
        if self.rollback is not None:  # recurrent: a snapshot of this sequence's last decode, once
            first = self._last.get(seq_id)
            if first is None or p0 <= first or self.pos_max(seq_id) - p0 + 1 > self.rollback:
                return False
            del self._last[seq_id]  # the snapshot is used up until the next decode
        return bool(llama_cpp.llama_memory_seq_rm(self.memory, seq_id, p0, -1))

    def state_of(self, seq_id: int):
        """A copy, in host memory, of the sequence's partial state (its recurrent state): the
        prompt-end checkpoint prefix reuse restores (prefix.py), and what bench/rollback_cost.py
        times as the per-verify checkpoint the engine does not use. Host memory, not the card's:
        one copy per sequence and request is cheap to move, and VRAM is what a big model lacks."""
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = llama_cpp.llama_state_seq_get_size_ext(self.ptr, seq_id, flags)
        buf = (ctypes.c_uint8 * size)()
        llama_cpp.llama_state_seq_get_data_ext(self.ptr, buf, size, seq_id, flags)
        return buf

    def set_state(self, seq_id: int, buf) -> bool:
        """Write back a `state_of` copy into the sequence; False if llama.cpp did not take it."""
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        return llama_cpp.llama_state_seq_set_data_ext(self.ptr, buf, len(buf), seq_id, flags) > 0

    def restore(self, seq_id: int, state, n: int) -> bool:
        """Recurrent memory: put the sequence back to its first n positions from `state`, a `state_of`
        copy taken when it held exactly those: the recurrent state from the copy, the attention
        cells past n dropped. False (the sequence cleared) if llama.cpp did not take it."""
        self._last.pop(seq_id, None)  # no snapshot of a decode belongs to the restored state
        if (self.rollback is None or not self.set_state(seq_id, state)
                or not llama_cpp.llama_memory_seq_rm(self.memory, seq_id, n, -1) or self.pos_max(seq_id) != n - 1):
            self.forget(seq_id)
            return False
        return True

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
            del self.batch  # closed: the getattr above finds none
        if getattr(self, "ptr", None):
            llama_cpp.llama_free(self.ptr)
            self.ptr = None
