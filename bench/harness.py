"""The harness the benchmarks and the tests both run on: the dev checkout's model cache, and
`flashdesk serve` as a subprocess on a free loopback port, waited on until ready.

A declared module, not a script and not a fixture file: tests/conftest.py builds its fixtures on
it, and bench/ imports it from here, never from tests/ (tests/test_layering.py holds both to that).
Nothing here imports `engine`: a caller first drops the caller's own flashdesk settings
(`drop_callers_settings`), then imports the engine. The dev prompts are bench/datasets.py's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from engine.models.store import ModelStore

ROOT = Path(__file__).resolve().parent.parent
TEST_CTX = 2048


def drop_callers_settings() -> None:
    """Forget the caller's own flashdesk settings (a user's FLASHDESK_HOME, FLASHDESK_MODEL,
    FLASHDESK_LLAMA_BUILD, ...): a run that needs one sets it itself. Only the harness's own knobs
    (FLASHDESK_TEST_*) pass. Call it before anything imports `engine`, which reads FLASHDESK_LLAMA_BUILD."""
    for name in [k for k in os.environ if k.startswith("FLASHDESK_") and not k.startswith("FLASHDESK_TEST_")]:
        del os.environ[name]


def test_home() -> Path:
    """Per-machine model cache for the tests and benchmarks (not the user's own store)."""
    return Path(os.environ.get("FLASHDESK_TEST_HOME", Path.home() / ".cache" / "flashdesk-tests"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settled(health: httpx.Response, want: int = 200, measured: bool = True) -> bool:
    """/health answered `want`; with `measured`, a ready server has also timed c(1..16) (its idle
    fill-in is done: until then the chooser prices from fewer decodes, test_first_request.py)."""
    if health.status_code != want:
        return False
    return not measured or want != 200 or (health.json().get("speculation") or {}).get("cost_curve") != "learning"


def wait_ready(base: str, timeout: float = 120.0, want: int = 200) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if settled(httpx.get(f"{base}/health", timeout=2), want):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"server at {base} did not become ready")


class ServerProcess:
    """`flashdesk serve` as a real subprocess on a free loopback port."""

    def __init__(self, home: Path, *flags: str, env: dict[str, str] | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "server.cli", "--home", str(home), "serve", "--port", str(self.port),
               "--ctx", str(TEST_CTX), "--threads", "2", *flags]
        self.log_path = home / f"server-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=None if env is None else {**os.environ, **env})

    def wait_ready(self, timeout: float = 300.0, measured: bool = True) -> None:
        """Like wait_ready(), but a server that exits fails at once, and either failure shows its log.
        The long timeout is for a busy machine: a load takes ~5 s alone, far longer beside heavy jobs.
        `measured=False`: ready as soon as the model is loaded, as a user sees it."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                if settled(httpx.get(f"{self.base}/health", timeout=2), measured=measured):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server at {self.base} was not ready after {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text("utf-8", errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def linked_home(home: Path, store: ModelStore) -> Path:
    """A flashdesk home whose models/smollm2 holds links to the test cache's model files (and
    copies of its JSON: manifest, measured verify cost), so the store may delete or re-pair
    there: it removes the links, never their targets."""
    src = Path(store.get("smollm2").path).parent
    dst = home / "models" / "smollm2"
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".gguf":
            (dst / f.name).symlink_to(f)
        elif f.suffix == ".json":
            shutil.copy(f, dst / f.name)
    return home
