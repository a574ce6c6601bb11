"""The GPU machine's setup for the GPU path (issue 21): where a call finds what the last one left,
the carried wheels installed, the native library built, the CUDA llama.cpp build started in the
background and waited for, and the target's carried parts put aside and joined.

What it is: the folders (.gpu carried here, .gpu-keep kept on the device between calls) and
the steps gpu_run.py's `prepare`, `stash` and `run` call before any phase. What it is not: the
phases and their time plan (gpu_run.py), the packing done on the developer's machine
(scripts/gpu_pack.py) or the parts format (parts.py). draft_training/GPU.md has the calls.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / ".gpu"  # what scripts/gpu_pack.py prepared here; carried to the device
KEEP = ROOT / ".gpu-keep"  # on the device: what one call leaves for the next (never carried)
MODEL_PARTS = "model"  # sub-folder of PACK (carried parts) and KEEP (parts put aside)
SITE, NATIVE, BUILD = KEEP / "site", KEEP / "native", KEEP / "build"
LLAMA_FLAGS = ("-DGGML_CUDA=on -DGGML_LLAMAFILE=OFF -DGGML_BATCH_INVARIANT=ON -DCMAKE_CUDA_ARCHITECTURES=90 "
               "-DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF "
               "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF")  # FA off: flashdesk runs without it
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # as scripts/setup.sh: the pinned AMX kernels crash


def use_device_paths() -> None:
    """Import llama_cpp, gguf and flashdesk_native from what `prepare` left in .gpu-keep."""
    for p in (str(ROOT), str(NATIVE), str(SITE)):
        if p not in sys.path:
            sys.path.insert(0, p)
    rest = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), str(NATIVE), str(ROOT)] + rest)  # spawned workers


def install_wheels() -> list[str]:
    """The carried wheels (gguf, diskcache: KINDS.md's image lacks them) into SITE."""
    wheels = sorted(glob.glob(str(PACK / "whl" / "*.whl")))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(SITE), *wheels], check=True)
    return [Path(w).name for w in wheels]


def build_native() -> Path:
    """libfdnative with CMake (seconds: plain C), laid out as the flashdesk_native package."""
    out = NATIVE / "flashdesk_native"
    out.mkdir(parents=True, exist_ok=True)
    b = KEEP / "native-build"
    subprocess.run(["cmake", "-S", str(ROOT / "native"), "-B", str(b), "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(b), "-j"], check=True, stdout=subprocess.DEVNULL)
    lib = next(b.glob("libfdnative*.so*"))
    shutil.copy2(lib, out / lib.name)
    shutil.copy2(ROOT / "native" / "python" / "__init__.py", out / "__init__.py")
    return out / lib.name


def llama_build_script(src: Path) -> str:
    """The shell commands that build the patched sdist at `src` for CUDA and lay llama_cpp out
    in SITE. CMake directly, not pip: the build folder stays for a rerun, and the log is plain."""
    c = BUILD / "cmake"
    flags = f"{LLAMA_FLAGS} -DCMAKE_C_FLAGS='{NO_AMX}' -DCMAKE_CXX_FLAGS='{NO_AMX}'"
    return (f"set -e; cmake -S {src} -B {c} -G Ninja -DCMAKE_BUILD_TYPE=Release -DSKBUILD_PLATLIB_DIR={SITE} "
            f"-DCMAKE_INSTALL_PREFIX={BUILD}/prefix "
            f"{flags}; cmake --build {c} -j {os.cpu_count() or 16}; cmake --install {c}; "
            f"cp -r {src}/llama_cpp/. {SITE}/llama_cpp/")


def start_llama_build() -> None:
    """Unpack the carried sdist and build it in a new process session (it outlives this call;
    BUILD/rc holds its exit status when done, BUILD/log its output)."""
    tars = sorted(PACK.glob("llama_cpp_python-*.tar.gz"))
    if not tars:
        raise SystemExit(f"no llama_cpp_python-*.tar.gz in {PACK}: run scripts/gpu_pack.py and carry .gpu")
    BUILD.mkdir(parents=True, exist_ok=True)
    (BUILD / "rc").unlink(missing_ok=True)
    shutil.rmtree(BUILD / "src", ignore_errors=True)
    subprocess.run(["tar", "xzf", str(tars[-1]), "-C", str(BUILD)], check=True)
    (BUILD / "src").mkdir()
    src = next(p for p in BUILD.glob("llama_cpp_python-*") if p.is_dir())
    src = src.rename(BUILD / "src" / src.name)
    script = f"( {llama_build_script(src)} ) > {BUILD}/log 2>&1; echo $? > {BUILD}/rc"
    subprocess.Popen(["bash", "-c", script], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build_state() -> str:
    """'done', 'failed (rc N)', 'running' or 'not started'."""
    rc = BUILD / "rc"
    if rc.exists():
        code = rc.read_text().strip()
        return "done" if code == "0" else f"failed (rc {code})"
    return "running" if (BUILD / "src").exists() else "not started"


def wait_build(seconds: float) -> str:
    end = time.monotonic() + seconds
    while build_state() == "running" and time.monotonic() < end:
        time.sleep(2)
    return build_state()


def stash_parts() -> list[str]:
    """Move the model parts (and manifest) this call carried to KEEP; returns all put aside."""
    keep = KEEP / MODEL_PARTS
    keep.mkdir(parents=True, exist_ok=True)
    for p in (PACK / MODEL_PARTS).glob("*") if (PACK / MODEL_PARTS).exists() else []:
        shutil.copy2(p, keep / p.name)
    return sorted(p.name for p in keep.iterdir())


def join_model() -> Path:
    from draft_training.parts import join

    mans = sorted((KEEP / MODEL_PARTS).glob("*.parts.json"))
    if not mans:
        raise SystemExit(f"no model parts manifest in {KEEP / MODEL_PARTS}: this machine is not the one the "
                         "earlier calls used (it went back). HINT: start again from call 1 (GPU.md).")
    dest = KEEP / json.loads(mans[0].read_text())["name"]
    if not dest.exists():
        join(mans[0], dest)
    return dest
