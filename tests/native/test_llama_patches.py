"""flashdesk's patches to llama.cpp (native/llama-patches/): they apply to the pinned sdist, touch
only ggml's backends and the option, the patched CUDA and Metal sources compile, and the CPU build
this suite runs on carries the CPU patch (tests/engine/speculative/test_cpu_batch_invariant.py shows
what it does).

No GPU runs here: bench/gpu_check.py measures what the patch does on one. The CUDA compile needs
this machine's nvcc and cuBLAS's headers, taken from NVIDIA's PyPI wheel (the headers only, cached
beside the wheelhouse); without nvcc that test is skipped and says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import llama_source  # noqa: E402

CUBLAS = "nvidia-cublas==13.0.2.14"  # the CUDA 13.0 release, as this machine's nvcc
ARCHS = ("89", "90")  # RTX 4090 (Ada), H100/H200 (Hopper)
# The CUDA files the patch changes, by what compiles them (mmf.cuh is compiled in its instances).
CUDA_UNITS = ("mmvq.cu", "mmvf.cu", "softmax.cu", "ggml-cuda.cu", "template-instances/mmf-instance-ncols_8.cu")
# a dense mul_mat_vec_q kernel's PTX entry: <type, width, has_fusion, small_k, halve_iters, pinned>, its threads
MMVQ_ENTRY = re.compile(r"\.entry _Z13mul_mat_vec_qIL9ggml_type\d+ELi(\d)ELb\dELb\dELb\dELb(\d)E\w*\(.*?\)\s*"
                        r"\.maxntid (\d+)", re.S)
METAL_UNITS = ("ggml-metal-common.cpp", "ggml-metal-ops.cpp", "ggml-metal-device.cpp", "ggml-metal.cpp")


def touched() -> list[str]:
    return [line[len("+++ b/"):] for p in llama_source.patches()
            for line in p.read_text("utf-8").splitlines() if line.startswith("+++ b/")]


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    """The pinned sdist, unpacked and patched: its vendor/llama.cpp."""
    return llama_source.unpack(tmp_path_factory.mktemp("llama-src")) / "vendor" / "llama.cpp"


def test_the_patch_applies_to_the_pinned_sdist(patched):
    text = (patched / "ggml/src/ggml-cuda/common.cuh").read_text("utf-8")
    assert "bool ggml_cuda_batch_invariant();" in text
    assert llama_source.pinned_version() in str(patched)


DFLASH_LOADER = "vendor/llama.cpp/src/models/dflash.cpp"  # 0003: the draft loader's bounds, a security fix


def test_it_touches_only_the_backends_the_option_and_the_draft_loader():
    """llama.cpp's model code, the tools and llama-cpp-python stay as they are: only ggml's CUDA,
    Metal and CPU backends and the CMake option change, and the DFlash loader gains its bounds (0003)."""
    files = touched()
    backends = tuple(f"vendor/llama.cpp/ggml/src/ggml-{b}/" for b in ("cuda", "metal", "cpu"))
    assert files and all(f.startswith(backends) or f in ("vendor/llama.cpp/ggml/CMakeLists.txt", DFLASH_LOADER)
                         for f in files), files
    option = [line for p in llama_source.patches() for line in p.read_text("utf-8").splitlines()
              if line.startswith("+option(")]
    assert len(option) == 1 and option[0].rstrip().endswith(" OFF)"), option  # one option, off by default


def test_the_cpu_build_carries_the_cpu_patch():
    from engine.llama import ggml

    assert "BATCH_INVARIANT = 16" in ggml.system_info()
    assert ggml.row_band() == 16


def test_the_build_refuses_a_hostile_draft_itself(tmp_path):
    """The disclosed shape (tests/hostile_drafts.py: a million target layers), loaded by llama.cpp with
    no check of ours before it, as a file placed by hand would be: the loader's bound (0003) refuses it
    with its reason. In a child: without the bound the load would go on toward a heap overflow."""
    from conftest import DRAFT
    from hostile_drafts import write_hostile

    evil = write_hostile(DRAFT, tmp_path / "evil.gguf", "overlong_taps")
    code = ("import sys, llama_cpp\n"
            "m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), llama_cpp.llama_model_default_params())\n"
            "print('loaded' if m else 'refused')\n")
    r = subprocess.run([sys.executable, "-c", code, str(evil)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "refused", (r.returncode, r.stdout, r.stderr[-2000:])
    assert "1048576 target layers; a draft taps 1 to 64" in r.stderr, r.stderr[-2000:]


def cublas_headers() -> Path:
    """cuBLAS's include folder from NVIDIA's wheel (this machine's CUDA has no cuBLAS)."""
    house = Path(os.environ.get("FLASHDESK_WHEELHOUSE") or Path.home() / ".cache" / "flashdesk-wheels")
    inc = house / ("headers-" + CUBLAS.replace("==", "-"))
    if not (inc / "cublas_v2.h").exists():
        dl = house / "headers-download"
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
                        "-d", str(dl), CUBLAS], check=True)
        wheel = next(dl.glob("nvidia_cublas-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if "/include/" in name and name.endswith(".h"):
                    inc.mkdir(parents=True, exist_ok=True)
                    (inc / Path(name).name).write_bytes(z.read(name))
        shutil.rmtree(dl)
    return inc


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine: the CUDA compile check needs it")
def test_the_patched_cuda_files_compile_for_ada_and_hopper(patched, tmp_path):
    inc = cublas_headers()
    arch = [a for n in ARCHS for a in ("-gencode", f"arch=compute_{n},code=sm_{n}")]

    def compile_unit(unit: str) -> tuple[str, int, str]:
        cmd = ["nvcc", "-std=c++17", "-O3", "-use_fast_math", "-extended-lambda", "-DGGML_BATCH_INVARIANT",
               "-DGGML_CUDA_USE_GRAPHS", "-DGGML_SCHED_MAX_COPIES=4", f"-I{inc}", "-Iggml/include", "-Iggml/src",
               "-Iggml/src/ggml-cuda", *arch, "-c", f"ggml/src/ggml-cuda/{unit}",
               "-o", str(tmp_path / (Path(unit).name + ".o"))]
        if unit == "mmvq.cu":  # its PTX, kept: the warp counts are read from it below
            keep = tmp_path / "mmvq-keep"
            keep.mkdir()
            cmd += ["--keep", "--keep-dir", str(keep)]
        r = subprocess.run(cmd, cwd=patched, capture_output=True, text=True)
        return unit, r.returncode, r.stderr[-3000:]

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failed = [(u, err) for u, rc, err in pool.map(compile_unit, CUDA_UNITS) if rc]
    assert not failed, failed
    # A1 as compiled: every pinned MMVQ kernel (widths 2..8) launches with width 1's threads (4 warps,
    # 128), while the stock ones (kept for GGML_BATCH_INVARIANT=0) drop to 2 warps from width 5
    ptx = [f.read_text("utf-8") for f in (tmp_path / "mmvq-keep").glob("*.ptx")]
    assert len(ptx) == len(ARCHS), sorted(p.name for p in (tmp_path / "mmvq-keep").iterdir())
    for text in ptx:
        threads: dict[tuple[int, bool], set[int]] = {}
        for width, pinned, n in MMVQ_ENTRY.findall(text):
            threads.setdefault((int(width), pinned == "1"), set()).add(int(n))
        assert threads[(1, False)] == {128}, threads
        assert all(threads[(w, True)] == {128} for w in range(2, 9)), threads
        assert threads[(5, False)] == {64}, threads  # the control: stock really differs there


# The CPU files the patches change, and the ARM targets flashdesk's users have (Apple Silicon is
# armv8.5-a with dotprod and i8mm; older Linux ARM boards have NEON alone).
CPU_UNITS = ("ggml-cpu.c", "ggml-cpu.cpp", "repack.cpp", "batch-invariant.cpp")
ARM_TARGETS = ("armv8-a", "armv8.2-a+dotprod", "armv8.6-a+dotprod+i8mm")


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="no ARM cross-compiler (scripts/system-packages.sh test installs g++-aarch64-linux-gnu)")
@pytest.mark.parametrize("march", ARM_TARGETS)
def test_the_patched_cpu_files_compile_for_arm(patched, tmp_path, march):
    """No ARM machine here: the patched ggml-cpu files, with the option on, compiled for NEON (the
    F16 kernel takes ggml's NEON macros; the others fall back to the exact single-column loop)."""
    for unit in CPU_UNITS:
        cc = "aarch64-linux-gnu-gcc" if unit.endswith(".c") else "aarch64-linux-gnu-g++"
        std = "-std=gnu11" if unit.endswith(".c") else "-std=gnu++17"
        r = subprocess.run([cc, std, "-O2", f"-march={march}", "-DGGML_BATCH_INVARIANT", "-DGGML_USE_CPU_REPACK",
                            "-D_GNU_SOURCE", "-Iggml/include", "-Iggml/src", "-Iggml/src/ggml-cpu", "-c",
                            f"ggml/src/ggml-cpu/{unit}", "-o", str(tmp_path / (unit + ".o"))],
                           cwd=patched, capture_output=True, text=True)
        assert r.returncode == 0, (unit, march, r.stderr[-3000:])


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")
def test_the_patched_metal_cpp_files_pass_a_syntax_check(patched):
    """Not a Metal build (that needs a Mac): the C++ the patch changes, with the option on.
    `-include memory`: Apple's libc++ brings <memory> in through other headers, libstdc++ does not."""
    for unit in METAL_UNITS:
        r = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-include", "memory", "-DGGML_BATCH_INVARIANT",
                            "-Iggml/include", "-Iggml/src", "-Iggml/src/ggml-metal", f"ggml/src/ggml-metal/{unit}"],
                           cwd=patched, capture_output=True, text=True)
        assert r.returncode == 0, (unit, r.stderr[-3000:])
