"""llama-cpp-python's own OpenAI server (`python -m llama_cpp.server`) as the backend of
`flashdesk serve --backend` in the tests: a real server we did not write, on loopback, with the
SmolLM2 test model, one llama.cpp thread and a context that holds a work-order prompt. Not a
fixture: tests/server and tests/ui each start one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import free_port

ALIAS = "smollm2-backend"  # the backend's own name for the model: flashdesk must use it, not "smollm2"


class Backend:
    """llama-cpp-python's OpenAI server as a subprocess; kill() ends it, start() brings it back on its port."""

    def __init__(self, model_path: str, log: Path, api_key: str | None = None, interrupts: bool = False):
        self.model_path, self.log_path, self.port, self.api_key = model_path, log, free_port(), api_key
        self.interrupts = interrupts  # True: the server's own default (see start)
        self.base = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}  # for asking it directly
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", self.model_path, "--model_alias", ALIAS,
             "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "4096", "--n_threads", "1",
             "--n_threads_batch", "1", *(["--api_key", self.api_key] if self.api_key else []),
             # its default cuts a streaming answer short (a bare [DONE]) whenever another request comes in,
             # even GET /v1/models: flashdesk's /health probe, polled by every open page, would end a parse
             "--interrupt_requests", str(self.interrupts)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            assert self.proc.poll() is None, f"the backend exited: {self.log_tail()}"
            try:
                if httpx.get(f"{self.base}/v1/models", headers=self.headers, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"the backend did not start: {self.log_tail()}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()

    def log_since(self, offset: int) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", errors="replace")

    def log_tail(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text("utf-8", errors="replace")[-2000:]
