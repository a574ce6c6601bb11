"""The work-order checks without a model: value spans and field confidence, review reasons,
repeated items, templates as files, and the prompt's field guide."""

from __future__ import annotations

import datetime as dt
import json
import math
from types import SimpleNamespace

import pytest

from engine.errors import InvalidRequest
from server.workorders import prompt
from server.workorders.review import review, without_repeats
from server.workorders.spans import field_confidence, value_spans
from server.workorders.templates import TemplateStore, from_schema, load_file

SENT = dt.date(2026, 3, 5)
MESSAGE = "Hi, Oakleaf Tea (07700 900455) here: 2,500 kraft mailer boxes, one dozen samples, by 2026-04-10."


def order(**kw) -> dict:
    base = {"customer_name": "Oakleaf Tea", "contact": "07700 900455", "order_type": "new_order",
            "items": [{"description": "mailer box", "quantity": 2500, "unit": "pcs"},
                      {"description": "sample", "quantity": 12, "unit": "pcs"}],
            "due_date": "2026-04-10", "priority": "normal", "needs_review": False}
    return base | kw


REQUIRED = ["customer_name", "items", "items[].quantity", "due_date"]


def test_value_spans_follow_the_json_text():
    text = '{ "a": 1, "b": [ {"c": "x\\"y"}, null, true ], "d": {"e": -2.5e3}, "f": "中文" }'
    spans = {path: text[a:b] for a, b, path in value_spans(text)}
    assert spans == {"a": "1", "b[0].c": '"x\\"y"', "b[1]": "null", "b[2]": "true", "d.e": "-2.5e3", "f": '"中文"'}


def test_field_confidence_takes_the_least_sure_token_of_each_value():
    text = '{"q": 12, "s": "中文"}'
    raw = text.encode()
    cut = [0, 6, 8, 9, 16, 19, len(raw)]  # a token boundary inside the first Chinese character
    pieces = [raw[a:b] for a, b in zip(cut, cut[1:])]
    lp = [math.log(p) for p in (0.9, 0.2, 0.95, 0.99, 0.5, 0.8)]
    conf = field_confidence(text, pieces, lp)
    assert conf["q"] == pytest.approx(0.2) and conf["s"] == pytest.approx(0.5)
    assert field_confidence(text, pieces[:-1], lp[:-1]) == {}  # pieces that do not spell the text


def test_a_clean_order_needs_no_review():
    r = review(order(), [], REQUIRED, MESSAGE, SENT, {"due_date": 0.9})
    assert not r.needs_review and r.reasons == [] and r.warnings == []


@pytest.mark.parametrize("change,reason", [
    ({"due_date": None}, "missing due_date"),
    ({"customer_name": ""}, "missing customer_name"),
    ({"items": []}, "missing items"),
    ({"items": [{"description": "box", "quantity": None}]}, "missing items[0].quantity"),
    ({"needs_review": True}, "the answer itself says needs_review"),
    ({"due_date": "2026-03-01"}, "before the message was sent"),
    ({"due_date": "2026-02-30"}, "not a calendar date"),
    ({"items": [{"description": "box", "quantity": 3000}]}, "items[0].quantity 3000 does not appear"),
    ({"contact": "0912-345-678"}, "contact '0912-345-678' does not appear"),
])
def test_each_problem_is_a_reason(change, reason):
    r = review(order(**change), [], REQUIRED, MESSAGE, SENT, {})
    assert r.needs_review and any(reason in x for x in r.reasons), r.reasons


def test_numbers_in_words_and_with_commas_count_as_written():
    r = review(order(items=[{"description": "sample", "quantity": 12}, {"description": "box", "quantity": 2500}]),
               [], REQUIRED, MESSAGE, SENT, {})
    assert not r.needs_review, r.reasons


def test_an_invalid_answer_is_flagged_with_its_errors():
    r = review(None, ["the answer reached max_tokens"], REQUIRED, MESSAGE, SENT, {})
    assert r.needs_review and "max_tokens" in r.reasons[0]


