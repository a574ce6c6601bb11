"""ggml's device registry and llama.cpp's build facts, for the hardware report (engine/advisor/hardware.py).

llama-cpp-python 0.3.36 does not bind ggml's device registry, so the few ggml_backend_*
calls needed are declared here with ctypes on the libggml of the build this process loaded
(llama_cpp._ggml would always load llama_cpp/lib's, the CPU build's where there are two).
Not the wording: hardware.py turns these facts into sentences.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import re
from typing import Any

import llama_cpp

from .build import select_build

log = logging.getLogger("flashdesk.engine")

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


def _ggml():
    from llama_cpp._ctypes_extensions import load_shared_library

    lib = load_shared_library("ggml", select_build().folder)  # already loaded with libllama: the same copy

    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for fn, res, args in [("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                          ("ggml_backend_dev_name", cp, [vp]), ("ggml_backend_dev_description", cp, [vp]),
                          ("ggml_backend_dev_type", ctypes.c_int, [vp]),
                          ("ggml_backend_dev_backend_reg", vp, [vp]), ("ggml_backend_reg_name", cp, [vp]),
                          ("ggml_backend_reg_count", sz, []), ("ggml_backend_reg_get", vp, [sz]),
                          ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)])]:
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    return lib


def _text(b: bytes | None) -> str:
    return (b or b"").decode("utf-8", errors="replace")


@functools.cache
def devices() -> dict:
    """Devices and compiled-in backends; they do not change while the process runs."""
    out: dict[str, Any] = {"devices": [], "backends": [], "devices_error": None}
    try:
        lib = _ggml()
        out["backends"] = [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
                           for i in range(lib.ggml_backend_reg_count())]
        for i in range(lib.ggml_backend_dev_count()):
            d = lib.ggml_backend_dev_get(i)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            lib.ggml_backend_dev_memory(d, ctypes.byref(free), ctypes.byref(total))
            out["devices"].append({
                "name": _text(lib.ggml_backend_dev_name(d)),
                "description": _text(lib.ggml_backend_dev_description(d)),
                "type": DEVICE_TYPES.get(lib.ggml_backend_dev_type(d), "other"),
                "backend": _text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(d))),
                "memory_bytes": total.value or None,
            })
    except (AttributeError, OSError) as e:  # a build without these symbols: report what we know
        out["devices_error"] = f"cannot list devices: {e}"
        log.warning("%s", out["devices_error"])
    return out


def supports_gpu_offload() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


def system_info() -> str:
    """llama.cpp's `CPU : SSE3 = 1 | AVX2 = 1 | ...` line of the loaded build."""
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")


def uses_llamafile() -> bool:
    """llamafile's sgemm computes batches of 2+ rows with other kernels than single tokens, which
    breaks lossless speculation where no band keeps verify rows off it (flashdesk's patch does)."""
    return "LLAMAFILE = 1" in system_info()


def batch_invariant() -> str | None:
    """The backends' `BATCH_INVARIANT` feature (native/llama-patches): the band of batch widths every
    backend of the build computes alike ("16" on the CPU, "8" where a GPU backend is there too, the
    narrowest band), "off" when switched off at run time (GGML_BATCH_INVARIANT=0), or None for a
    build without the patch (a stock build)."""
    values = re.findall(r"BATCH_INVARIANT = (\w+)", system_info())
    if not values:
        return None
    bands = [int(v) for v in values if v.isdigit()]
    return str(min(bands)) if len(bands) == len(values) else "off"


def row_band() -> int | None:
    """The most rows a batch may hold and still compute each row as a single-token decode would,
    on a patched build with the mode on; None where the build promises no band."""
    value = batch_invariant()
    return int(value) if value and value.isdigit() else None


# What a build promises for lossless speculation, one case each (exactness_case)
LLAMAFILE, BANDED, SWITCHED_OFF, STOCK = "llamafile", "banded", "switched_off", "stock"


def exactness_case() -> tuple[str, int | None]:
    """The one case analysis of this build, with the band where it has one: flashdesk's patch with
    its band of rows (which it keeps off llamafile's sgemm), the patch switched off at run time
    (measured), llamafile's sgemm without the patch (never exact), or a stock build (measured). The
    load-time judge (engine/speculative/exactness.py) and the doctor's promise before any model
    loads (engine/advisor/hardware.py) both read it."""
    band = row_band()
    if band is not None:
        return BANDED, band
    if batch_invariant() == "off":
        return SWITCHED_OFF, None
    return (LLAMAFILE if uses_llamafile() else STOCK), None


def build_id() -> str:
    """Names the loaded llama.cpp build and its mode (version, backends, features, the batch-invariant
    band): what a measured verify-cost curve depends on besides the model and the thread count."""
    return hashlib.sha256(f"{llama_cpp_version()} {system_info()}".encode()).hexdigest()[:12]


def llama_cpp_version() -> str:
    return llama_cpp.__version__
