"""Loading (503), a stream that fails after it started, and client disconnects."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from conftest import TEST_CTX, ThreadServer
from engine import Engine, EngineConfig
from engine.speculative.params import MODES
from server.http.app import create_app
from server.runtime.served import load_engine
from server.settings import Settings

COUNTING = {"model": "smollm2", "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 1500, "temperature": 0}


def active(base: str) -> int:
    return httpx.get(f"{base}/health").json()["engine"]["active"]


def wait_idle(base: str, timeout: float) -> float:
    t0 = time.perf_counter()
    while active(base) and time.perf_counter() - t0 < timeout:
        time.sleep(0.02)
    return time.perf_counter() - t0


def test_503_while_the_model_loads_then_ready(store):
    gate = threading.Event()

    def slow_loader(settings, stop):
        gate.wait(30)
        return load_engine(settings, stop)

    srv = ThreadServer(create_app(Settings(home=str(store.home), ctx=TEST_CTX, threads=2), slow_loader))
    try:
        client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 503 and e.value.body["code"] == "model_loading"
        h = httpx.get(f"{srv.base}/health")
        assert h.status_code == 503 and h.json()["status"] == "loading"
        assert h.json()["speculation"]["modes"] == list(MODES)  # the UI offers them while the model loads
        assert httpx.get(f"{srv.base}/v1/system").json()["speculation"] is None  # the engine's facts: not yet
        gate.set()
        deadline = time.time() + 60
        while httpx.get(f"{srv.base}/health").status_code != 200 and time.time() < deadline:
            time.sleep(0.05)
        r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=3)
        assert r.usage.completion_tokens >= 1
    finally:
        gate.set()
        srv.stop()


def test_stream_failing_after_start_ends_with_one_error_event(store, model_path):
    """The engine stops mid-answer (as at shutdown): the stream ends with one `error` event."""
    holder = {}

    def loader(settings, stop):
        holder["engine"] = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_threads=2))
        return store.get("smollm2"), holder["engine"]

    srv = ThreadServer(create_app(Settings(home=str(store.home), ctx=TEST_CTX), loader))
    try:
        deadline = time.time() + 60
        while httpx.get(f"{srv.base}/health").status_code != 200 and time.time() < deadline:
            time.sleep(0.05)
        lines = []
        with httpx.stream("POST", f"{srv.base}/v1/completions", json={**COUNTING, "stream": True}) as r:
            for line in r.iter_lines():
                lines.append(line)
                if len([x for x in lines if x.startswith("data:")]) == 5:
                    threading.Thread(target=holder["engine"].close).start()
        events = [x for x in lines if x.startswith("event:")]
        assert events == ["event: error"]
        payload = json.loads(lines[lines.index("event: error") + 1].removeprefix("data:").strip())
        assert payload["error"]["code"] == "engine_stopped"
        assert "data: [DONE]" not in lines
    finally:
        srv.stop()


def test_stream_disconnect_cancels_within_a_step(server):
    with httpx.stream("POST", f"{server.base}/v1/completions", json={**COUNTING, "stream": True}) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i == 6:
                assert active(server.base) == 1  # still generating when the client leaves
            if i > 10:
                break
    assert wait_idle(server.base, 10) < 2.0
    assert active(server.base) == 0
    ok = httpx.post(f"{server.base}/v1/completions", json={**COUNTING, "max_tokens": 4})
    assert ok.status_code == 200  # keeps serving


def test_non_stream_disconnect_cancels(server):
    seen = []
    watcher = threading.Timer(0.6, lambda: seen.append(active(server.base)))
    watcher.start()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base}/v1/completions", json=COUNTING, timeout=httpx.Timeout(5, read=1.0))
    watcher.join()
    assert seen == [1]  # it was generating while the client waited
    # 1500 tokens would take many seconds; cancellation frees the slot almost at once
    assert wait_idle(server.base, 10) < 2.0
    assert active(server.base) == 0
