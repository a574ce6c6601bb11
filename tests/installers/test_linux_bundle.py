"""The Linux app folder builds from this checkout and passes the smoke test (issue 8): the
PyInstaller spec, the build script's steps and the frozen program's first run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, test_home as cache_home  # renamed: pytest would collect a test_* name


@pytest.mark.timeout(1200)
@pytest.mark.skipif(sys.platform != "linux", reason="the Linux build script")
def test_the_bundle_builds_and_passes_the_smoke_test(tmp_path, store):
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
    probe = subprocess.run([str(app / "flashdesk"), "-m", "engine.probe", store.get("smollm2").path],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and '"architecture": "llama"' in probe.stdout, probe.stderr
    doctor = subprocess.run([str(app / "flashdesk"), "--home", str(tmp_path / "h"), "doctor"],
                            capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 0 and "Running on the CPU" in doctor.stdout, doctor.stderr
