"""Which build of llama.cpp this process loads, chosen before anything imports llama_cpp.

The Windows package carries two builds side by side (installers/windows/build.ps1):
  llama_cpp/lib/       the CPU build, always there
  llama_cpp/lib_cuda/  a CUDA build, with the CUDA runtime DLLs it links
The CUDA build cannot even load without the NVIDIA driver (ggml-cuda links it), and with a
driver older than its CUDA runtime it loads but finds no GPU. So the driver is asked first,
and the answer goes, as a reason code, to the hardware report (engine/advisor/hardware.py), which
puts it in plain words in the log and on the models page: never a silent CPU fallback.

llama-cpp-python 0.3.36 reads LLAMA_CPP_LIB_PATH once, when llama_cpp.llama_cpp is
imported, as the folder to load libllama from (on Windows also putting it on the DLL search
path, so ggml*.dll and cudart resolve from there too), and mtmd_cpp reads MTMD_CPP_LIB.
`select_build()` sets both, and engine/__init__.py calls it, so every process that uses the engine
(server, tools, probe children, which inherit the variables) loads the same build.

Reason codes (`LlamaBuild.reason`):
  only_build       one build shipped (pip install, the Linux and macOS packages)
  cuda             the NVIDIA driver is there and sees a GPU: the CUDA build
  driver_missing   no NVIDIA driver: the CPU build
  driver_too_old   the driver supports an older CUDA than the CUDA build needs: the CPU build
  no_cuda_device   a driver, but it reports no GPU (or cannot start): the CPU build
  cuda_load_failed the CUDA build would not load (a DLL missing or broken): the CPU build
  user_choice      FLASHDESK_LLAMA_BUILD=cpu|cuda, or LLAMA_CPP_LIB_PATH, set by whoever helps
  already_loaded   llama_cpp was imported before the choice: whatever it loaded
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Mapping, MutableMapping

log = logging.getLogger("flashdesk.engine")

CPU_FOLDER, CUDA_FOLDER = "lib", "lib_cuda"
FALLBACK_REASONS = ("driver_missing", "driver_too_old", "no_cuda_device", "cuda_load_failed")


@dataclass(frozen=True)
class CudaDriver:
    found: bool
    cuda_version: tuple[int, int] | None = None  # the newest CUDA the driver runs, e.g. (12, 4)
    devices: int = 0
    error: str | None = None


@dataclass(frozen=True)
class LlamaBuild:
    name: str                  # "cpu", "cuda", or "custom" (a folder given by LLAMA_CPP_LIB_PATH)
    folder: Path
    reason: str
    available: tuple[str, ...]  # the builds this installation ships
    cuda_needed: int | None = None  # the CUDA major version the CUDA build's runtime needs
    driver: CudaDriver | None = None
    error: str | None = None   # why the CUDA build did not load (cuda_load_failed)

    def facts(self) -> dict:
        """JSON-ready, for GET /v1/system and the doctor's report."""
        out = asdict(self)
        out["folder"] = str(self.folder)
        if self.driver is not None and self.driver.cuda_version:
            out["driver"]["cuda_version"] = "%d.%d" % self.driver.cuda_version
        return out


