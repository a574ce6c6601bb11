"""The work-order API through httpx against a real `flashdesk serve` with its own home folder:
parsing with built-in, user and custom templates, bad input, the audit trail with its
filters and exports, and a kill -9 of the server that loses no stored parse."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path

import httpx
import jsonschema
import pytest

from conftest import EVAL_DATA, ServerProcess, wait_ready

WORKORDER_SCHEMA = EVAL_DATA / "workorder.schema.json"
ORDER = ("Walk-in: Lin's Bakery (Mr Lin, 0912-345-678) wants 500 A5 flyers, full colour, 150gsm gloss. "
         "Pick up Friday.")
SMALL = {"type": "object", "properties": {"customer": {"type": ["string", "null"], "maxLength": 60},
                                          "quantity": {"type": ["integer", "null"], "minimum": 0}},
         "required": ["customer", "quantity"], "additionalProperties": False}
USER_TEMPLATE = {"name": "sample_request", "title": "Sample request", "description": "Who wants which samples.",
                 "instructions": "Extract who asks for samples and how many.", "schema": SMALL,
                 "review": {"required": ["customer"]}}


@pytest.fixture(scope="module")
def home(tmp_path_factory, store) -> Path:
    h = tmp_path_factory.mktemp("wo-home")
    (h / "models").symlink_to(store.home / "models", target_is_directory=True)  # the model, not its audit log
    (h / "templates").mkdir()
    (h / "templates" / "sample_request.json").write_text(json.dumps(USER_TEMPLATE), "utf-8")
    (h / "templates" / "broken.json").write_text("{not json", "utf-8")
    return h


@pytest.fixture(scope="module")
def srv(home):
    s = ServerProcess(home, "--ctx", "4096", "--parallel", "2")
    wait_ready(s.base)
    yield s
    s.stop()


def parse(srv, **body) -> httpx.Response:
    return httpx.post(f"{srv.base}/v1/workorders/parse", json=body, timeout=300)


@pytest.fixture(scope="module")
def order(srv):
    r = parse(srv, text=ORDER, sent_date="2026-01-12", language="en")
    assert r.status_code == 200, r.text
    return r.json()


def test_a_work_order_parses_to_valid_json(order):
    assert order["object"] == "workorder.parse" and order["template"] == "work_order"
    assert order["finish_reason"] == "stop" and order["valid"] is True and order["errors"] == []
    schema = json.loads(WORKORDER_SCHEMA.read_text("utf-8"))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(order["result"])
    assert isinstance(order["needs_review"], bool) and isinstance(order["review_reasons"], list)
    assert order["needs_review"] == bool(order["review_reasons"])
    assert order["usage"]["timings"]["decode_ms"] > 0 and order["usage"]["completion_tokens"] > 10
    assert order["field_confidence"] and all(0 <= p <= 1 for p in order["field_confidence"].values())


def test_custom_schema_and_speculation_modes_agree(srv):
    results = []
    for mode in ("off", "lookup", "auto"):
        r = parse(srv, text=ORDER, sent_date="2026-01-12", schema=SMALL, speculative={"mode": mode},
                  instructions="Extract the customer and the quantity.")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["template"] == "custom" and body["valid"] is True
        jsonschema.validate(body["result"], SMALL)
        results.append(body["result"])
    assert results[0] == results[1] == results[2]
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the same prompt as the run before


COPYING = {"type": "object", "properties": {"customer": {"type": ["string", "null"], "x-copy": True},
                                            "phone": {"type": ["string", "null"], "x-copy": {"separator": "; "}}},
           "required": ["customer", "phone"], "additionalProperties": False}


def test_copy_fields_say_where_in_the_message_they_come_from(srv):
    """x-copy values are stretches of the message, and `sources` gives their character spans in the
    text as sent (leading blank lines included), the same again from the audit log."""
    text = "\n\n  " + ORDER
    r = parse(srv, text=text, sent_date="2026-01-12", schema=COPYING,
              instructions="Copy the customer's name and phone numbers from the message.")
    assert r.status_code == 200, r.text
    body = r.json()
    copied = {k: v for k, v in body["result"].items() if v is not None}
    assert copied, body["result"]  # the message has both: the model copies at least one
    assert set(body["sources"]) == set(copied)
    for key, value in copied.items():
        assert "; ".join(text[a:b] for a, b in body["sources"][key]) == value
    assert httpx.get(f"{srv.base}/v1/workorders/{body['id']}").json()["sources"] == body["sources"]


def test_templates_are_listed_with_user_files_and_broken_ones(srv):
    r = httpx.get(f"{srv.base}/v1/workorders/templates").json()
    names = {t["name"]: t for t in r["data"]}
    assert {"work_order", "quote_request", "complaint", "sample_request"} <= set(names)
    assert names["sample_request"]["source"] == "user" and names["work_order"]["source"] == "builtin"
    assert [e["file"] for e in r["errors"]] == ["broken.json"]
    one = httpx.get(f"{srv.base}/v1/workorders/templates/complaint").json()
    assert one["schema"]["type"] == "object" and "problem" in one["schema"]["properties"]
    missing = httpx.get(f"{srv.base}/v1/workorders/templates/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "template_not_found"


def test_a_user_template_parses(srv):
    r = parse(srv, text="Hi, this is Kelly from Corner Cafe, could we get 3 sample aprons?", template="sample_request",
              sent_date="2026-03-02")
    assert r.status_code == 200, r.text
    jsonschema.validate(r.json()["result"], SMALL)


@pytest.mark.parametrize("body,param,code", [
    ({"text": ""}, "text", None),
    ({"text": "   \n "}, "text", None),
    ({"text": "x" * 1_000_000}, "text", "text_too_long"),
    ({"text": "order 500 flyers " * 1500}, "text", "context_length_exceeded"),
    ({"text": ORDER, "template": "nope"}, "template", None),
    ({"text": ORDER, "template": "broken"}, "template", None),
    ({"text": ORDER, "template": "work_order", "schema": SMALL}, "schema", None),
    ({"text": ORDER, "schema": {"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}},
     "schema", None),
    ({"text": ORDER, "schema": {"type": "string"}}, "schema", None),
    ({"text": ORDER, "instructions": "do it"}, "instructions", None),
    ({"text": ORDER, "sent_date": "last tuesday"}, "sent_date", None),
    ({"text": ORDER, "colour": "red"}, "colour", None),
])
def test_bad_input_gets_a_clear_400(srv, body, param, code):
    r = parse(srv, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"] and err["param"] == param, err
    if code:
        assert err["code"] == code
    assert httpx.get(f"{srv.base}/health").status_code == 200


def test_the_audit_trail_lists_filters_and_exports(srv, order):
    base = f"{srv.base}/v1/workorders"
    listed = httpx.get(base, params={"limit": 100}).json()
    assert listed["total"] >= 5 and order["id"] in {r["id"] for r in listed["data"]}
    one = httpx.get(f"{base}/{order['id']}").json()
    assert one["input_text"] == ORDER and one["output"] == order["result"] and one["template"] == "work_order"
    customs = httpx.get(base, params={"template": "custom"}).json()
    # three speculation modes and the copy-fields parse
    assert customs["total"] == 4 and all(r["template"] == "custom" for r in customs["data"])
    assert httpx.get(base, params={"q": "Lin's Bakery"}).json()["total"] >= 4
    flagged = httpx.get(base, params={"needs_review": "true"}).json()["data"]
    assert all(r["needs_review"] for r in flagged)
    csv_r = httpx.get(f"{base}/export", params={"format": "csv"})
    assert csv_r.status_code == 200 and "attachment" in csv_r.headers["content-disposition"]
    assert csv_r.content.startswith(b"\xef\xbb\xbf")  # BOM: Excel reads the file as UTF-8
    rows = list(csv.DictReader(io.StringIO(csv_r.content.decode("utf-8-sig"))))
    assert len(rows) == listed["total"] and order["id"] in {r["id"] for r in rows}
    lines = httpx.get(f"{base}/export", params={"format": "jsonl", "template": "custom"}).text.splitlines()
    assert len(lines) == customs["total"] and all(json.loads(line)["template"] == "custom" for line in lines)
    assert httpx.get(base, params={"since": "yesterday-ish"}).status_code == 400
    assert httpx.get(f"{base}/export", params={"format": "xml"}).status_code == 400
    assert httpx.get(f"{base}/wo_nothing").status_code == 404


def test_kill_9_loses_no_stored_parse(srv, home, order):
    """Every parse that got its answer is in the log after the server dies without a goodbye."""
    ids = {r["id"] for r in httpx.get(f"{srv.base}/v1/workorders", params={"limit": 1000}).json()["data"]}
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=30)
    again = ServerProcess(home, "--ctx", "4096")
    try:
        wait_ready(again.base)
        after = {r["id"] for r in httpx.get(f"{again.base}/v1/workorders", params={"limit": 1000}).json()["data"]}
        assert ids <= after and order["id"] in after
    finally:
        again.stop()

