"""Pulls from a Hugging Face endpoint over HTTP (/v1/store/pull, /v1/store/jobs/{id}[/cancel]) against a
real `flashdesk serve` whose HF_ENDPOINT is the local stand-in Hub: a user catalog entry is listed with
its pins and licences, a pull installs and pairs its draft, a cancel leaves nothing, a broken user
catalog file is reported instead of stopping the server.
"""

from __future__ import annotations

import signal
import time

import httpx
import numpy as np
import pytest
from hub_models import catalog_entry, hub_file, write_draft, write_target
from hub_standin import HubStandIn

from conftest import ServerProcess, linked_home, serving

REPO = "shop-org/Tiny-GGUF"


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory, model_path):
    d = tmp_path_factory.mktemp("hubfiles")
    target = write_target(d / "Tiny-Q8_0.gguf", model_path)
    big = write_target(d / "Tiny-F32.gguf", model_path, embd_dtype=np.float32)
    return target, big, write_draft(d / "dflash-Tiny-Q8_0.gguf", target, "dflash1")


@pytest.fixture(scope="module")
def srv(tmp_path_factory, store, hub_files):
    target, big, draft = hub_files
    with HubStandIn() as hub:
        rev = hub.add_repo(REPO, {target.name: target, big.name: big, draft.name: draft})
        home = linked_home(tmp_path_factory.mktemp("hub-home"), store)
        catalog_entry(home, "tiny", hub_file(REPO, rev, target), hub_file(REPO, rev, draft, license="MIT"),
                      kind="dflash1")
        catalog_entry(home, "tiny-big", hub_file(REPO, rev, big))
        (home / "catalog" / "typo.json").write_text('{"models": [')
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1",
               "HF_TOKEN": ""}
        with serving(home, env=env) as s:
            s.hub, s.home, s.env = hub, home, env
            yield s


def call(srv, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, f"{srv.base}{path}", json=body, timeout=30)


def wait(srv, job: dict, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    while job["status"] == "running" and time.time() < deadline:
        time.sleep(0.1)
        job = call(srv, "GET", f"/v1/store/jobs/{job['id']}").json()
    return job


def test_the_user_entry_is_listed_with_pins_and_licences(srv):
    body = call(srv, "GET", "/v1/store/models").json()
    tiny = {c["name"]: c for c in body["catalog"]}["tiny"]
    assert tiny["source"] == "user:tiny.json" and tiny["target"]["repo"] == REPO
    assert tiny["draft"]["kind"] == "dflash1" and tiny["draft"]["license"] == "MIT"
    assert tiny["fits"] is True and tiny["installed"] is False
    [problem] = body["catalog_problems"]
    assert problem["file"].endswith("typo.json") and "not readable JSON" in problem["error"]


def test_pull_over_http_installs_and_pairs(srv):
    r = call(srv, "POST", "/v1/store/pull", {"name": "tiny"})
    assert r.status_code == 202, r.text
    job = wait(srv, r.json())
    assert job["status"] == "done", job
    m = {x["name"]: x for x in call(srv, "GET", "/v1/store/models").json()["data"]}["tiny"]
    assert m["draft"] == {"file": "draft.gguf", "source": f"hub:{m_draft_sha(srv)[:16]}", "kind": "dflash1"}
    assert {c["name"]: c for c in call(srv, "GET", "/v1/store/models").json()["catalog"]}["tiny"]["installed"]


def m_draft_sha(srv) -> str:
    import hashlib

    return hashlib.sha256((srv.home / "models" / "tiny" / "draft.gguf").read_bytes()).hexdigest()


def test_cancel_over_http_leaves_nothing(srv):
    srv.hub.throttle(2 << 20)  # ~6 s for the file: time to cancel after its first piece
    try:
        job = call(srv, "POST", "/v1/store/pull", {"name": "tiny-big"}).json()
        deadline = time.time() + 30
        while job["done_bytes"] == 0 and job["status"] == "running" and time.time() < deadline:
            time.sleep(0.05)
            job = call(srv, "GET", f"/v1/store/jobs/{job['id']}").json()
        r = call(srv, "POST", f"/v1/store/jobs/{job['id']}/cancel")
        assert r.status_code == 202 and (r.json()["cancelling"] or r.json()["status"] == "cancelled")
        job = wait(srv, r.json())
    finally:
        srv.hub.throttle(None)
    assert job["status"] == "cancelled" and job["code"] == "cancelled" and "nothing was installed" in job["error"]
    assert not (srv.home / "models" / "tiny-big").exists() and not (srv.home / "downloads" / "tiny-big").exists()
    assert call(srv, "POST", "/v1/store/jobs/nope/cancel").status_code == 404


def test_sigterm_during_a_pull_stops_at_once_and_lists_nothing_half_installed(srv):
    """A second server on the same home is stopped mid-download; the first then lists no tiny-big."""
    other = ServerProcess(srv.home, env=srv.env)
    srv.hub.throttle(2 << 20)
    try:
        other.wait_ready(measured=False)
        job = httpx.post(f"{other.base}/v1/store/pull", json={"name": "tiny-big"}, timeout=30).json()
        deadline = time.time() + 30
        while job["done_bytes"] == 0 and job["status"] == "running" and time.time() < deadline:
            time.sleep(0.05)
            job = httpx.get(f"{other.base}/v1/store/jobs/{job['id']}", timeout=30).json()
        assert job["status"] == "running" and job["done_bytes"] > 0, job
        t0 = time.perf_counter()
        other.proc.send_signal(signal.SIGTERM)
        other.proc.wait(timeout=30)
        took = time.perf_counter() - t0
    finally:
        srv.hub.throttle(None)
        other.stop()
    assert took < 3.0, f"{took:.1f} s after SIGTERM during a pull: {other.log_tail()}"
    assert not (srv.home / "models" / "tiny-big").exists()
    listed = {c["name"]: c for c in call(srv, "GET", "/v1/store/models").json()["catalog"]}
    assert not listed["tiny-big"]["installed"]
