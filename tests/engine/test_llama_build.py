"""Which llama.cpp build loads (engine/llama/build.py): the Windows package ships a CPU and a
CUDA build and picks at start, saying why. This machine has no NVIDIA driver, so the real
driver probe answers "none" here; the decisions for the other answers are checked with the
driver's answer given, and the switching itself with real copies of llama.cpp's libraries."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from engine.advisor.hardware import describe
from engine.llama.build import CudaDriver, LlamaBuild, choose, cuda_driver, cuda_runtime_major, resolve
from llama_package import package

def no_probe() -> CudaDriver:
    raise AssertionError("the driver must not be asked when there is no CUDA build")


def test_one_build_is_used_without_asking_the_driver(tmp_path):
    pkg = package(tmp_path, cuda=None)
    b = choose(pkg, {}, no_probe)
    assert (b.name, b.reason, b.folder, b.available) == ("cpu", "only_build", pkg / "lib", ("cpu",))


@pytest.mark.parametrize("driver, name, reason", [
    (CudaDriver(False), "cpu", "driver_missing"),
    (CudaDriver(True, (11, 8), 1), "cpu", "driver_too_old"),
    (CudaDriver(True, (12, 4), 0, "cuInit returned 100"), "cpu", "no_cuda_device"),
    (CudaDriver(True, (12, 0), 2), "cuda", "cuda"),
    (CudaDriver(True, (13, 0), 1), "cuda", "cuda"),
])
def test_the_driver_decides_between_cpu_and_cuda(tmp_path, driver, name, reason):
    pkg = package(tmp_path)
    b = choose(pkg, {}, lambda: driver)
    assert (b.name, b.reason, b.cuda_needed, b.driver) == (name, reason, 12, driver)
    assert b.folder == pkg / ("lib_cuda" if name == "cuda" else "lib")


def test_whoever_helps_can_choose(tmp_path):
    pkg = package(tmp_path)
    assert choose(pkg, {"FLASHDESK_LLAMA_BUILD": "cpu"}, no_probe).folder == pkg / "lib"
    assert choose(pkg, {"FLASHDESK_LLAMA_BUILD": "CUDA"}, no_probe).folder == pkg / "lib_cuda"
    custom = choose(pkg, {"LLAMA_CPP_LIB_PATH": str(tmp_path)}, no_probe)
    assert (custom.name, custom.reason, custom.folder) == ("custom", "user_choice", tmp_path)
    # a build this installation does not have: chosen as usual
    one = package(tmp_path / "one", cuda=None)
    assert choose(one, {"FLASHDESK_LLAMA_BUILD": "cuda"}, no_probe).reason == "only_build"


@pytest.mark.parametrize("name, major", [("cudart64_12.dll", 12), ("cudart64_110.dll", 11), ("cudart64_13.dll", 13),
                                         ("libcudart.so.12", 12), ("ggml.dll", None)])
def test_the_cuda_runtime_version_comes_from_its_file_name(tmp_path, name, major):
    (tmp_path / name).write_bytes(b"")
    assert cuda_runtime_major(tmp_path) == major


def test_the_real_driver_probe_answers():
    d = cuda_driver()  # no NVIDIA driver on the CI machine; on a GPU machine, its real answer
    assert d.found == (ctypes.util.find_library("cuda") is not None)
    assert d.found or (d.devices, d.cuda_version) == (0, None)


def test_a_cuda_build_that_will_not_load_falls_back_to_the_cpu_and_says_why(tmp_path):
    pkg = package(tmp_path, cuda="broken")
    b = resolve(pkg, {}, lambda: CudaDriver(True, (12, 4), 1))
    assert (b.name, b.reason, b.folder) == ("cpu", "cuda_load_failed", pkg / "lib")
    assert b.error and "libllama.so" in b.error
    s = describe(False, [], ["CPU"], 4, b)
    assert s["reason"] == "cuda_load_failed"
    assert s["summary"].startswith("The graphics-card (CUDA) build could not be loaded (")
    assert s["summary"].endswith("so flashdesk uses the CPU: answers will be slower. "
                                 "Running on the CPU with 4 threads.")


@pytest.mark.parametrize("build, words", [
    (LlamaBuild("cpu", Path("lib"), "driver_missing", ("cpu", "cuda"), 12, CudaDriver(False)),
     "No NVIDIA graphics driver found, so flashdesk uses the CPU: answers will be slower."),
    (LlamaBuild("cpu", Path("lib"), "driver_too_old", ("cpu", "cuda"), 12, CudaDriver(True, (11, 4), 1)),
     "The NVIDIA driver supports CUDA 11.4, but the graphics-card build needs CUDA 12 or newer, so flashdesk "
     "uses the CPU: answers will be slower. Updating the NVIDIA driver fixes this."),
    (LlamaBuild("cpu", Path("lib"), "no_cuda_device", ("cpu", "cuda"), 12, CudaDriver(True, (12, 4), 0)),
     "An NVIDIA driver is installed but reports no graphics card, so flashdesk uses the CPU: answers will be slower."),
])
def test_each_fallback_is_said_in_plain_words(build, words):
    s = describe(False, [{"name": "CPU", "description": "x", "type": "cpu", "backend": "CPU"}], ["CPU"], 1, build)
    assert s == {"backend": "cpu", "reason": build.reason, "summary": f"{words} Running on the CPU with 1 thread."}


def test_a_gpu_in_use_is_named():
    gpu = {"name": "CUDA0", "description": "NVIDIA GeForce RTX 4090", "type": "gpu", "backend": "CUDA"}
    build = LlamaBuild("cuda", Path("lib_cuda"), "cuda", ("cpu", "cuda"), 12, CudaDriver(True, (12, 8), 1))
    assert describe(True, [gpu], ["CUDA", "CPU"], 8, build)["summary"] == "NVIDIA GeForce RTX 4090 found, using CUDA."


def run_python(pkg: Path, code: str, **env) -> dict:
    """`code` in a fresh interpreter that finds `pkg` as its llama_cpp, printing one JSON line."""
    environ = {k: v for k, v in os.environ.items() if k not in ("LLAMA_CPP_LIB_PATH", "MTMD_CPP_LIB")}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(pkg.parent), str(ROOT)]))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


REPORT = """
import json, engine, llama_cpp
from engine.advisor.hardware import report
r = report(2)
print(json.dumps({"summary": r["summary"], "reason": r["reason"], "build": r["llama_build"], "devices": r["devices"],
                  "loaded": str(llama_cpp.llama_cpp._base_path), "pkg": llama_cpp.__file__}))
