"""More requests than slots over HTTP: past --max-queue a request gets a 429 with Retry-After
(the openai client's RateLimitError), never a timeout with no answer; /health and /metrics count
it, and a work-order parse refused so is not in the audit trail; the server answers again once a
slot is free."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from conftest import TEST_CTX, ThreadServer, linked_home, wait_ready
from server.http.app import create_app
from server.settings import Settings

COUNTING = {"model": "smollm2", "prompt": "1, 2, 3, 4, 5, 6,", "max_tokens": 1500, "temperature": 0}


def test_past_the_queue_limit_a_request_gets_a_429_with_retry_after(store, tmp_path):
    home = linked_home(tmp_path, store)  # its own audit trail
    srv = ThreadServer(create_app(Settings(home=str(home), ctx=TEST_CTX, threads=2, parallel=1, max_queue=0,
                                           speculative="off")))
    started, release = threading.Event(), threading.Event()
    try:
        wait_ready(srv.base)

        def hold_the_slot():
            with httpx.stream("POST", f"{srv.base}/v1/completions", json={**COUNTING, "stream": True},
                              timeout=120) as r:
                for line in r.iter_lines():
                    if '"text": "' in line:
                        started.set()
                    if release.is_set():
                        break  # hang up: the slot frees

        holder = threading.Thread(target=hold_the_slot)
        holder.start()
        assert started.wait(60)
        client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.RateLimitError) as e:
            client.completions.create(model="smollm2", prompt="Hello", max_tokens=2)
        assert e.value.status_code == 429 and e.value.body["code"] == "server_busy"
        assert 1 <= int(e.value.response.headers["Retry-After"]) <= 60
        assert "--max-queue" in e.value.message
        parse = httpx.post(f"{srv.base}/v1/workorders/parse", json={"text": "500 flyers A5 by Friday"}, timeout=30)
        assert parse.status_code == 429 and "Retry-After" in parse.headers
        assert httpx.get(f"{srv.base}/v1/workorders").json()["data"] == []  # never read: not in the audit trail
        health = httpx.get(f"{srv.base}/health").json()["engine"]
        assert health["max_queue"] == 0 and health["refused"] == 2
        assert "flashdesk_busy_refusals_total 2" in httpx.get(f"{srv.base}/metrics").text
        release.set()
        holder.join(60)
        # the hang-up freed the slot: the client's own retry (as openai does on a 429) gets an answer
        patient = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="x", max_retries=5)
        assert patient.completions.create(model="smollm2", prompt="Hello", max_tokens=2).usage.completion_tokens >= 1
    finally:
        release.set()
        srv.stop()
