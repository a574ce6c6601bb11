"""`flashdesk app` (what a double-click starts) and `flashdesk doctor` (what a helper asks for)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import zipfile

import httpx
import openai
import pytest

from conftest import ROOT, linked_home, start_app
from server.desktop.doctor import format_report, report, write_bundle
from server.desktop.launcher import PREFERRED_PORT, bind_loopback


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])  # Ctrl+C; the desktop closing it
def test_app_serves_logs_and_stops_cleanly(tmp_path, store, stop):
    """The smoke test the installers' CI runs on the built bundle, here on the source tree."""
    home = linked_home(tmp_path / "home", store)
    proc, url, lines = start_app([sys.executable, "-m", "server.cli", "--home", str(home), "app", "--no-browser",
                                  "--port", "0"])
    try:
        assert "Running on the CPU" in lines[0]  # the hardware, in words, before anything else
        assert "<title>flashdesk</title>" in httpx.get(url).text  # the page the browser opens
        client = openai.OpenAI(base_url=f"{url}v1", api_key="unused", max_retries=0, timeout=120)
        answer = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=8, temperature=0)
        assert answer.choices[0].message.content
        proc.send_signal(stop)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "flashdesk stopped." in out and "Traceback" not in out
    finally:
        if proc.poll() is None:
            proc.kill()
    text = (home / "logs" / "flashdesk.log").read_text("utf-8")
    assert "hardware: backend=cpu reason=no_gpu_build" in text and "flashdesk is running at" in text


def test_the_app_takes_8080_when_free_and_another_port_when_not():
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", PREFERRED_PORT))  # hold 8080 (or find it held already)
        except OSError:
            pass
        sock = bind_loopback(None)
        try:
            assert sock.getsockname()[1] not in (PREFERRED_PORT, 0)
        finally:
            sock.close()


def test_doctor_reports_and_bundles_without_private_content(tmp_path, store, monkeypatch):
    home = linked_home(tmp_path / "home", store)
    (home / "logs").mkdir()
    (home / "logs" / "flashdesk.log").write_text("2026-11-30 INFO flashdesk.app: flashdesk is running\n")
    for name in ("conversations.sqlite3", "workorders.sqlite3"):
        (home / name).write_text("CUSTOMER ORDER 4411 for Sunrise Bakery")
    monkeypatch.setenv("FLASHDESK_API_KEY", "very-secret-key-123")
    monkeypatch.setenv("FLASHDESK_CTX", "4096")

    r = report(str(home))
    assert r["hardware"]["backend"] == "cpu" and r["home"] == str(home)
    assert [m["name"] for m in r["models"]] == ["smollm2"] and r["models"][0]["draft"]
    assert r["settings_env"] == {"FLASHDESK_API_KEY": "(set)", "FLASHDESK_CTX": "4096"}

    out = write_bundle(r, tmp_path / "support.zip")
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert names == {"report.json", "logs/flashdesk.log", "models/smollm2/model.json"}
        everything = b"".join(z.read(n) for n in names)
    assert b"Sunrise Bakery" not in everything and b"very-secret-key-123" not in everything
    assert json.loads(zipfile.ZipFile(out).read("report.json"))["models"][0]["name"] == "smollm2"


def test_doctor_command_prints_plain_words(tmp_path, store):
    home = linked_home(tmp_path / "home", store)
    r = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(home), "doctor", "--bundle",
                        str(tmp_path / "b.zip")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "FLASHDESK_API_KEY": ""})
    assert r.returncode == 0, r.stderr
    assert "hardware    Running on the CPU" in r.stdout and "model       smollm2" in r.stdout
    assert (tmp_path / "b.zip").is_file() and "no conversations" in r.stdout
    # no server runs on the port: the build's promise, which the engine measures at load
    assert ("speculation CPU build with flashdesk's batch-invariant patch: verify batches of up to 16 rows should "
            "compute like single tokens") in r.stdout


def test_doctor_on_a_fresh_machine_and_with_a_server_that_measured(tmp_path):
    r = report(str(tmp_path / "not" / "yet" / "home"))  # nothing of the home exists yet
    assert r["models"] == [] and r["disk_free_bytes"] > 0
    r["port"] |= {"in_use": True, "flashdesk": "ready", "speculation": {
        "enabled": False, "exact": False, "exact_why": "this graphics-card build of llama.cpp lacks flashdesk's "
                                                       "batch-invariant patch"}}
    assert ("speculation off, NOT exact: this graphics-card build of llama.cpp lacks flashdesk's batch-invariant "
            "patch (the running server)") in format_report(r)