"""


def test_without_a_driver_the_package_with_a_cuda_build_runs_on_the_cpu_and_says_so(tmp_path):
    """The first run on a PC without the NVIDIA driver, end to end: the real probe, the real load."""
    if cuda_driver().found:
        pytest.skip("this machine has an NVIDIA driver")
    pkg = package(tmp_path)
    r = run_python(pkg, REPORT)
    assert r["pkg"].startswith(str(pkg))
    assert r["loaded"] == str(pkg / "lib") and r["build"]["folder"] == str(pkg / "lib")
    assert (r["reason"], r["build"]["reason"]) == ("driver_missing", "driver_missing")
    assert r["build"]["available"] == ["cpu", "cuda"]
    assert r["summary"].startswith("No NVIDIA graphics driver found, "
                                   "so flashdesk uses the CPU: answers will be slower.")
    assert r["devices"] and r["devices"][0]["type"] == "cpu"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_the_chosen_build_is_the_one_llama_cpp_and_the_device_list_load(tmp_path):
    """Switching to lib_cuda (chosen by hand here: no driver) moves every library load there."""
    pkg = package(tmp_path)
    r = run_python(pkg, REPORT, FLASHDESK_LLAMA_BUILD="cuda")
    assert r["loaded"] == str(pkg / "lib_cuda")
    assert (r["build"]["name"], r["build"]["reason"]) == ("cuda", "user_choice")
    maps = run_python(pkg, "import engine.llama.ggml as g, json; g.devices(); "
                           "print(json.dumps(open('/proc/self/maps').read()))", FLASHDESK_LLAMA_BUILD="cuda")
    loaded = {line.split()[-1] for line in maps.splitlines() if ".so" in line and "libggml" in line}
    assert loaded and all(p.startswith(str(pkg / "lib_cuda")) for p in loaded), loaded
