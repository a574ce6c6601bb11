"""bench/anchor.py and bench/llama_server.py without building or running llama-server (minutes of
compiling CI has no time for): the statistics and the table on given samples, the build's flags and
cache key, and the build's promise that only a finished build leaves a binary, with a stand-in for
cmake. No speed thresholds.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

from bench import anchor, llama_server


def test_percentile_is_linear_between_ranks():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert anchor.percentile(xs, 50) == 2.5
    assert anchor.percentile(xs, 0) == 1.0 and anchor.percentile(xs, 100) == 4.0
    assert anchor.percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    assert anchor.percentile([7.0], 95) == 7.0 and anchor.percentile([], 50) is None


def test_rotation_puts_every_side_first_once():
    sides = list(anchor.SIDES)
    firsts = [anchor.rotation(sides, t)[0] for t in range(3)]
    assert sorted(firsts) == sorted(sides)
    assert all(sorted(anchor.rotation(sides, t)) == sorted(sides) for t in range(5))


def _batch(tokens, seconds, texts, ttft=0.1):
    reqs = [{"id": i, "text": t, "ttft": ttft, "latency": seconds / 2} for i, t in enumerate(texts)]
    return {"tokens": tokens, "seconds": seconds, "prompt_tokens": 100, "requests": reqs}


def test_cell_summary_ratios_are_paired_by_round_and_texts_compared():
    batches = {"llama-server": [_batch(100, 1.0, ["a", "b"]), _batch(100, 2.0, ["a", "b"])],
               "off": [_batch(100, 0.5, ["a", "x"]), _batch(100, 1.0, ["a", "x"])],
               "auto": [_batch(300, 1.0, ["a", "x"]), _batch(100, 1.0, ["a", "x"])]}
    s = anchor.cell_summary(batches)
    assert s["llama-server"]["tok_per_s"] == 75.0  # median of 100 and 50
    assert s["off"]["ratio"] == 2.0  # twice as fast in both rounds, whatever the rounds' own speed
    assert s["auto"]["ratio"] == 2.5  # median of 3 and 2
    assert "ratio" not in s["llama-server"]
    assert s["same_text"]["off=auto"] == {"equal": 4, "of": 4}
    assert s["same_text"]["llama-server=off"] == {"equal": 2, "of": 4}
    assert s["off"]["ttft_p50"] == pytest.approx(0.1) and s["off"]["latency_p95"] == pytest.approx(0.5)


def test_markdown_has_a_row_per_cell_with_ratios():
    batches = {"llama-server": [_batch(100, 1.0, ["a"])], "off": [_batch(150, 1.0, ["a"])],
               "auto": [_batch(200, 1.0, ["b"])]}
    cells = [{"model": "smollm2", "load": "chat", "clients": 4, "summary": anchor.cell_summary(batches)}]
    table = anchor.markdown(cells, list(anchor.SIDES)).splitlines()
    assert table[0].startswith("| model | load | clients | llama-server tok/s | flashdesk off tok/s (ratio)")
    assert len(table) == 3
    assert "| smollm2 | chat | 4 | 100.0 | 150.0 (1.50x) | 200.0 (2.00x) |" in table[2]
    assert table[2].endswith("| 0/1 |")  # off and auto differ: the table says so


def test_flags_portable_native_and_amx():
    portable = llama_server.build_flags(native=False, machine="x86_64")
    assert "-DGGML_NATIVE=OFF" in portable and not any("amx" in f for f in portable)
    native = llama_server.build_flags(native=True, machine="x86_64")
    assert "-DGGML_NATIVE=OFF" not in native
    assert f"-DCMAKE_C_FLAGS={llama_server.NO_AMX}" in native and f"-DCMAKE_CXX_FLAGS={llama_server.NO_AMX}" in native
    assert not any("amx" in f for f in llama_server.build_flags(native=True, machine="aarch64"))
    for flags in (portable, native):  # stock: sgemm left at llama.cpp's default, nothing of flashdesk's
        assert not any("LLAMAFILE" in f or "BATCH_INVARIANT" in f for f in flags)
        assert "-DCMAKE_BUILD_TYPE=Release" in flags and "-DLLAMA_BUILD_SERVER=ON" in flags
    keys = {llama_server.cache_key("0.3.36", f) for f in (portable, native)}
    assert len(keys) == 2 and all(len(k) == 12 for k in keys)
    assert llama_server.cache_key("0.3.37", portable) not in keys


# cmake's stand-in: configure does nothing; the build writes half a binary, then finishes, fails
# or is killed as FAKE_CMAKE says, and counts its calls in FAKE_CMAKE_CALLS
FAKE_CMAKE = """
import os, signal, sys
with open(os.environ["FAKE_CMAKE_CALLS"], "a") as f:
    f.write(" ".join(sys.argv[1:3]) + "\\n")
