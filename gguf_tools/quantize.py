"""Quantize a GGUF model through libllama: `quantize(src, dst, qtype) -> QuantizeReport`.

llama.cpp's own `llama_model_quantize` does the work (the same code as its
`llama-quantize` tool), so the result is whatever the pinned llama.cpp would produce,
including its per-tensor choices for mixes like Q4_K_M. What this module adds: the input
is validated by `check_gguf` first (llama.cpp trusts the file it reads); a file that is
already quantized is refused unless requantizing is asked for (llama.cpp would otherwise
fail half-way); the output is written to `DST.partial` and renamed only once it is
complete and passes `check_gguf`, so an interrupted run never leaves a half-written DST;
progress comes from llama.cpp's log (one line per tensor), since quantize has no progress
callback.

Not a load test of the output (the CLI runs `python -m engine.models.load_check` on it; gguf_tools
never imports the engine) and not a converter from Hugging Face checkpoints.
llama_cpp is imported inside `quantize()` only: `import gguf_tools` stays light.
References: vendored llama.cpp `src/llama-quant.cpp`, `include/llama.h`.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from .check import GGUFFormatError, check_gguf
from .inspect import file_type_name

# Target types offered, with a rough size in bits per weight for the free-space check
# (the mixes keep some tensors at higher precision; small models more so).
QTYPES = {
    "Q2_K": 3.4, "Q3_K_M": 4.0, "Q4_0": 4.6, "Q4_1": 5.1, "Q4_K_M": 5.0, "Q5_0": 5.6, "Q5_1": 6.1,
    "Q5_K_M": 5.8, "Q6_K": 6.6, "Q8_0": 8.5, "F16": 16.0, "BF16": 16.0, "F32": 32.0,
}
_UNQUANTIZED = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"}  # llama.cpp converts these freely
GGML_LOG_ERROR, GGML_LOG_CONT = 4, 5  # enum ggml_log_level of the pinned ggml
_TENSOR_LINE = re.compile(rb"^\[\s*(\d+)/\s*(\d+)\]")  # "[  12/ 272] blk.0.attn_q.weight - [...]"
_FALLBACK = re.compile(rb"WARNING: (\d+) of \d+ tensor\(s\) required fallback")

Progress = Callable[[int, int], None]


class QuantizeRefused(ValueError):
    """The request was refused before llama.cpp ran (bad type, existing output, requantize...)."""


class QuantizeFailed(RuntimeError):
    """llama.cpp ran and failed, or wrote a file that does not validate."""


@dataclass
class QuantizeReport:
    src: str
    dst: str
    qtype: str
    input_bytes: int
    output_bytes: int
    ratio: float  # output size / input size
    seconds: float
    n_tensors: int
    requantized: bool  # the input was already quantized (allow_requantize was needed)
    fallback_tensors: int  # tensors llama.cpp kept at another type (row length not a multiple of 256)
    tensor_types: dict = field(default_factory=dict)  # output: type -> tensor count

    def as_dict(self) -> dict:
        return asdict(self)


def partial_path(dst: str | os.PathLike) -> str:
    """Where the output is written until it is complete."""
    return os.fspath(dst) + ".partial"


def _quantized_as(summary) -> str | None:
    """The quantization of an already-quantized file ("Q4_1"), or None if it holds only float tensors."""
    quantized = [t for t in summary.tensors if t.type_name not in _UNQUANTIZED]
    if not quantized:
        return None
    by_bytes: dict[str, int] = {}
    for t in quantized:
        by_bytes[t.type_name] = by_bytes.get(t.type_name, 0) + t.nbytes
    return file_type_name(summary.metadata.get("general.file_type")) or max(by_bytes, key=by_bytes.get)


def _refuse_requantize(src: str, current: str, qtype: str) -> None:
    if qtype in ("F16", "BF16", "F32"):
        why = (f"converting it to {qtype} makes it bigger but cannot bring back the detail quantizing removed")
    else:
        why = "quantizing it again loses quality"
    raise QuantizeRefused(f"{os.path.basename(src)} is already {current}; {why}. HINT: start from the "
                          "F16/F32 file, or pass --allow-requantize to do it anyway.")


class _LogTap:
    """llama.cpp's log, watched for the duration of one quantize.

    Why a temporary callback and not a hook in the engine's: llama.cpp has one global log
    callback and the engine (engine/llama/model.py `init_backend`) sets its own on every model
    load. Installing ours for the run only, forwarding error lines (everything when
    verbose) to whichever callback was there, and putting that one back afterwards keeps
    the engine's error capture working and needs no cooperation from it. If someone
    replaced ours meanwhile (a model loaded during the run), theirs is left in place.
    """

    def __init__(self, llama_cpp, on_tensor: Callable[[int, int], None], verbose: bool):
        self.lib, self.on_tensor, self.verbose = llama_cpp, on_tensor, verbose
        self.errors: list[str] = []
        self.fallback = 0
        self.exc: BaseException | None = None  # raised inside the callback; re-raised after the call
        self._last_level = 0
        self._prev = llama_cpp.llama_log_callback()  # NULL = llama.cpp's default (stderr)
        self._prev_data = ctypes.c_void_p()
        self._cb = llama_cpp.llama_log_callback(self._on_log)  # kept alive by self while installed

    def _on_log(self, level: int, text: bytes, user_data) -> None:
        try:
            eff = self._last_level if level == GGML_LOG_CONT else level
            self._last_level = eff
            text = text or b""
            m = _TENSOR_LINE.match(text)
            if m:
                self.on_tensor(int(m.group(1)), int(m.group(2)))
            f = _FALLBACK.search(text)
            if f:
                self.fallback = int(f.group(1))
            if eff == GGML_LOG_ERROR and text.strip():
                self.errors.append(text.decode("utf-8", errors="replace").strip())
            if self.verbose or eff == GGML_LOG_ERROR:
                if self._prev:
                    self._prev(level, text, self._prev_data)
                else:
                    sys.stderr.write(text.decode("utf-8", errors="replace"))
        except BaseException as e:  # ctypes would print and swallow it (Ctrl+C included)
            if self.exc is None:
                self.exc = e

    def __enter__(self) -> _LogTap:
        self.lib.llama_log_get(ctypes.byref(self._prev), ctypes.byref(self._prev_data))
        self.lib.llama_log_set(self._cb, None)
        return self

    def __exit__(self, *exc) -> None:
        now = self.lib.llama_log_callback()
        data = ctypes.c_void_p()
        self.lib.llama_log_get(ctypes.byref(now), ctypes.byref(data))
        if ctypes.cast(now, ctypes.c_void_p).value == ctypes.cast(self._cb, ctypes.c_void_p).value:
            self.lib.llama_log_set(self._prev if self._prev else None, self._prev_data)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def quantize(src: str | os.PathLike, dst: str | os.PathLike, qtype: str, threads: int | None = None,
             progress: Progress | None = None, *, allow_requantize: bool = False, force: bool = False,
             verbose: bool = False) -> QuantizeReport:
    """Quantize `src` to `dst` as `qtype` (a key of QTYPES, e.g. "Q4_K_M").

    `progress(done, total)` is called as tensors are written (total = tensor count). It
    may raise to cancel, but llama.cpp cannot be stopped mid-way: the exception surfaces
    when it returns, and nothing is left at `dst`. Raises GGUFFormatError (broken input),
    QuantizeRefused (before llama.cpp ran) or QuantizeFailed.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    qtype = qtype.upper()
    if qtype not in QTYPES:
        raise QuantizeRefused(f"unknown type {qtype!r}. HINT: choose one of {', '.join(QTYPES)}.")
    if not os.path.isfile(src):
        raise QuantizeRefused(f"{src} does not exist. HINT: check the path of the input .gguf.")
    summary = check_gguf(src)  # llama.cpp trusts its input; we do not
    if os.path.exists(dst) and os.path.samefile(src, dst):
        raise QuantizeRefused(f"{dst} is the input file. HINT: write the output to another name.")
    if os.path.exists(dst) and not force:
        raise QuantizeRefused(f"{dst} already exists. HINT: pass --force to replace it, "
                              "or choose another name.")
    out_dir = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(out_dir):
        raise QuantizeRefused(f"folder {out_dir} does not exist. HINT: create it first.")
    current = _quantized_as(summary)
    if current and not allow_requantize:
        _refuse_requantize(src, current, qtype)
    n_weights = sum(_numel(t.shape) for t in summary.tensors)
    need, free = int(n_weights * QTYPES[qtype] / 8), shutil.disk_usage(out_dir).free
    if need > free:
        raise QuantizeRefused(f"{qtype} needs about {need / 1e9:.1f} GB in {out_dir}, and only {free / 1e9:.1f} GB "
                              "is free. HINT: free some space, or write the output to another disk.")

    import llama_cpp  # here, not at the top: importing gguf_tools must not load libllama

    total = len(summary.tensors)

    def on_tensor(index: int, _n: int) -> None:  # llama.cpp logs a tensor as it starts on it
        if progress:
            progress(index - 1, total)

    params = llama_cpp.llama_model_quantize_default_params()
    params.nthread = threads or 0  # 0: all hardware threads
    params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_ALL_F32" if qtype == "F32" else f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.allow_requantize = bool(current) and allow_requantize
    tmp = partial_path(dst)
    _remove(tmp)  # a killed earlier run's leftover
    t0 = time.perf_counter()
    try:
        with _LogTap(llama_cpp, on_tensor, verbose) as tap:
            rc = llama_cpp.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
        if tap.exc is not None:
            raise tap.exc
        if rc != 0:
            why = tap.errors[-1].split("failed to quantize:", 1)[-1].strip() if tap.errors else f"status {rc}"
            raise QuantizeFailed(f"llama.cpp could not quantize {src} to {qtype}: {why}. HINT: make sure the "
                                 "input is a complete model of an architecture this llama.cpp supports "
                                 "(`flashdesk inspect` shows it) and that the disk has room.")
        try:
            out = check_gguf(tmp)
        except GGUFFormatError as e:
            raise QuantizeFailed(f"llama.cpp wrote a broken file ({e}). HINT: check the disk for errors "
                                 "and free space, then run again.") from None
        if len(out.tensors) != total:
            raise QuantizeFailed(f"the output has {len(out.tensors)} tensors, the input {total}. "
                                 "HINT: report this with the input file's `flashdesk inspect --json`.")
        if os.path.exists(dst) and not force:  # appeared while we worked
            raise QuantizeRefused(f"{dst} appeared while quantizing. HINT: pass --force to replace it.")
        os.replace(tmp, dst)
    except BaseException:
        _remove(tmp)
        raise
    seconds = time.perf_counter() - t0
    if progress:
        progress(total, total)
    types: dict[str, int] = {}
    for t in out.tensors:
        types[t.type_name] = types.get(t.type_name, 0) + 1
    out_bytes = os.path.getsize(dst)
    return QuantizeReport(src=src, dst=dst, qtype=qtype, input_bytes=summary.file_size, output_bytes=out_bytes,
                          ratio=out_bytes / summary.file_size, seconds=seconds, n_tensors=total,
                          requantized=bool(current), fallback_tensors=tap.fallback,
                          tensor_types=dict(sorted(types.items(), key=lambda kv: -kv[1])))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
