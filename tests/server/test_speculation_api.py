"""The speculation extension on the API: request field, usage report, errors, /metrics."""

from __future__ import annotations

import httpx
import openai
import pytest

from engine.models.catalog import CATALOG

MSG = [{"role": "user", "content": "Repeat exactly: order 4411, 200 blue shirts, size M, due Friday."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key="unused", max_retries=0, timeout=120)


def test_lookup_speculation_is_reported_and_changes_nothing(client):
    kw = dict(model="smollm2", messages=MSG, temperature=0, max_tokens=48)
    plain = client.chat.completions.create(**kw, extra_body={"speculative": {"mode": "off"}})
    spec = client.chat.completions.create(**kw, extra_body={"speculative": {"mode": "lookup", "block": 4}})
    assert spec.choices[0].message.content == plain.choices[0].message.content
    s = spec.usage.speculation
    assert s["mode"] == "lookup" and s["verifies"] > 0
    # The answer repeats the prompt's text: a fixed block of 4 copies it, so some drafts are accepted
    # (tau >= 1 holds by construction; tau > 1 only where acceptance happened).
    assert s["accepted"] > 0 and s["tau"] > 1.0
    assert s["tau"] == pytest.approx(1 + s["accepted"] / s["verifies"], abs=1e-3)  # tau = committed per verify
    assert len(s["acceptance_by_position"]) <= 3
    assert getattr(plain.usage, "speculation", None) is None


def test_speculation_in_the_final_stream_usage_chunk(client):
    chunks = list(client.chat.completions.create(
        model="smollm2", messages=MSG, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True}, extra_body={"speculative": {"mode": "lookup", "block": 4}}))
    assert chunks[-1].usage.speculation["mode"] == "lookup"
    # Each text chunk says how many tokens it carries (the UI's live tok/s): together, all of them.
    counted = sum(c.choices[0].tokens for c in chunks if c.choices and c.choices[0].delta.content)
    assert counted == chunks[-1].usage.completion_tokens


def test_a_request_that_verified_reports_an_estimated_speedup(client):
    """Once the learned cost model has timed a plain decode, a request that verified drafts carries
    its estimated speed-up over plain decoding (shown in the UI's answer details). The block is fixed
    so that it verifies on any machine: whether the chooser verifies depends on this machine's costs,
    which tests/engine/speculative/test_cost_model.py drives with a fake clock."""
    r = client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_tokens=48,
                                       extra_body={"speculative": {"mode": "lookup", "block": 4}})
    s = r.usage.speculation
    assert s["verifies"] > 0 and s["speedup"] > 0


# Each bad setting, the field the 400 must name, and words of the rule it must state.
@pytest.mark.parametrize("spec, param, says", [
    ({"mode": "warp"}, "speculative.mode", "'lookup'"),  # it lists the modes there are
    ({"mode": "lookup", "block": 1}, "speculative.block", "greater than or equal to 2"),
    ({"selector": "best"}, "speculative.selector", "'walk'"),  # it lists the selectors
    ({"mode": "dflash", "block": 17}, "speculative.block", "less than or equal to 16"),
])
def test_bad_speculation_settings_are_400(client, spec, param, says):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2", messages=MSG, max_tokens=4,
                                       extra_body={"speculative": spec})
    assert e.value.body["param"] == param, e.value.body
    assert says in e.value.body["message"] and param in e.value.body["message"], e.value.body


def test_health_and_metrics_report_speculation(server, client):
    h = httpx.get(f"{server.base}/health").json()["speculation"]
    assert h["exact"] is True and "lookup" in h["drafters"]
    client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_tokens=16,
                                   extra_body={"speculative": {"mode": "lookup", "block": 4}})
    text = httpx.get(f"{server.base}/metrics").text
    assert 'flashdesk_requests_total{finish_reason=' in text
    assert 'flashdesk_spec_verifies_total{mode="lookup"}' in text
    assert "flashdesk_completion_tokens_total" in text


def test_the_shipped_draft_is_paired_by_default_and_lossless(server, client):
    """`flashdesk pull smollm2` pairs the draft flashdesk ships; `serve` loads it (draft auto)."""
    assert CATALOG["smollm2"].draft_file is not None, "flashdesk ships a trained draft for its default model"
    h = httpx.get(f"{server.base}/health").json()["speculation"]
    assert "dflash" in h["drafters"] and h["draft"] == {"kind": "dflash2", "block_size": 8, "top_k": 16}
    kw = dict(model="smollm2", messages=MSG, temperature=0, max_tokens=40)
    plain = client.chat.completions.create(**kw, extra_body={"speculative": {"mode": "off"}})
    for sel in ("walk", "dp"):
        spec = client.chat.completions.create(**kw, extra_body={"speculative": {"mode": "dflash", "selector": sel,
                                                                                 "block": 8}})
        assert spec.choices[0].message.content == plain.choices[0].message.content
        s = spec.usage.speculation
        assert s["mode"] == "dflash" and s["selector"] == sel and s["verifies"] > 0


def test_dflash_without_a_draft_is_400(start_server):
    srv = start_server("--draft", "none")
    c = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="smollm2", messages=MSG, max_tokens=4,
                                  extra_body={"speculative": {"mode": "dflash"}})
    assert "dflash" in e.value.body["message"]
