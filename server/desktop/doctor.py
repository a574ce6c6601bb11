"""`flashdesk doctor`: what whoever helps a user needs to know, and a support bundle to send them.

The report: versions, the hardware llama.cpp would use and why, the model store, whether
the usual port is taken (and by a flashdesk that answers), the log folder. The bundle is a
zip of that report, the logs and the models' manifests. It never holds conversation or
work-order content: the chat history and the audit log (SQLite files under the home) stay
out, and so does any API key (only whether one is set).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

from engine.models.store import ModelStore

from .launcher import PREFERRED_PORT, _version

LOG_TAIL_BYTES = 2 << 20  # per log file in the bundle: the recent part is what helps


def _port_state(port: int) -> dict:
    with socket.socket() as s:
        free = s.connect_ex(("127.0.0.1", port)) != 0
    state = {"port": port, "in_use": not free, "flashdesk": None, "speculation": None}
    if not free:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                health = json.loads(r.read())
            state["flashdesk"], state["speculation"] = health.get("status"), health.get("speculation")
        except (OSError, ValueError, AttributeError):
            state["flashdesk"] = None  # something else listens there
    return state


def _settings_env() -> dict:
    """FLASHDESK_* variables as set, with secrets replaced by whether they are set."""
    out = {}
    for k, v in sorted(os.environ.items()):
        if k.startswith("FLASHDESK_"):
            out[k] = "(set)" if "KEY" in k or "SECRET" in k or "TOKEN" in k else v
    return out


def report(home: str | None = None) -> dict:
    import llama_cpp

    from engine.advisor.hardware import report as hardware

    store = ModelStore(home)
    models = [{"name": m.name, "file": m.file, "size": m.size, "architecture": m.architecture,
               "source": m.source, "draft": m.draft or None} for m in store.list()]
    here = store.home
    while not here.exists() and here != here.parent:  # a fresh machine: no home (nor its parent) yet
        here = here.parent
    disk = shutil.disk_usage(here)
    logs = store.home / "logs"
    return {
        "flashdesk": _version(), "python": sys.version.split()[0], "platform": platform.platform(),
        "llama_cpp_python": llama_cpp.__version__, "hardware": hardware(max(1, min(os.cpu_count() or 1, 8))),
        "home": str(store.home), "models": models, "disk_free_bytes": disk.free,
        "port": _port_state(PREFERRED_PORT), "logs": str(logs) if logs.is_dir() else None,
        "settings_env": _settings_env(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def format_report(r: dict) -> str:
    hw, port = r["hardware"], r["port"]
    lines = [f"flashdesk {r['flashdesk']}  (Python {r['python']}, llama-cpp-python {r['llama_cpp_python']})",
             f"system      {r['platform']}",
             f"hardware    {hw['summary']}",
             f"llama.cpp   {_build_line(hw['llama_build'])}",
             f"home        {r['home']}  ({r['disk_free_bytes'] / 1e9:.1f} GB free)"]
    if r["models"]:
        for m in r["models"]:
            lines.append(f"model       {m['name']}: {m['size'] / 1e6:.1f} MB {m['architecture']}"
                         f"{', DFlash draft paired' if m['draft'] else ''}")
    else:
        lines.append("model       none installed. HINT: run `flashdesk pull` (or start the app: it fetches one)")
    if not port["in_use"]:
        lines.append(f"port        {port['port']} is free")
    elif port["flashdesk"]:
        lines.append(f"port        {port['port']}: a flashdesk answers there ({port['flashdesk']})")
    else:
        lines.append(f"port        {port['port']} is taken by another program; the app picks another port")
    lines.append(f"speculation {_speculation_line(port.get('speculation'), hw.get('exactness'))}")
    lines.append(f"logs        {r['logs'] or 'none yet'}")
    return "\n".join(lines)


def _speculation_line(served: dict | None, promise: str | None) -> str:
    """Whether speculative decoding is exact and on: as the running server measured it, else what
    this build promises (the engine measures it when a model loads)."""
    if served and served.get("exact_why"):
        state = "on" if served.get("enabled") else "off"
        return f"{state}, {'exact' if served.get('exact') else 'NOT exact'}: {served['exact_why']} (the running server)"
    return f"{promise or 'unknown'}; no flashdesk server is running to measure it"


def _build_line(b: dict) -> str:
    """Which of the installation's llama.cpp builds loaded, from where and why (engine/llama/build.py)."""
    driver = b.get("driver") or {}
    facts = [f"builds here: {', '.join(b['available'])}", f"reason: {b['reason']}"]
    if driver:
        facts.append(f"NVIDIA driver: CUDA {driver.get('cuda_version')}, {driver.get('devices')} GPU(s)"
                     if driver.get("found") else "NVIDIA driver: none")
    return f"{b['name']} build from {b['folder']}  ({'; '.join(facts)})"


def write_bundle(r: dict, out: str | Path) -> Path:
    """The support zip: report.json, the logs' recent parts, the models' manifests. No chats, no
    work orders, no keys."""
    out = Path(out)
    home = Path(r["home"])
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("report.json", json.dumps(r, indent=2, ensure_ascii=False))
        for f in sorted((home / "logs").glob("*.log*")) if (home / "logs").is_dir() else []:
            with open(f, "rb") as fh:
                fh.seek(max(0, f.stat().st_size - LOG_TAIL_BYTES))
                z.writestr(f"logs/{f.name}", fh.read())
        for f in sorted((home / "models").glob("*/model.json")):
            z.write(f, f"models/{f.parent.name}/model.json")
    return out
