"""The backend's own speculation counts in GET /health and GET /v1/system (`speculation.backend_counters`),
which the UI shows labelled as the backend's: read from a vLLM stand-in's Prometheus /metrics (tests/
vllm_standin.py; a real vLLM cannot run here, and llama-cpp-python's server publishes no /metrics), asked
anew on every request, and null, never zeros, where the backend publishes none or cannot be reached.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import ThreadServer, wait_ready
from server.http.app import create_app
from server.settings import Settings
from server.runtime.speculation import backend_counters
from vllm_standin import VllmStandin, prometheus


@pytest.fixture(scope="module")
def standin():
    s = VllmStandin(prometheus(drafts=300, draft_tokens=1500, accepted=930))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def front(standin, tmp_path_factory):
    srv = ThreadServer(create_app(Settings(home=str(tmp_path_factory.mktemp("front")), backend=standin.base)))
    wait_ready(srv.base, timeout=60)
    yield srv
    srv.stop()


@pytest.fixture
def metrics(standin):
    """Each test sets the stand-in's /metrics as it needs; the module's counts come back after it."""
    before = standin.metrics
    yield standin
    standin.metrics = before


def counters(base: str) -> dict | None:
    return httpx.get(f"{base}/health", timeout=10).json()["speculation"]["backend_counters"]


def test_health_and_system_carry_the_backends_own_counts(front):
    health = httpx.get(f"{front.base}/health", timeout=10)
    assert health.status_code == 200 and health.json()["backend"]["status"] == "up"
    spec = health.json()["speculation"]
    # summed over vLLM's two engines; 930 of 1500 drafted tokens accepted, 1 + 930 / 300 tokens per verify step
    assert spec["backend_counters"] == {"drafts": 300, "draft_tokens": 1500, "accepted_tokens": 930,
                                        "acceptance": 0.62, "tau": 4.1}
    assert spec["backend"] is True and spec["exact"] is None  # still the backend's facts around them
    system = httpx.get(f"{front.base}/v1/system", timeout=30).json()["speculation"]
    assert system == spec  # one spelling (server/runtime/speculation.py published)
    text = httpx.get(f"{front.base}/metrics", timeout=10).text
    assert "flashdesk_backend_spec_accepted_tokens_total 930" in text


def test_the_counts_are_asked_anew_on_every_request(front, metrics):
    metrics.metrics = prometheus(drafts=400, draft_tokens=2000, accepted=1000)
    assert counters(front.base) == {"drafts": 400, "draft_tokens": 2000, "accepted_tokens": 1000,
                                    "acceptance": 0.5, "tau": 3.5}


def test_a_backend_without_metrics_has_no_counts_not_zeros(front, metrics):
    metrics.metrics = None  # GET /metrics is a 404 (SGLang without --enable-metrics, say)
    health = httpx.get(f"{front.base}/health", timeout=10)
    assert health.status_code == 200 and health.json()["speculation"]["backend_counters"] is None
    assert httpx.get(f"{front.base}/v1/system", timeout=30).json()["speculation"]["backend_counters"] is None
    metrics.metrics = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"  # no speculation
    assert counters(front.base) is None


def test_a_vllm_that_has_not_drafted_yet_has_no_rates():
    # speculation configured, no traffic yet: the counts are zeros it published, the rates unknown
    assert backend_counters({"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}) == {
        "drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "acceptance": None, "tau": None}
    # a count it did not publish stays unknown, and so does the rate that needs it
    assert backend_counters({"drafts": 15.0, "accepted_tokens": 45.0}) == {
        "drafts": 15, "draft_tokens": None, "accepted_tokens": 45, "acceptance": None, "tau": 4.0}
    assert backend_counters(None) is None


def test_sglangs_rates_are_taken_as_they_are():
    # SGLang publishes no counts, only both rates (its gauges), which read 0 until something was drafted
    assert backend_counters({"accept_rate": 0.71234, "accept_length": 3.1}) == {
        "drafts": None, "draft_tokens": None, "accepted_tokens": None, "acceptance": 0.7123, "tau": 3.1}
    assert backend_counters({"accept_rate": 0.0, "accept_length": 0.0})["tau"] is None


def test_a_backend_that_went_away_has_no_counts(tmp_path):
    gone = VllmStandin(prometheus(drafts=10, draft_tokens=50, accepted=20))
    srv = ThreadServer(create_app(Settings(home=str(tmp_path), backend=gone.base)))
    try:
        wait_ready(srv.base, timeout=60)
        assert counters(srv.base)["accepted_tokens"] == 20
        gone.stop()
        health = httpx.get(f"{srv.base}/health", timeout=10)
        assert health.status_code == 503 and health.json()["backend"]["status"] == "down"
        assert health.json()["speculation"]["backend_counters"] is None
    finally:
        srv.stop()