if sys.argv[1] == "--build":
    b = os.path.join(sys.argv[2], "bin")
    os.makedirs(b, exist_ok=True)
    with open(os.path.join(b, "llama-server"), "w") as f:
        f.write("half")
        mode = os.environ["FAKE_CMAKE"]
        if mode == "kill":
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "fail":
            sys.exit(2)
        f.write(" and the rest")
"""


@pytest.fixture
def fake_build(tmp_path, monkeypatch):
    """A tiny sdist (vendor/llama.cpp and its submodule HEAD), a fresh wheelhouse, the stand-in cmake."""
    sdist = tmp_path / "llama_cpp_python-0.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, data in {"p/vendor/llama.cpp/CMakeLists.txt": b"# stand-in\n",
                           "p/.git/modules/vendor/llama.cpp/HEAD": b"0123abcd\n",
                           "p/llama_cpp/__init__.py": b""}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "cmake.py").write_text(FAKE_CMAKE)
    monkeypatch.setenv("FLASHDESK_LLAMA_SDIST", str(sdist))
    monkeypatch.setenv("FLASHDESK_WHEELHOUSE", str(tmp_path / "house"))
    monkeypatch.setenv("FAKE_CMAKE_CALLS", str(tmp_path / "calls"))
    return (sys.executable, str(tmp_path / "cmake.py")), tmp_path / "calls"


@pytest.mark.parametrize("mode", ["fail", "kill"])
def test_a_failed_or_killed_build_leaves_no_binary(fake_build, monkeypatch, mode):
    cmake, _ = fake_build
    monkeypatch.setenv("FAKE_CMAKE", mode)
    with pytest.raises(Exception):
        llama_server.ensure_llama_server(native=False, cmake=cmake)
    folder = llama_server.binary_path(llama_server.llama_source.pinned_version(),
                                      llama_server.build_flags(native=False)).parent
    assert not folder.exists() or not any(folder.iterdir())


def test_a_build_is_cached_and_says_what_it_is(fake_build, monkeypatch):
    cmake, calls = fake_build
    monkeypatch.setenv("FAKE_CMAKE", "ok")
    first = llama_server.ensure_llama_server(native=False, cmake=cmake)
    assert first.read_text() == "half and the rest"
    assert first.parent.name.startswith("llama-server-") and not list(first.parent.glob("*.part"))
    info = json.loads((first.parent / "build.json").read_text())
    assert info["llama_cpp_commit"] == "0123abcd" and info["native"] is False and "-DGGML_NATIVE=OFF" in info["flags"]
    n = len(calls.read_text().splitlines())
    assert n == 2  # configure, build
    assert llama_server.ensure_llama_server(native=False, cmake=cmake) == first
    assert len(calls.read_text().splitlines()) == n  # the second call built nothing
    other = llama_server.ensure_llama_server(native=True, cmake=cmake)
    assert other != first and Path(other).is_file()  # the other kind has its own folder