def cuda_driver() -> CudaDriver:
    """Ask the NVIDIA driver (nvcuda.dll, libcuda.so.1) itself: is it there, which CUDA it
    supports, how many GPUs it sees. Loading it is harmless: the CUDA build would load it anyway."""
    name = {"win32": "nvcuda.dll", "linux": "libcuda.so.1"}.get(sys.platform)
    if name is None:
        return CudaDriver(False)  # macOS: no CUDA since 10.13
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return CudaDriver(False)
    try:
        v, n = ctypes.c_int(0), ctypes.c_int(0)
        version = None
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            version = (v.value // 1000, v.value % 1000 // 10)  # 12040 -> 12.4
        rc = lib.cuInit(0)
        if rc != 0:  # e.g. 100: no device, 35: driver older than this libcuda, 999: unknown
            return CudaDriver(True, version, 0, f"cuInit returned {rc}")
        rc = lib.cuDeviceGetCount(ctypes.byref(n))
        return CudaDriver(True, version, n.value if rc == 0 else 0,
                          None if rc == 0 else f"cuDeviceGetCount returned {rc}")
    except AttributeError as e:  # not a CUDA driver after all
        return CudaDriver(False, error=str(e))


def cuda_runtime_major(folder: Path) -> int | None:
    """The CUDA major version the CUDA build's runtime library is for: cudart64_12.dll -> 12,
    cudart64_110.dll (CUDA 11.0) -> 11, libcudart.so.12 -> 12; None when none is bundled."""
    for f in sorted(folder.glob("*cudart*")):
        m = re.search(r"cudart(?:64_|\.so\.)(\d+)", f.name)
        if m:
            digits = m.group(1)
            return int(digits[:2] if len(digits) >= 3 else digits)
    return None


def builds(package: Path) -> tuple[str, ...]:
    """The builds the llama_cpp package folder `package` ships."""
    return ("cpu", "cuda") if (package / CUDA_FOLDER).is_dir() else ("cpu",)


def choose(package: Path, environ: Mapping[str, str], driver: Callable[[], CudaDriver] = cuda_driver) -> LlamaBuild:
    """The build to load from the llama_cpp package folder `package`. `driver` is only asked
    when there is a CUDA build to choose."""
    cpu, cuda = package / CPU_FOLDER, package / CUDA_FOLDER
    available = builds(package)
    if environ.get("LLAMA_CPP_LIB_PATH"):
        return LlamaBuild("custom", Path(environ["LLAMA_CPP_LIB_PATH"]), "user_choice", available)
    wanted = environ.get("FLASHDESK_LLAMA_BUILD", "").strip().lower()
    if wanted in available:
        return LlamaBuild(wanted, cuda if wanted == "cuda" else cpu, "user_choice", available)
    if wanted:
        log.warning("FLASHDESK_LLAMA_BUILD=%s is not one of this installation's builds %s: choosing as usual",
                    wanted, list(available))
    if "cuda" not in available:
        return LlamaBuild("cpu", cpu, "only_build", available)
    needed = cuda_runtime_major(cuda)
    d = driver()
    if not d.found:
        reason = "driver_missing"
    elif needed and d.cuda_version and d.cuda_version[0] < needed:
        reason = "driver_too_old"
    elif d.devices < 1:
        reason = "no_cuda_device"
    else:
        return LlamaBuild("cuda", cuda, "cuda", available, needed, d)
    return LlamaBuild("cpu", cpu, reason, available, needed, d)


def preload(folder: Path) -> str | None:
    """Load `folder`'s libllama with its dependencies from that same folder, before
    llama-cpp-python does (it then gets the loaded library). One load call, so a failure
    leaves nothing half loaded. Returns why it failed, or None.

    Windows: a DLL's imports are otherwise searched in the program's folder, the PyInstaller
    folder and PATH before the CUDA folder, so a stray ggml.dll elsewhere could be bound
    instead; LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR searches the DLL's own folder first, and once
    loaded, a module name binds to this copy for every later import. Linux and macOS: the
    libraries' $ORIGIN / @loader_path run paths already point at their own folder."""
    try:
        if sys.platform == "win32":
            os.add_dll_directory(str(folder))
            if getattr(sys, "_MEIPASS", None):  # the MSVC runtime PyInstaller put beside python311.dll
                os.add_dll_directory(sys._MEIPASS)
            names = (folder / "llama.dll", folder / "libllama.dll")
            path = next((p for p in names if p.is_file()), names[0])
            ctypes.CDLL(str(path), winmode=0x1100)  # LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR | _DEFAULT_DIRS
        else:
            suffix = ".dylib" if sys.platform == "darwin" else ".so"
            ctypes.CDLL(str(folder / f"libllama{suffix}"), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        return str(e)
    return None


def resolve(package: Path, environ: Mapping[str, str], driver: Callable[[], CudaDriver] = cuda_driver) -> LlamaBuild:
    """`choose`, then make sure a CUDA choice loads; when it does not, the CPU build, saying why."""
    build = choose(package, environ, driver)
    if build.name == "cuda":
        error = preload(build.folder)
        if error is not None:
            log.warning("the CUDA build of llama.cpp did not load, using the CPU build: %s", error)
            return replace(build, name="cpu", folder=package / CPU_FOLDER, reason="cuda_load_failed", error=error)
    elif sys.platform == "win32":
        preload(build.folder)  # only for the search order; a failure is llama-cpp-python's to report
    return build


def package_folder() -> Path | None:
    """llama_cpp's folder, found without importing it (importing it loads the library)."""
    spec = importlib.util.find_spec("llama_cpp")
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


_chosen: LlamaBuild | None = None


def select_build(environ: MutableMapping[str, str] = os.environ) -> LlamaBuild:
    """Choose once per process and point llama-cpp-python at the choice."""
    global _chosen
    if _chosen is not None:
        return _chosen
    package = package_folder()
    if package is None:  # no llama_cpp at all: importing the engine will say so
        _chosen = LlamaBuild("cpu", Path(CPU_FOLDER), "only_build", ("cpu",))
        return _chosen
    loaded = sys.modules.get("llama_cpp.llama_cpp")
    if loaded is not None:  # too late to choose: report what it loaded
        folder = Path(getattr(loaded, "_base_path", package / CPU_FOLDER))
        name = {package / CPU_FOLDER: "cpu", package / CUDA_FOLDER: "cuda"}.get(folder, "custom")
        _chosen = LlamaBuild(name, folder, "already_loaded", builds(package))
        return _chosen
    _chosen = resolve(package, environ)
    if _chosen.folder != package / CPU_FOLDER:
        environ["LLAMA_CPP_LIB_PATH"] = str(_chosen.folder)
        environ.setdefault("MTMD_CPP_LIB", str(_chosen.folder))
    if _chosen.reason != "only_build":
        log.info("llama.cpp build: %s from %s (%s)", _chosen.name, _chosen.folder, _chosen.reason)
    return _chosen
