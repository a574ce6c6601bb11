"""Structured output on /v1/chat/completions through the real `openai` client: JSON Schema and
JSON mode are enforced by the grammar, answers cut off by max_tokens are flagged, schemas the
grammar cannot enforce are refused with a 400 naming the keyword, and the answer is the same
whichever way the server speculates."""

from __future__ import annotations

import json

import httpx
import openai
import pydantic
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": ["string", "null"]},
        "quantity": {"type": ["integer", "null"], "minimum": 0},
        "colour": {"enum": ["red", "blue", "black", "white", "other"]},
        "due_date": {"type": ["string", "null"], "format": "date"},
    },
    "required": ["customer", "quantity", "colour", "due_date"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "order", "schema": SCHEMA, "strict": True}}
MSG = [{"role": "system", "content": "Extract the order as JSON."},
       {"role": "user", "content": "Hi, Oakleaf Tea here: 300 blue tote bags please, needed by 2026-04-10."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key="unused", max_retries=0, timeout=120)


def test_json_schema_answer_is_valid(client):
    r = client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_tokens=120,
                                       response_format=FORMAT)
    choice = r.choices[0]
    data = json.loads(choice.message.content)
    assert set(data) == set(SCHEMA["properties"]) and data["colour"] in SCHEMA["properties"]["colour"]["enum"]
    assert data["quantity"] is None or (isinstance(data["quantity"], int) and data["quantity"] >= 0)
    assert choice.finish_reason == "stop"
    assert choice.model_extra["structured_output"] == {"valid": True, "errors": []}


def test_json_object_mode_gives_an_object(client):
    r = client.chat.completions.create(model="smollm2", temperature=0, max_tokens=200, messages=[
        {"role": "user", "content": "Reply in JSON with the keys name and age: my cat Tom is 3 years old."}],
        response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].model_extra["structured_output"]["valid"] is True


class Order(pydantic.BaseModel):
    customer: str | None
    quantity: int | None
    colour: str


def test_openai_clients_parse_helper_works(client):
    """`client.chat.completions.parse` sends a strict schema made from a pydantic model."""
    r = client.chat.completions.parse(model="smollm2", messages=MSG, temperature=0, max_tokens=120,
                                      response_format=Order)
    assert isinstance(r.choices[0].message.parsed, Order)


def test_answer_cut_by_max_tokens_is_flagged(client):
    r = client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_tokens=5,
                                       response_format=FORMAT)
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    check = choice.model_extra["structured_output"]
    assert check["valid"] is False and "max_tokens" in check["errors"][0]


def test_streamed_answer_carries_the_check_on_its_last_chunk(client):
    chunks = list(client.chat.completions.create(model="smollm2", messages=MSG, temperature=0, max_tokens=120,
                                                 response_format=FORMAT, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    json.loads(text)
    last = [c for c in chunks if c.choices][-1].choices[0]
    assert last.finish_reason == "stop" and last.model_extra["structured_output"]["valid"] is True


@pytest.mark.parametrize("schema,keyword", [
    ({"type": "number", "multipleOf": 0.1}, "multipleOf"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "minProperties": 1}, "minProperties"),
    ({"type": "string", "pattern": "^(a)\\1$"}, "pattern"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "wizard"}, "wizard"),
])
def test_schemas_the_grammar_cannot_enforce_are_refused(client, schema, keyword):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2", messages=MSG, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    err = e.value.body
    assert keyword in err["message"] and err["param"].startswith("response_format")


def test_same_answer_whichever_way_it_speculates(client, server):
    answers = set()
    for mode in ("off", "lookup", "dflash", "auto"):
        r = httpx.post(f"{server.base}/v1/chat/completions", timeout=120, json={
            "model": "smollm2", "messages": MSG, "temperature": 0, "max_tokens": 120, "response_format": FORMAT,
            "speculative": {"mode": mode}})
        assert r.status_code == 200, r.text
        answers.add(r.json()["choices"][0]["message"]["content"])
    assert len(answers) == 1


COPY_FORMAT = {"type": "json_schema", "json_schema": {"name": "order", "schema": {
    "type": "object", "properties": {"customer": {"type": "string", "x-copy": True},
                                     "colour": {"type": ["string", "null"], "x-copy": True}},
    "required": ["customer", "colour"], "additionalProperties": False}}}


def test_copy_fields_are_copied_from_what_the_user_wrote(client):
    """x-copy (engine/grammar/copy.py): the values are stretches of the user's message, whatever
    the model would rather write; the system prompt is no source."""
    messages = [{"role": "system", "content": "Extract the order as JSON. The customer is ACME Corporation."},
                MSG[1]]
    r = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=80,
                                       response_format=COPY_FORMAT)
    data = json.loads(r.choices[0].message.content)
    assert data["customer"] and data["customer"] in MSG[1]["content"], data
    assert data["colour"] is None or data["colour"] in MSG[1]["content"], data
    assert r.choices[0].model_extra["structured_output"] == {"valid": True, "errors": []}


def test_copy_fields_with_nothing_to_copy_are_a_clear_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "   "}],
                                       max_tokens=40, response_format=COPY_FORMAT)
    assert "nothing to copy" in str(e.value) and "x-copy" in str(e.value)
