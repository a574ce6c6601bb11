"""A loaded GGUF model: weights, vocabulary and metadata, through llama.cpp's C API.

It owns the `llama_model *` and its vocabulary, through llama-cpp-python's low-level
bindings, as the other modules of `engine/llama/` own the rest (`context.py` the target's
context, `draft_context.py` a draft's). It does not decode; contexts do. Tokenization is
read-only on the vocabulary, so callers on other threads may tokenize while the worker decodes.

References: llama.cpp `include/llama.h` (model and vocab sections).
"""

from __future__ import annotations

import collections
import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import llama_cpp

from ..errors import EngineStopped, InvalidRequest, ModelLoadError

_backend_lock = threading.Lock()
_backend_ready = False
_verbose = False
_last_level = 0
GGML_LOG_WARN, GGML_LOG_ERROR, GGML_LOG_CONT = 3, 4, 5  # enum ggml_log_level of the pinned ggml
recent_errors: collections.deque[str] = collections.deque(maxlen=8)


@llama_cpp.llama_log_callback
def _on_log(level: int, text: bytes, user_data) -> None:
    # Our own callback: llama-cpp-python's maps this ggml's levels wrongly (errors as debug).
    global _last_level
    level = _last_level if level == GGML_LOG_CONT else level
    _last_level = level
    msg = text.decode("utf-8", errors="replace")
    if level == GGML_LOG_ERROR and msg.strip():
        recent_errors.append(msg.strip())
    if _verbose or level == GGML_LOG_ERROR:
        sys.stderr.write(msg)


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process; its log goes to stderr if verbose (errors always)."""
    global _backend_ready, _verbose
    with _backend_lock:
        _verbose = verbose
        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True


def last_error() -> str:
    """The most telling recent llama.cpp error line, for messages to the user."""
    for line in reversed(recent_errors):
        if "error loading model:" in line:
            return line.rsplit("error loading model:", 1)[1].strip()
    return recent_errors[-1] if recent_errors else "no reason given"


@dataclass(frozen=True)
class ModelInfo:
    """What a user or the server needs to know about a loaded model."""

    path: str
    architecture: str
    description: str
    n_params: int
    size_bytes: int
    n_ctx_train: int
    n_layer: int
    n_embd: int
    n_vocab: int
    has_chat_template: bool


class Model:
    """Owns a `llama_model *`. Free it with `close()` (contexts must be closed first)."""

    def __init__(self, path: str | os.PathLike, *, n_gpu_layers: int = -1, verbose: bool = False,
                 stop: Callable[[], bool] | None = None):
        """`stop`: asked while the tensors load; once true, llama.cpp gives the load up (EngineStopped)."""
        init_backend(verbose)
        self.path = str(Path(path))
        if not os.path.isfile(self.path):
            raise ModelLoadError(f"model file not found: {self.path}")
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers  # ignored by a CPU-only build
        params.use_mmap = True
        if stop is not None:  # the callback must outlive the call: kept in a local until it returns
            keep_going = llama_cpp.llama_progress_callback(lambda _progress, _data: not stop())
            params.progress_callback = keep_going
        recent_errors.clear()
        self.ptr = llama_cpp.llama_model_load_from_file(self.path.encode(), params)
        if not self.ptr and stop is not None and stop():
            raise EngineStopped("the server stopped while the model loaded")
        if not self.ptr:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {last_error()}. "
                "HINT: check that the file is a complete GGUF model of a supported architecture."
            )
        self.vocab = llama_cpp.llama_model_get_vocab(self.ptr)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.bos_id = llama_cpp.llama_vocab_bos(self.vocab)
        self.eos_id = llama_cpp.llama_vocab_eos(self.vocab)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))
        self.n_swa = int(llama_cpp.llama_model_n_swa(self.ptr))  # sliding-window size; 0: full attention only
        # recurrent state per sequence (Mamba, RWKV, Gated DeltaNet; alone or beside attention)
        self.recurrent = bool(llama_cpp.llama_model_is_recurrent(self.ptr) or llama_cpp.llama_model_is_hybrid(self.ptr))
        self._piece_cache: dict[int, bytes] = {}
        self.info = ModelInfo(
            path=self.path,
            architecture=self.meta("general.architecture") or "unknown",
            description=self._desc(),
            n_params=int(llama_cpp.llama_model_n_params(self.ptr)),
            size_bytes=int(llama_cpp.llama_model_size(self.ptr)),
            n_ctx_train=int(llama_cpp.llama_model_n_ctx_train(self.ptr)),
            n_layer=int(llama_cpp.llama_model_n_layer(self.ptr)),
            n_embd=int(llama_cpp.llama_model_n_embd(self.ptr)),
            n_vocab=self.n_vocab,
            has_chat_template=self.chat_template() is not None,
        )

    # -- metadata -------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):  # long value (e.g. a chat template): ask again with room for it
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = llama_cpp.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def _desc(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    # -- vocabulary -----------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool | None = None, special: bool = True) -> list[int]:
        """Text -> token ids. `special` parses control tokens like <|im_start|> in the text."""
        data = text.encode("utf-8")
        add = self.add_bos if add_bos is None else add_bos
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add, special)
        if n < 0:  # buffer too small: llama.cpp returns -(needed)
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add, special)
        if n < 0:
            raise InvalidRequest("the text could not be tokenized")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token as it appears in output text (control tokens render empty)."""
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        out = buf.raw[: max(n, 0)]
        self._piece_cache[token] = out
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        """The vocabulary entry itself, also for control tokens (e.g. "<|im_end|>")."""
        raw = llama_cpp.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def token_bytes(self) -> list[bytes]:
        """Every vocabulary entry's raw bytes, in id order (to compare two vocabularies)."""
        return [llama_cpp.llama_vocab_get_text(self.vocab, i) or b"" for i in range(self.n_vocab)]

    @property
    def mask_id(self) -> int:
        """tokenizer.ggml.mask_token_id as llama.cpp read it (-1: none); a DFlash draft's mask."""
        return int(llama_cpp.llama_vocab_mask(self.vocab))

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        if getattr(self, "ptr", None):
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):  # best effort; the worker closes explicitly
        try:
            self.close()
        except Exception:
            pass
