"""The OpenAI-compatible API through the real `openai` client against `flashdesk serve`."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from conftest import TEST_CTX
from engine.speculative.params import MAX_BLOCK, MODES, SELECTORS

MSG = [{"role": "user", "content": "Name three things a print shop sells."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key="unused", max_retries=0, timeout=120)


def stream_text(client, **kw) -> tuple[str, list]:
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == ["smollm2"]


def test_stream_and_non_stream_are_equal_at_temperature_0(client):
    kw = dict(model="smollm2", messages=MSG, temperature=0, max_tokens=60)
    whole = client.chat.completions.create(**kw)
    text, chunks = stream_text(client, **kw, stream_options={"include_usage": True})
    assert whole.choices[0].message.content == text and len(text) > 10
    assert whole.choices[0].finish_reason == chunks[-2].choices[0].finish_reason
    assert chunks[0].choices[0].delta.role == "assistant"
    usage = chunks[-1].usage  # the final usage chunk has no choices
    assert chunks[-1].choices == [] and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens > 10


def test_usage_counts_and_length_limit(client):
    r = client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_completion_tokens=5)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 5


def test_a_developer_message_is_the_system_prompt_for_a_template_without_that_role(client):
    # SmolLM2's template has no "developer" branch: the engine's one rule renders it as the system
    # prompt (engine/llama/chat_template.py), so the answer is the system prompt's, token for token.
    ask = [{"role": "user", "content": "Hi"}]
    kw = dict(model="smollm2", temperature=0, max_tokens=8)
    dev = client.chat.completions.create(messages=[{"role": "developer", "content": "Be brief."}, *ask], **kw)
    sys = client.chat.completions.create(messages=[{"role": "system", "content": "Be brief."}, *ask], **kw)
    assert dev.usage.prompt_tokens == sys.usage.prompt_tokens
    assert dev.choices[0].message.content == sys.choices[0].message.content


def test_stop_strings_also_across_token_boundaries(client):
    base = client.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5, 6,", max_tokens=24,
                                     temperature=0).choices[0].text
    assert "10, 11" in base
    # "0, 1" spans several tokens ("0", ",", " ", "1") and must still stop the output.
    r = client.completions.create(model="smollm2", prompt="1, 2, 3, 4, 5, 6,", max_tokens=24, temperature=0,
                                  stop=["0, 1", "never"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[: base.index("0, 1")]
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="smollm2", prompt="1, 2, 3, 4, 5, 6,", max_tokens=24, temperature=0, stop="0, 1", stream=True))
    assert streamed == r.choices[0].text


def test_seed_reproduces_sampling(client):
    kw = dict(model="smollm2", messages=MSG, temperature=0.9, top_p=0.9, seed=7, max_tokens=30)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_extension_and_penalty_parameters_are_accepted(client):
    r = client.chat.completions.create(model="smollm2", messages=MSG, temperature=0.5, max_tokens=8,
                                       presence_penalty=0.5, frequency_penalty=0.5,
                                       extra_body={"top_k": 20, "min_p": 0.05})
    assert r.usage.completion_tokens >= 1


def test_four_concurrent_streams_each_equal_their_sequential_result(client):
    prompts = [[{"role": "user", "content": c}] for c in (
        "Write a short thank-you note to a customer.", "請用中文寫一句問候語。",
        "List the steps to print a poster.", "What is 12 + 30?")]
    alone = [client.chat.completions.create(model="smollm2", messages=m, temperature=0, max_tokens=48)
             .choices[0].message.content for m in prompts]
    together = [None] * 4

    def run(i):
        together[i] = stream_text(client, model="smollm2", messages=prompts[i], temperature=0, max_tokens=48)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone


@pytest.mark.parametrize("kw,status,code", [
    (dict(messages=[]), 400, None),
    (dict(messages=MSG, temperature=5), 400, None),
    (dict(messages=MSG, max_tokens=0), 400, None),
    (dict(messages=MSG, response_format={"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "number", "multipleOf": 0.5}}}), 400, None),
    (dict(messages=MSG, response_format={"type": "xml"}), 400, None),
    (dict(messages=[{"role": "wizard", "content": "hi"}]), 400, None),
    (dict(messages=MSG, max_tokens=TEST_CTX + 1), 400, "context_length_exceeded"),
    (dict(messages=[{"role": "user", "content": "word " * (TEST_CTX + 50)}]), 400, "context_length_exceeded"),
])
def test_invalid_requests_get_openai_errors(client, kw, status, code):
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="smollm2", **kw)
    assert e.value.status_code == status
    err = e.value.body
    assert err["message"] and err["type"] == "invalid_request_error"
    if code:
        assert err["code"] == code


def test_unknown_model_and_route_are_404(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4", messages=MSG)
    assert e.value.body["code"] == "model_not_found"
    r = httpx.get(f"{server.base}/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"


def test_malformed_json_is_400_and_server_keeps_serving(client, server):
    r = httpx.post(f"{server.base}/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert client.models.list().data


def test_body_too_large_is_413(server):
    big = b'{"model": "smollm2", "messages": [{"role": "user", "content": "' + b"a" * (9 << 20) + b'"}]}'
    r = httpx.post(f"{server.base}/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: the limit still holds
        for _ in range(10):
            yield b"x" * (1 << 20)

    r = httpx.post(f"{server.base}/v1/chat/completions", content=chunked())
    assert r.status_code == 413


def test_health(server):
    r = httpx.get(f"{server.base}/health").json()
    assert r["status"] == "ready" and r["model"] == "smollm2" and r["engine"]["slots"] == 4
    sp = r["speculation"]
    assert (sp["modes"], sp["selectors"], sp["max_block"]) == (list(MODES), list(SELECTORS), MAX_BLOCK)
    assert sp["default"] == "auto" and sp["exact"] is True and sp["exact_why"] and sp["enabled"] is True
    # SmolLM2's prompt rows are the same in any decode (engine/chunks.py): reuse to the token
    assert sp["prompt_chunk"] is None and "measured the same in any decode" in sp["prompt_why"]