def test_low_confidence_flags_required_fields_and_warns_on_others():
    r = review(order(), [], REQUIRED, MESSAGE, SENT, {"items[1].quantity": 0.1, "priority": 0.2})
    assert any("uncertain items[1].quantity" in x for x in r.reasons)
    assert not any("priority" in x for x in r.reasons)
    assert {w["field"] for w in r.warnings} == {"items[1].quantity", "priority"}


def test_a_name_not_in_the_message_is_a_warning():
    r = review(order(customer_name="Oak Leaf Teas Ltd"), [], REQUIRED, MESSAGE, SENT, {})
    assert [w["field"] for w in r.warnings] == ["customer_name"] and not r.needs_review


def test_a_copy_field_left_empty_is_marked_where_it_is_not_already_missing():
    copies = ["customer_name", "contact", "items[].color"]
    items = [{"description": "mailer box", "quantity": 2500, "unit": "pcs", "color": "kraft"},
             {"description": "sample", "quantity": 12, "unit": "pcs", "color": None}]
    r = review(order(contact=None, customer_name=None, items=items), [], REQUIRED, MESSAGE, SENT, {}, copies=copies)
    # the required customer_name is a missing reason already; the others are field warnings
    assert [(w["field"], w["code"]) for w in r.warnings] == [("contact", "not_found"), ("items[1].color", "not_found")]
    assert [d["code"] for d in r.details] == ["missing"]
    assert not review(order(), [], REQUIRED, MESSAGE, SENT, {}, copies=["contact"]).warnings


def test_repeated_items_are_removed_once_in_a_row():
    a, b = {"description": "box"}, {"description": "lid"}
    out, n = without_repeats({"items": [a, a, a, b, a], "notes": "x"})
    assert out["items"] == [a, b, a] and n == 2 and out["notes"] == "x"


def test_builtin_templates_load_and_their_guides_cover_every_field():
    found, broken = TemplateStore(None).all()
    assert set(found) == {"work_order", "quote_request", "complaint"} and broken == {}
    for t in found.values():
        guide = "\n".join(prompt.field_guide(t.schema))
        for name in t.schema["properties"]:
            assert f"- {name}" in guide
        assert t.constraint.grammar and all(f.split("[]")[0].split(".")[0] in t.schema["properties"]
                                            for f in t.required)
    msgs = prompt.messages(found["work_order"], "  500 flyers  ", SENT, "zh-TW")
    assert msgs[-1]["content"] == "Sent: 2026-03-05 (Thursday)\nLanguage: Traditional Chinese\n\n500 flyers"
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]  # its worked example first
    assert "items[].quantity" in msgs[0]["content"]


