"""Safe defaults: API key, browser origins, Host header (DNS rebinding), loopback-only binding."""

from __future__ import annotations

import subprocess
import sys

import httpx
import openai
import pytest

from conftest import ROOT

MSG = [{"role": "user", "content": "hi"}]


def test_api_key_required_when_set(start_server):
    srv = start_server("--api-key", "s3cret-key")
    bad = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.body["code"] == "invalid_api_key"
    r = httpx.post(f"{srv.base}/v1/chat/completions", json={"model": "smollm2", "messages": MSG})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    good = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="s3cret-key", max_retries=0)
    assert good.chat.completions.create(model="smollm2", messages=MSG, max_tokens=3).usage.completion_tokens >= 1
    assert httpx.get(f"{srv.base}/health").status_code == 200  # health stays open for launchers


def test_other_origins_are_refused_same_origin_allowed(server):
    api = f"{server.base}/v1/models"
    r = httpx.get(api, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert httpx.get(api, headers={"Origin": "null"}).status_code == 403
    r = httpx.post(f"{server.base}/v1/chat/completions", headers={"Origin": "http://evil.example"},
                   json={"model": "smollm2", "messages": MSG, "max_tokens": 2})
    assert r.status_code == 403
    assert httpx.get(api, headers={"Origin": server.base}).status_code == 200


def test_allowed_origin_flag(start_server):
    srv = start_server("--allowed-origin", "http://intranet.shop:3000")
    assert httpx.get(f"{srv.base}/v1/models", headers={"Origin": "http://intranet.shop:3000"}).status_code == 200
    assert httpx.get(f"{srv.base}/v1/models", headers={"Origin": "http://other.shop"}).status_code == 403


def test_foreign_host_header_is_refused(server):
    r = httpx.get(f"{server.base}/v1/models", headers={"Host": "attacker.example"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"
    port = server.port
    for ok in (f"127.0.0.1:{port}", f"localhost:{port}"):
        assert httpx.get(f"{server.base}/v1/models", headers={"Host": ok}).status_code == 200


def test_binding_beyond_loopback_needs_a_key(store):
    out = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(store.home), "serve",
                          "--host", "0.0.0.0", "--port", "9"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert "API key is required" in out.stderr and "--api-key" in out.stderr


def test_serving_a_model_that_is_not_installed_says_how_to_get_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "server.cli", "--home", str(tmp_path), "serve", "--port", "9"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "flashdesk pull smollm2" in out.stderr
