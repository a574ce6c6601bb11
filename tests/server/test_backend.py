"""`flashdesk serve --backend URL` in front of a real OpenAI-compatible server we did not write:
llama-cpp-python's own (`python -m llama_cpp.server`) with SmolLM2, on loopback.

Through the real `openai` client: at temperature 0, flashdesk's answers equal the backend's own,
streamed or not; /v1/models is the backend's; what a backend request cannot carry is a 400; a
disconnect closes the backend request; a backend that is down is a 503 on /health while the UI
still serves; a backend killed mid-stream ends the stream with one `error` event, and the next
request works once it is back. One backend per module, one llama.cpp thread, short answers.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from pydantic import ValidationError

from backend_server import ALIAS, Backend
from conftest import ThreadServer, free_port, wait_ready
from server import flags
from server.http.app import create_app
from server.cli import parser
from server.settings import Settings
from server.runtime.backend_wire import chunk_parts, json_object_dialect, spec_figures

MSG = [{"role": "user", "content": "Name three things a print shop sells."}]
# greedy, SmolLM2 writes past 900 tokens here (~15 s at one thread): still generating when the client hangs up
LONG = [{"role": "user", "content": "Write a long story about a print shop, at least 800 words."}]
KEY = "backend-secret"  # the module's backend wants it: flashdesk sends it, the tests asking directly too


@pytest.fixture(scope="module")
def backend(model_path, tmp_path_factory):
    b = Backend(model_path, tmp_path_factory.mktemp("backend") / "backend.log", api_key=KEY)
    b.start()
    yield b
    if b.proc.poll() is None:
        b.kill()


def front_for(url: str, home: Path, **settings) -> ThreadServer:
    return ThreadServer(create_app(Settings(home=str(home), backend=url, **settings)))


@pytest.fixture(scope="module")
def front(backend, tmp_path_factory):
    srv = front_for(backend.base, tmp_path_factory.mktemp("front"), backend_key=KEY)  # no --backend-model: it asks
    wait_ready(srv.base, timeout=60)
    yield srv
    srv.stop()


def client_of(base: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=120)


def sse(resp: httpx.Response) -> list[tuple[str, str]]:
    """(event name, data) of every event of a streamed response."""
    out, event = [], "message"
    for line in resp.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            out.append((event, line[5:].strip()))
            event = "message"
    return out


def test_the_backend_flags_and_their_checks(monkeypatch):
    for name in Settings.model_fields:
        monkeypatch.delenv(f"FLASHDESK_{name.upper()}", raising=False)

    def serve(*argv: str) -> Settings:
        return Settings(**flags.given(parser().parse_args(["serve", *argv]), Settings))

    s = serve("--backend", "http://gpu-box:8000", "--backend-key", "k1", "--backend-model", "m")
    assert (s.backend, s.backend_key.get_secret_value(), s.backend_model) == ("http://gpu-box:8000/v1", "k1", "m")
    assert serve("--backend", "https://gpu-box/api/v1/").backend == "https://gpu-box/api/v1"  # the same root
    assert serve().backend is None
    for bad in ("gpu-box:8000", "ftp://gpu-box", "http://gpu-box:8000/?x=1"):
        with pytest.raises(ValidationError, match="HINT|address only"):
            serve("--backend", bad)


def test_the_backends_speculation_counters_are_read_from_its_prometheus_text():
    text = "\n".join([
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 42',
        "vllm:num_requests_running 3",
        "vllm:spec_decode_num_accepted_tokens_total 8 1700000000000",  # no labels, a timestamp
    ])
    # summed over engines; a counter it did not publish (draft tokens) is absent, never a zero
    assert spec_figures(text) == {"drafts": 15.0, "accepted_tokens": 50.0}
    assert spec_figures("vllm:num_requests_running 3\n") is None
    sglang = "\n".join([  # gauges per rank: averaged, not summed
        "# TYPE sglang:spec_accept_rate gauge",
        'sglang:spec_accept_rate{dp_rank="0",model_name="m",tp_rank="0"} 0.6',
        'sglang:spec_accept_rate{dp_rank="1",model_name="m",tp_rank="0"} 0.8',
        'sglang:spec_accept_length{dp_rank="0",model_name="m",tp_rank="0"} 3.5',
        'sglang:num_requests_running{model_name="m"} 2'])
    assert spec_figures(sglang) == pytest.approx({"accept_rate": 0.7, "accept_length": 3.5})


def test_token_log_probabilities_are_read_from_chat_chunks():
    chunk = {"choices": [{"index": 0, "delta": {"content": "é!"}, "finish_reason": None, "logprobs": {"content": [
        {"token": "\u00e9", "logprob": -0.5, "bytes": [195, 169]},  # OpenAI and vLLM send the bytes
        {"token": "!", "logprob": -1.0, "bytes": None}]}}]}  # llama-cpp-python sends null: the text's UTF-8
    assert chunk_parts(chunk) == ("é!", None, [(b"\xc3\xa9", -0.5), (b"!", -1.0)])
    assert chunk_parts({"choices": [{"delta": {"content": "x"}, "logprobs": None, "finish_reason": "stop"}]}) \
        == ("x", "stop", [])
    fmt = {"type": "json_schema", "json_schema": {"name": "o", "schema": QTY, "strict": True}}
    assert json_object_dialect(fmt) == {"type": "json_object", "schema": QTY}
    assert json_object_dialect({"type": "json_object"}) is None and json_object_dialect(None) is None


def test_metrics_show_no_backend_speculation_where_the_backend_publishes_none(front):
    text = httpx.get(f"{front.base}/metrics").text  # llama-cpp-python's server has no /metrics
    assert "flashdesk_requests_total" in text and "flashdesk_backend_spec" not in text


def test_chat_at_temperature_0_is_the_backends_answer(backend, front):
    ours, theirs = client_of(front.base), client_of(backend.base, KEY)
    kw = dict(model=ALIAS, messages=MSG, temperature=0, max_tokens=24)
    want = theirs.chat.completions.create(**kw)
    got = ours.chat.completions.create(**kw)
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.choices[0].finish_reason == want.choices[0].finish_reason == "length"
    assert got.model == ALIAS
    chunks = list(ours.chat.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completions_with_a_stop_string_are_the_backends_answer(backend, front):
    ours, theirs = client_of(front.base), client_of(backend.base, KEY)
    kw = dict(model=ALIAS, prompt="A print shop sells posters, flyers,", temperature=0, max_tokens=24, stop=["\n"])
    want = theirs.completions.create(**kw)
    got = ours.completions.create(**kw)
    assert got.choices[0].text == want.choices[0].text and "\n" not in got.choices[0].text
    assert got.choices[0].finish_reason == want.choices[0].finish_reason
    streamed = list(ours.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == want.choices[0].text


def test_usage_the_backend_did_not_count_is_null_not_zero(front):
    # llama-cpp-python's server streams no token counts; flashdesk must not invent them (0 would be a lie)
    r = httpx.post(f"{front.base}/v1/chat/completions", timeout=120,
                   json={"model": ALIAS, "messages": MSG, "temperature": 0, "max_tokens": 4})
    usage = r.json()["usage"]
    assert usage["completion_tokens"] is None and usage["prompt_tokens"] is None
    assert usage["timings"]["prefill_ms"] > 0


def test_models_are_the_backends(backend, front):
    want = httpx.get(f"{backend.base}/v1/models", headers=backend.headers).json()["data"]
    assert httpx.get(f"{front.base}/v1/models").json()["data"] == want
    assert [m.id for m in client_of(front.base).models.list().data] == [ALIAS]
    health = httpx.get(f"{front.base}/health").json()
    assert health["backend"]["status"] == "up" and health["model"] == ALIAS


def test_without_the_backends_key_flashdesk_says_which_flag_is_missing(backend, tmp_path):
    srv = front_for(backend.base, tmp_path, backend_model=ALIAS)
    try:
        wait_ready(srv.base, timeout=60, want=503)
        health = httpx.get(f"{srv.base}/health").json()
        assert health["status"] == "error" and "--backend-key" in health["error"], health
    finally:
        srv.stop()


def test_a_field_the_backend_cannot_be_given_is_a_400(front):
    with pytest.raises(openai.BadRequestError) as e:
        client_of(front.base).chat.completions.create(model=ALIAS, messages=MSG, max_tokens=4,
                                                      extra_body={"speculative": {"mode": "lookup"}})
    assert e.value.body["code"] == "unsupported_with_backend" and e.value.body["param"] == "speculative"


ORDER = [{"role": "user", "content": 'Reply with exactly this JSON and nothing else: {"item": "flyers", "qty": 50}'}]


def test_json_object_is_enforced_by_the_backend_and_validated_here(backend, front):
    kw = dict(model=ALIAS, messages=ORDER, temperature=0, max_tokens=64, response_format={"type": "json_object"})
    want = httpx.post(f"{backend.base}/v1/chat/completions", json=kw, headers=backend.headers,
                      timeout=120).json()["choices"][0]
    got = httpx.post(f"{front.base}/v1/chat/completions", json=kw, timeout=120).json()["choices"][0]
    assert got["message"]["content"] == want["message"]["content"]
    assert got["structured_output"] == {"valid": True, "errors": []}
    assert isinstance(json.loads(got["message"]["content"]), dict)
    cut = httpx.post(f"{front.base}/v1/chat/completions", json=kw | {"max_tokens": 3}, timeout=120).json()
    check = cut["choices"][0]["structured_output"]  # a JSON answer cut off is never reported valid
    assert check["valid"] is False and "max_tokens" in check["errors"][0]


QTY = {"type": "object", "properties": {"qty": {"type": "integer"}}, "required": ["qty"]}


def test_json_schema_reaches_llama_cpp_python_in_its_own_dialect_and_is_validated_here(backend, front):
    # llama-cpp-python answers OpenAI's json_schema with a 500 that names json_object, the one type it takes (with
    # a "schema" it enforces): flashdesk sends schemas so from then on, and still validates every answer
    fmt = {"type": "json_schema", "json_schema": {"name": "order", "schema": QTY}}
    kw = dict(model=ALIAS, messages=ORDER, temperature=0, max_tokens=32)
    got = httpx.post(f"{front.base}/v1/chat/completions", json=kw | {"response_format": fmt}, timeout=120).json()
    want = httpx.post(f"{backend.base}/v1/chat/completions", headers=backend.headers, timeout=120,
                      json=kw | {"response_format": {"type": "json_object", "schema": QTY}}).json()
    content = got["choices"][0]["message"]["content"]
    assert content == want["choices"][0]["message"]["content"]
    assert got["choices"][0]["structured_output"] == {"valid": True, "errors": []}
    assert isinstance(json.loads(content)["qty"], int)
    assert front.app.state.runtime.served.engine.json_object_schemas  # learned once, kept
    again = httpx.post(f"{front.base}/v1/chat/completions", json=kw | {"response_format": fmt}, timeout=120).json()
    assert again["choices"][0]["message"]["content"] == content


def test_a_schema_the_backend_does_not_hold_to_is_reported_invalid_never_a_silent_pass(front):
    # llama-cpp-python's grammar drops integer bounds: it writes the 50 it is asked for, under a minimum of 100
    bounded = {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 100, "maximum": 200}},
               "required": ["qty"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "order", "schema": bounded}}
    got = httpx.post(f"{front.base}/v1/chat/completions", timeout=120, json={
        "model": ALIAS, "messages": ORDER, "temperature": 0, "max_tokens": 32, "response_format": fmt}).json()
    choice = got["choices"][0]
    assert json.loads(choice["message"]["content"]) == {"qty": 50}
    assert choice["structured_output"]["valid"] is False
    assert "minimum of 100" in choice["structured_output"]["errors"][0]


WORK_ORDER = ("Hi, this is Anna Berg from Berg Bakery. We need 500 flyers A5, glossy, by Friday. "
              "Call 0912-345-678.")


def test_a_work_order_parse_through_the_backend_end_to_end(backend, front):
    from server.workorders import prompt
    from server.workorders.templates import TemplateStore

    body = {"text": WORK_ORDER, "sent_date": "2026-12-01"}  # a Tuesday: Friday is 2026-12-04
    r = httpx.post(f"{front.base}/v1/workorders/parse", json=body, timeout=600)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["valid"] is True and out["errors"] == [] and out["model"] == ALIAS
    # the backend's own answer to the same chat and schema at T=0, before our date rule and review
    template = TemplateStore(None).get("work_order")
    msgs = prompt.messages(template, WORK_ORDER, dt.date(2026, 12, 1), None)
    direct = httpx.post(f"{backend.base}/v1/chat/completions", headers=backend.headers, timeout=600, json={
        "model": ALIAS, "messages": msgs, "temperature": 0,
        "response_format": {"type": "json_object", "schema": template.schema}}).json()
    wrote = json.loads(direct["choices"][0]["message"]["content"])
    assert {k: v for k, v in out["result"].items() if k != "due_date"} == \
        {k: v for k, v in wrote.items() if k != "due_date"}
    assert out["result"]["due_date"] == "2026-12-04"  # the date rule: from the message, not the model
    # field confidence from the backend's token log-probabilities, in (0, 1], for the fields it wrote
    conf = out["field_confidence"]
    assert "customer_name" in conf and all(0 < p <= 1 for p in conf.values())
    assert set(out["unavailable"]) == {"close_within_max_tokens"}
    stored = httpx.get(f"{front.base}/v1/workorders/{out['id']}").json()  # the audit trail holds it
    assert stored["output"] == out["result"] and stored["template"] == "work_order"
    assert stored["needs_review"] == out["needs_review"] and stored["unavailable"] == out["unavailable"]


def test_a_work_order_cut_off_by_max_tokens_through_the_backend_needs_review(front):
    r = httpx.post(f"{front.base}/v1/workorders/parse", timeout=600,
                   json={"text": WORK_ORDER, "sent_date": "2026-12-01", "max_tokens": 16})
    out = r.json()
    assert r.status_code == 200, out
    assert out["valid"] is False and out["needs_review"] is True and out["result"] is None
    assert out["finish_reason"] == "length" and "max_tokens" in out["errors"][0]
    assert "close_within_max_tokens" in out["unavailable"]


def test_an_unknown_model_is_a_404(front):
    with pytest.raises(openai.NotFoundError):
        client_of(front.base).chat.completions.create(model="smollm2", messages=MSG, max_tokens=4)


def cancelled(base: str) -> int:
    line = next((x for x in httpx.get(f"{base}/metrics").text.splitlines()
                 if x.startswith('flashdesk_requests_total{finish_reason="cancelled"}')), None)
    return int(float(line.split()[-1])) if line else 0


@pytest.mark.parametrize("stream", [True, False])
def test_a_disconnect_closes_the_backend_request(backend, front, stream):
    body = {"model": ALIAS, "messages": LONG, "temperature": 0, "max_tokens": 900, "stream": stream}
    before, was = backend.log_path.stat().st_size, cancelled(front.base)
    if stream:
        with httpx.stream("POST", f"{front.base}/v1/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if '"content": "' in line and '"content": ""' not in line:
                    break  # the answer has started: hang up
    else:
        with pytest.raises(httpx.ReadTimeout):  # 900 tokens take far longer: the client gives up and hangs up
            httpx.post(f"{front.base}/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=1.5))
    deadline = time.time() + 60
    while "Disconnected from client" not in backend.log_since(before):  # llama-cpp-python's words on a cancel
        assert time.time() < deadline, f"the backend kept generating: {backend.log_tail()}"
        time.sleep(0.2)
    assert cancelled(front.base) == was + 1
    assert "flashdesk_active_requests 0" in httpx.get(f"{front.base}/metrics").text


def test_a_backend_that_is_down_is_a_503_and_the_ui_still_serves(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    srv = front_for(dead, tmp_path, backend_model=ALIAS)
    try:
        wait_ready(srv.base, timeout=60, want=503)
        health = httpx.get(f"{srv.base}/health").json()
        assert health["status"] == "error" and health["backend"]["status"] == "down"
        assert "cannot reach the backend" in health["error"] and health["error"] == health["backend"]["error"]
        page = httpx.get(f"{srv.base}/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        r = httpx.post(f"{srv.base}/v1/chat/completions", json={"model": ALIAS, "messages": MSG}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"
        assert httpx.get(f"{srv.base}/v1/models").status_code == 503
    finally:
        srv.stop()


def test_a_backend_that_starts_after_flashdesk_is_waited_for(model_path, tmp_path):
    late = Backend(model_path, tmp_path / "late-backend.log")  # its port is chosen; nothing listens yet
    srv = front_for(late.base, tmp_path)  # no --backend-model: flashdesk must ask the backend which model
    try:
        wait_ready(srv.base, timeout=60, want=503)
        health = httpx.get(f"{srv.base}/health").json()
        assert health["status"] == "loading" and "--backend-model" in health["error"], health
        r = httpx.post(f"{srv.base}/v1/chat/completions", json={"model": ALIAS, "messages": MSG}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "backend_unavailable"
        late.start()
        wait_ready(srv.base, timeout=60)  # no restart: it asked again
        assert httpx.get(f"{srv.base}/health").json()["model"] == ALIAS
    finally:
        srv.stop()
        if late.proc is not None and late.proc.poll() is None:
            late.kill()


def test_a_backend_killed_mid_stream_is_one_error_event_and_then_works_again(backend, front):
    body = {"model": ALIAS, "messages": MSG, "temperature": 0, "max_tokens": 900, "stream": True}
    events = []
    with httpx.stream("POST", f"{front.base}/v1/chat/completions", json=body, timeout=120) as r:
        lines = r.iter_lines()
        for line in lines:
            if '"content": "' in line and '"content": ""' not in line:
                backend.kill()
                break
        events = sse(httpx.Response(200, content="\n".join(lines).encode()))
    errors = [json.loads(d) for e, d in events if e == "error"]
    assert len(errors) == 1 and errors[0]["error"]["code"] == "backend_error", events[-3:]
    assert "[DONE]" not in [d for _, d in events]
    assert httpx.get(f"{front.base}/health").status_code == 503

    backend.start()  # the same port: flashdesk needs no restart
    wait_ready(front.base, timeout=60)
    got = client_of(front.base).chat.completions.create(model=ALIAS, messages=MSG, temperature=0, max_tokens=8)
    assert got.choices[0].message.content


def test_health_and_models_asked_during_an_answer_do_not_end_it_on_llama_cpp_pythons_default(model_path, tmp_path):
    # llama-cpp-python's server ends a streaming answer whenever another request comes in (its default
    # --interrupt_requests True), GET /v1/models included: /health (every open page polls it) and /v1/models
    # must not ask it then
    b = Backend(model_path, tmp_path / "backend.log", interrupts=True)
    b.start()
    srv = front_for(b.base, tmp_path / "front")
    try:
        wait_ready(srv.base, timeout=60)
        body = {"model": ALIAS, "messages": MSG, "temperature": 0, "max_tokens": 64, "stream": True}
        events, asked = [], 0
        with httpx.stream("POST", f"{srv.base}/v1/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():  # as the chunks come (sse() reads the whole stream first)
                if line.startswith("event:"):
                    events.append((line[6:].strip(), ""))
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                events.append(("message", data))
                if asked < 3 and '"content": "' in data and '"content": ""' not in data:
                    health = httpx.get(f"{srv.base}/health", timeout=10).json()
                    assert health["backend"]["status"] == "up" and health["backend"]["models"] == [ALIAS]
                    listed = httpx.get(f"{srv.base}/v1/models", timeout=10).json()["data"]  # the same for a list
                    assert [m["id"] for m in listed] == [ALIAS]
                    asked += 1
        assert asked == 3 and all(event != "error" for event, _ in events), events[-3:]
        finish = [json.loads(d)["choices"][0]["finish_reason"] for e, d in events
                  if d and d != "[DONE]" and json.loads(d).get("choices")]
        assert finish[-1] == "length"
    finally:
        srv.stop()
        b.kill()