def test_user_template_files_are_checked(tmp_path):
    good = {"name": "mine", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    (tmp_path / "mine.json").write_text(json.dumps(good))
    (tmp_path / "work_order.json").write_text(json.dumps(good | {"name": "work_order", "title": "Ours"}))
    bad = {"wrong_name.json": good, "extra.json": good | {"name": "extra", "colour": 1},
           "nonobject.json": {"name": "nonobject", "schema": {"type": "string"}},
           "unenforceable.json": {"name": "unenforceable", "schema": {
               "type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.25}}}}}
    for name, body in bad.items():
        (tmp_path / name).write_text(json.dumps(body))
    found, broken = TemplateStore(tmp_path).all()
    assert found["mine"].source == "user" and found["work_order"].title == "Ours"  # a user file replaces a built-in
    assert set(broken) == set(bad)
    assert "multipleOf" in broken["unenforceable.json"] and "match the file name" in broken["wrong_name.json"]
    with pytest.raises(ValueError):
        load_file(tmp_path / "extra.json", "user")
    with pytest.raises(InvalidRequest) as e:
        TemplateStore(tmp_path).get("nonobject")
    assert e.value.param == "template"


def test_a_custom_schema_is_compiled_or_refused():
    t = from_schema({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}})
    assert t.name == "custom" and t.constraint.validate('{"a": 3}') == []
    with pytest.raises(InvalidRequest) as e:
        from_schema({"type": "object", "properties": {"a": {"not": {}}}})
    assert e.value.param == "schema" and "not" in e.value.message


def test_examples_must_match_the_schema_and_become_turns(tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    good = {"name": "ex", "schema": schema, "guide": "brief",
            "examples": [{"text": "a is five", "sent_date": "2026-01-02", "output": {"a": 5}}]}
    (tmp_path / "ex.json").write_text(json.dumps(good))
    t = load_file(tmp_path / "ex.json", "user")
    msgs = prompt.messages(t, "a is six", SENT)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert json.loads(msgs[2]["content"]) == {"a": 5} and msgs[1]["content"].endswith("a is five")
    for bad in ({"text": "x", "sent_date": "2026-01-02", "output": {"a": "five"}},
                {"text": "x", "sent_date": "soon", "output": {"a": 5}}, {"text": "x"}):
        (tmp_path / "ex.json").write_text(json.dumps(good | {"examples": [bad]}))
        with pytest.raises(ValueError, match="examples"):
            load_file(tmp_path / "ex.json", "user")


def test_an_example_copies_what_its_copy_fields_hold(tmp_path):
    """A template's worked example teaches the model to copy: its x-copy values must be in its text."""
    schema = {"type": "object", "properties": {"who": {"type": ["string", "null"], "x-copy": True},
                                               "tel": {"type": ["string", "null"], "x-copy": {"separator": "; "}}}}
    text = "Lin here, 0912-345-678 or 02-1234"
    cases = [({"who": "Lin", "tel": "0912-345-678; 02-1234"}, True), ({"who": None, "tel": None}, True),
             ({"who": "Mr Lin", "tel": None}, False), ({"who": "Lin", "tel": "0912-345-678, 02-1234"}, False)]
    for output, ok in cases:
        example = {"text": text, "sent_date": "2026-01-02", "output": output}
        body = {"name": "ex", "schema": schema, "examples": [example]}
        (tmp_path / "ex.json").write_text(json.dumps(body))
        if ok:
            load_file(tmp_path / "ex.json", "user")
        else:
            with pytest.raises(ValueError, match="x-copy field, and it is not copied"):
                load_file(tmp_path / "ex.json", "user")


def _assess(message: str, answer: dict, reason: str = "stop"):
    from engine import Completion, Usage
    from engine.api import LOCAL
    from server.workorders.extract import assess

    t = TemplateStore(None).get("work_order")
    engine = SimpleNamespace(capabilities=LOCAL)  # the answer has no tokens to read pieces of: no model needed
    return assess(engine, t, Completion(json.dumps(answer), [], reason, Usage()), message, SENT)


def test_the_date_field_comes_from_the_message_words():
    wo = {"customer_name": "Oakleaf Tea", "contact": None, "order_type": "new_order", "items": [],
          "due_date": "2026-01-01", "priority": "normal", "delivery_method": "unknown", "notes": None,
          "needs_review": False}
    out = _assess("Oakleaf Tea: need them next Wednesday please", wo)
    assert out.valid and out.result["due_date"] == "2026-03-11"  # sent Thursday 2026-03-05
    assert any(w["field"] == "due_date" and "2026-01-01" in w["message"] for w in out.review.warnings)
    out2 = _assess("Oakleaf Tea: please deliver on 3/20, or if possible 3/12", wo)
    assert out2.result["due_date"] == "2026-03-12" and out2.result["needs_review"] is True
    assert any("several dates" in r for r in out2.review.reasons)
    assert _assess("Oakleaf Tea, no date given", wo).result["due_date"] is None


def test_a_cut_answer_is_invalid_and_flagged():
    out = _assess("anything", {"customer_name": "x"}, reason="length")
    assert not out.valid and out.result is None and out.review.needs_review
    assert "max_tokens" in out.errors[0]
