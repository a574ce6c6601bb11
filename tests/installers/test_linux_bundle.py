"""The Linux app folder builds from this checkout and passes the smoke test (issue 8): the
PyInstaller spec, the build script's steps and the frozen program's first run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, start_app, test_home as cache_home  # renamed: pytest would collect a test_* name
from engine.llama.build import cuda_driver


@pytest.mark.timeout(1200)
@pytest.mark.skipif(sys.platform != "linux", reason="the Linux build script")
def test_the_bundle_builds_and_passes_the_smoke_test(tmp_path, store, display):
    env = {**os.environ, "FLASHDESK_DIST": str(tmp_path / "dist"), "FLASHDESK_BUILD": str(tmp_path / "build"),
           "FLASHDESK_BUILD_CACHE": str(cache_home())}  # the model the tests already fetched
    r = subprocess.run(["bash", "installers/linux/build.sh", "bundle", "package", "smoke"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1100)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "smoke test passed" in r.stdout
    app = tmp_path / "dist" / "flashdesk"
    assert (app / "_internal" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()  # installs offline
    assert not list(app.rglob("libtorch*")), "PyTorch must not be bundled"
    assert list((tmp_path / "dist").glob("flashdesk-*-linux-*.tar.gz"))
    # The frozen program has no `python -m`: the child-process model check goes through it.
    probe = subprocess.run([str(app / "flashdesk"), "-m", "engine.models.load_check", store.get("smollm2").path],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and '"architecture": "llama"' in probe.stdout, probe.stderr
    doctor = subprocess.run([str(app / "flashdesk"), "--home", str(tmp_path / "h"), "doctor"],
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0 and "Running on the CPU" in doctor.stdout, doctor.stderr

    # The double-click path: the frozen Tk shows the app's window (its Tcl/Tk files were bundled),
    # the first run installs the bundled model, and someone starts a conversation.
    home = tmp_path / "h"
    proc, url, lines = start(app / "flashdesk", home, DISPLAY=display)
    try:
        assert "quit from its window" in lines[-1] and any("First run" in line for line in lines), lines
        conv = httpx.post(f"{url}v1/conversations", json={"title": "Order 4411", "settings": {"temperature": 0.2}})
        assert conv.status_code == 201, conv.text
    finally:
        stop(proc, lines)

    # An upgrade: the next version unpacked from its .tar.gz elsewhere, on the same home. The model,
    # the history and its settings are there; nothing is installed again.
    (tarball,) = (tmp_path / "dist").glob("flashdesk-*-linux-*.tar.gz")
    with tarfile.open(tarball) as t:
        t.extractall(tmp_path / "v2", filter="tar")
    proc, url, lines = start(tmp_path / "v2" / "flashdesk" / "flashdesk", home)
    try:
        assert not any("First run" in line for line in lines), lines
        convs = httpx.get(f"{url}v1/conversations").json()["data"]
        assert [(c["title"], c["settings"]) for c in convs] == [("Order 4411", {"temperature": 0.2})]
        assert [m["name"] for m in httpx.get(f"{url}v1/store/models").json()["data"]] == ["smollm2"]
    finally:
        stop(proc, lines)

    if cuda_driver().found:
        return  # the rest is the first run on a computer without the NVIDIA driver
    # The Windows layout (a CUDA build beside the CPU one) on a computer without the NVIDIA driver:
    # the CPU build runs, and the first words say why (a copy of the CPU build stands in for CUDA).
    internal = app / "_internal" / "llama_cpp"
    shutil.copytree(internal / "lib", internal / "lib_cuda", symlinks=True)
    (internal / "lib_cuda" / "libcudart.so.12").write_bytes(b"")
    doctor = subprocess.run([str(app / "flashdesk"), "--home", str(tmp_path / "h"), "doctor"],
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stderr
    want = "hardware    No NVIDIA graphics driver found, so flashdesk uses the CPU: answers will be slower."
    assert want in doctor.stdout
    assert f"cpu build from {internal / 'lib'}  (builds here: cpu, cuda; reason: driver_missing" in doctor.stdout


def start(program: Path, home: Path, **env) -> tuple[subprocess.Popen, str, list[str]]:
    """The built program as a double-click starts it (plus --no-browser), once its model is ready."""
    return start_app([str(program), "--home", str(home), "--no-browser", "--port", "0"], env)


def stop(proc: subprocess.Popen, lines: list[str]) -> None:
    proc.send_signal(signal.SIGTERM)  # what the desktop sends at logout; the window's Quit does the same
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "flashdesk stopped." in out, "".join(lines) + out
