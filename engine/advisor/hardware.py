"""The hardware llama.cpp runs on, as facts the server (GET /v1/system) puts into plain words.

People ask "is it using my graphics card?". The answer depends on how llama.cpp was
built (with CUDA, Metal, Vulkan... or CPU only) and on whether that backend found a
device, so `describe` says both, plus a `reason` code a UI can translate:
  gpu            a GPU backend found a device; the model's layers are offloaded to it
  no_gpu_build   this llama.cpp was built for the CPU only
  gpu_not_found  built with GPU support, but the backend found no device (driver missing?)
or, where the package ships a CUDA build beside the CPU one and the CPU one was chosen
(engine/llama/build.py), why: driver_missing, driver_too_old, no_cuda_device, cuda_load_failed.
The facts themselves come from the llama layer (engine/llama/ggml.py: ggml's device registry,
llama.cpp's system info); this module only words them.
"""

from __future__ import annotations

import ctypes
import os
import sys

from . import tiers
from ..llama import ggml
from ..llama.build import FALLBACK_REASONS, LlamaBuild, select_build

GPU_TYPES = ("gpu", "igpu")
BACKEND_NAMES = {"cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan", "rocm": "ROCm", "hip": "ROCm",
                 "sycl": "SYCL", "opencl": "OpenCL", "cann": "CANN", "musa": "MUSA", "blas": "BLAS"}


def memory_bytes() -> int | None:
    try:
        if sys.platform == "win32":
            class MemoryStatus(ctypes.Structure):
                _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                            ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                            ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                            ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                            ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]
            st = MemoryStatus(dwLength=ctypes.sizeof(MemoryStatus))
            return int(st.ullTotalPhys) if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st)) else None
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def cpu_features(system_info: str) -> list[str]:
    """`CPU : SSE3 = 1 | AVX2 = 1 | CUDA : ARCHS = 890 | ...` -> ["SSE3", "AVX2"]: the CPU section only."""
    feats, section = [], ""
    for part in system_info.split("|"):
        if ":" in part:
            section, part = part.split(":", 1)
        key, _, value = part.partition("=")
        if section.strip() == "CPU" and value.strip() == "1":
            feats.append(key.strip())
    return feats


def describe(gpu_offload: bool, devices: list[dict], backends: list[str], threads: int,
             build: LlamaBuild | None = None) -> dict:
    """backend, reason and a one- or two-sentence summary from the structured facts."""
    gpus = [d for d in devices if d["type"] in GPU_TYPES]
    gpu_backends = [b for b in backends if b.lower() not in ("cpu", "blas", "rpc")]
    if gpu_offload and gpus:
        g = gpus[0]
        backend = g["backend"].lower()
        name = g["description"] or g["name"]
        return {"backend": backend, "reason": "gpu",
                "summary": f"{name} found, using {BACKEND_NAMES.get(backend, g['backend'])}."}
    cpu = f"Running on the CPU with {threads} thread{'s' if threads != 1 else ''}."
    if build is not None and build.reason in FALLBACK_REASONS:
        return {"backend": "cpu", "reason": build.reason, "summary": f"{_why_cpu(build)} {cpu}"}
    if gpu_offload:
        built = " and ".join(BACKEND_NAMES.get(b.lower(), b) for b in gpu_backends) or "GPU"
        return {"backend": "cpu", "reason": "gpu_not_found",
                "summary": f"{cpu} This build of llama.cpp supports {built}, but no graphics card was found "
                           "(is its driver installed?)."}
    return {"backend": "cpu", "reason": "no_gpu_build",
            "summary": f"{cpu} This build of llama.cpp has no GPU support."}


def _why_cpu(build: LlamaBuild) -> str:
    """Why the CPU build was loaded although this installation has a CUDA build."""
    slower = "so flashdesk uses the CPU: answers will be slower."
    d = build.driver
    if build.reason == "driver_missing":
        return f"No NVIDIA graphics driver found, {slower}"
    if build.reason == "driver_too_old" and d is not None and d.cuda_version:
        return (f"The NVIDIA driver supports CUDA {d.cuda_version[0]}.{d.cuda_version[1]}, but the graphics-card "
                f"build needs CUDA {build.cuda_needed} or newer, {slower} Updating the NVIDIA driver fixes this.")
    if build.reason == "no_cuda_device":
        return f"An NVIDIA driver is installed but reports no graphics card, {slower}"
    return f"The graphics-card (CUDA) build could not be loaded ({build.error}), {slower}"


def exactness_promise(gpu_offload: bool) -> str:
    """What this build promises about lossless speculation before any model loads; the engine then
    measures it at load (engine/speculative/exactness.py), and that measurement decides."""
    case, band = ggml.exactness_case()
    if case == ggml.LLAMAFILE:
        return ("speculation would not be exact: this build uses llamafile's sgemm. "
                "HINT: reinstall with scripts/setup.sh")
    kind = "graphics-card build" if gpu_offload else "CPU build"
    if case == ggml.BANDED:
        return (f"{kind} with flashdesk's batch-invariant patch: verify batches of up to {band} rows "
                "should compute like single tokens; the engine measures it when a model loads")
    if case == ggml.SWITCHED_OFF:
        return (f"{kind} with flashdesk's batch-invariant patch, switched off (GGML_BATCH_INVARIANT=0): "
                "speculation stays off where the rows differ (measured when a model loads)")
    return (f"{kind} without flashdesk's batch-invariant patch: speculation stays off where verify rows differ "
            "from single tokens (measured when a model loads). HINT: reinstall with scripts/setup.sh")


def machine() -> tiers.Machine:
    """The memory catalog models compete for on this computer (engine/advisor/tiers.py)."""
    return tiers.machine(ggml.supports_gpu_offload(), ggml.devices()["devices"], memory_bytes())


def backend() -> str:
    """"cuda", "metal" or "cpu": which column of a catalog draft's n_draft applies here (graphics cards
    of other backends, Vulkan or ROCm, take the CUDA column: their verify costs are alike)."""
    here = machine()
    if here.kind == "cpu":
        return "cpu"
    return "metal" if here.kind == "unified" else "cuda"


def report(threads: int) -> dict:
    """Everything GET /v1/system says about the machine, for `threads` CPU threads."""
    hw = ggml.devices()
    build = select_build()
    gpu_offload = ggml.supports_gpu_offload()
    info = ggml.system_info()
    return {
        **describe(gpu_offload, hw["devices"], hw["backends"], threads, build),
        "llama_build": build.facts(),
        "gpu_offload": gpu_offload,
        "exactness": exactness_promise(gpu_offload),
        "devices": hw["devices"],
        "devices_error": hw["devices_error"],
        "backends": hw["backends"],
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "cpu_features": cpu_features(info),
        "memory_bytes": memory_bytes(),
        "llama_cpp_version": ggml.llama_cpp_version(),
    }
