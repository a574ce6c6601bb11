"""bench/workorder_score.py without a model: the expected objects score 100%, and a set of
deliberately broken outputs scores exactly what the rules in the module header say.

References: tests/data/README.md section 2 ("How to score").
"""

from __future__ import annotations

import copy
import json

import pytest

from bench.workorder_score import (DEFAULT_CASES, DEFAULT_SCHEMA, ITEM_FIELDS, dice, format_report, main,
                                   norm_contact, norm_name, norm_unit, pair_items, score)

@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(DEFAULT_SCHEMA.read_text("utf-8"))


def item(description, quantity, unit="pcs", color=None, size=None, material=None) -> dict:
    return {"description": description, "quantity": quantity, "unit": unit, "color": color, "size": size,
            "material": material}


def order(**kw) -> dict:
    base = {"customer_name": None, "contact": None, "order_type": "new_order", "items": [], "due_date": None,
            "priority": "normal", "delivery_method": "unknown", "notes": None, "needs_review": False}
    return {**base, **kw}


# Four small cases (2 en, 2 zh) and one broken output for each; the README's fields, small enough to count by hand.
CASES = [
    {"id": "t-a", "text": "Polos for Greenfield Hardware, 6 S and 10 M, navy.", "expected": order(
        customer_name="Greenfield Hardware", contact="accounts@greenfield-hw.example; (03) 555-0142",
        items=[item("polo shirt, white logo left chest", 6, color="navy", size="S"),
               item("polo shirt, white logo left chest", 10, color="navy", size="M")],
        due_date="2026-02-27", delivery_method="delivery", notes="Logo file from last year.")},
    {"id": "t-b", "text": "巷口早餐店：菜單 A3 十張，護貝", "expected": order(
        customer_name="巷口早餐店", items=[item("菜單價目表，護貝", 10, unit="sheets", size="A3")],
        needs_review=True, notes="尺寸待確認")},
    {"id": "t-c", "text": "Fix the zipper on my black jacket. Kelly 0955 123 456", "expected": order(
        customer_name="Kelly", contact="0955 123 456", order_type="repair",
        items=[item("bomber jacket, replace broken zipper", 1, color="black")], delivery_method="pickup")},
    {"id": "t-d", "text": "宏昇機械 支架 1200 個，SUS304", "expected": order(
        customer_name="宏昇機械", contact="03-4567-8910 分機 21", priority="urgent",
        items=[item("不鏽鋼固定支架（圖號 HS-2207）", 1200, material="SUS304")], needs_review=True)},
]


def broken_outputs() -> list:
    a = copy.deepcopy(CASES[0]["expected"])
    a["items"] = [a["items"][1], a["items"][0], item("apron", 5)]  # swapped order + one extra item
    a["items"][0]["unit"] = "pieces"                               # synonym of pcs
    a["contact"] = "03 555 0142;  Accounts@Greenfield-HW.example"   # other order, punctuation and case
    c = copy.deepcopy(CASES[2]["expected"])
    c["order_type"] = "fix"                                        # not in the enum: schema fails, field wrong
    d = copy.deepcopy(CASES[3]["expected"])
    del d["needs_review"]                                          # required key missing: means null, wrong
    d["customer_name"] = " 宏昇機械 。"                              # trailing punctuation and spaces ignored
    d["items"][0]["unit"] = "個"                                    # CJK synonym of pcs
    return [json.dumps(a), '```json\n{"order_type": "new_order"}\n```', json.dumps(c, ensure_ascii=False), d]


def test_the_expected_objects_score_100_percent(schema):
    rep = score(CASES, [c["expected"] for c in CASES], schema)
    assert rep["json_valid"] == rep["schema_valid"] == rep["notes_presence"] == 1.0
    assert set(rep["fields"].values()) == {1.0}
    assert rep["items"]["slots"] == rep["items"]["paired"] == 5
    assert {rep["items"][f] for f in ITEM_FIELDS} == {1.0}
    assert rep["needs_review_confusion"] == {"tp": 2, "fp": 0, "fn": 0, "tn": 2}
    assert all(not r["errors"] for r in rep["per_case"])


def test_the_dev_set_scores_100_percent_as_objects_and_as_text(schema):
    cases = [json.loads(line) for line in DEFAULT_CASES.read_text("utf-8").splitlines() if line.strip()]
    for outputs in ([c["expected"] for c in cases], [json.dumps(c["expected"], ensure_ascii=False) for c in cases]):
        rep = score(cases, outputs, schema)
        assert rep["n"] == len(cases) and rep["json_valid"] == rep["schema_valid"] == 1.0
        assert set(rep["fields"].values()) == {1.0} and rep["notes_presence"] == 1.0
        assert {rep["items"][f] for f in ITEM_FIELDS} == {1.0}
        assert rep["items"]["slots"] == rep["items"]["paired"] == sum(len(c["expected"]["items"]) for c in cases)
        conf = rep["needs_review_confusion"]
        assert conf["fp"] == conf["fn"] == 0 and conf["tp"] == sum(c["expected"]["needs_review"] for c in cases)
        assert rep["by_language"]["zh"]["n"] + rep["by_language"]["en"]["n"] == rep["n"]
        assert rep["by_language"]["zh"]["n"] >= 1 and rep["by_language"]["en"]["n"] >= 1


def test_broken_outputs_get_exactly_the_expected_partial_scores(schema):
    rep = score(CASES, broken_outputs(), schema)
    assert rep["n"] == 4
    assert rep["json_valid"] == 3 / 4     # the fenced output is not one JSON object
    assert rep["schema_valid"] == 1 / 4   # only case a: c has a bad enum, d a missing required key
    assert rep["fields"] == {
        "customer_name": 3 / 4, "contact": 3 / 4, "order_type": 2 / 4, "priority": 3 / 4,
        "delivery_method": 3 / 4, "needs_review": 2 / 4, "due_date": 3 / 4,
        "item_count": 2 / 4,              # a has an extra item, b is invalid
    }
    # slots: a 3 (2 expected + 1 extra), b 1, c 1, d 1; every paired field right.
    assert rep["items"] == {"slots": 6, "paired": 4, **{f: 4 / 6 for f in ITEM_FIELDS}}
    assert rep["notes_presence"] == 3 / 4
    assert rep["needs_review_confusion"] == {"tp": 0, "fp": 0, "fn": 2, "tn": 2}  # b invalid, d missing the key

    en, zh = rep["by_language"]["en"], rep["by_language"]["zh"]
    assert (en["n"], zh["n"]) == (2, 2)
    assert en["fields"]["order_type"] == zh["fields"]["order_type"] == 1 / 2
    assert (en["items"]["slots"], en["items"]["quantity"]) == (4, 3 / 4)
    assert (zh["items"]["slots"], zh["items"]["quantity"]) == (2, 1 / 2)

    a, b, c, d = rep["per_case"]
    assert a["schema_valid"] and not a["errors"] and a["fields"]["contact"] and not a["fields"]["item_count"]
    assert not b["json_valid"] and not b["schema_valid"] and b["errors"][0].startswith("invalid JSON")
    assert not any(b["fields"].values()) and b["items"]["slots"] == 1
    assert c["json_valid"] and not c["schema_valid"] and any("order_type" in e for e in c["errors"])
    assert not c["fields"]["order_type"] and c["fields"]["priority"]
    assert any("needs_review" in e for e in d["errors"]) and d["fields"]["customer_name"]
    assert d["items"]["unit"] == 1


def test_language_split_and_confusion_add_up(schema):
    rep = score(CASES, broken_outputs(), schema)
    parts = rep["by_language"].values()
    assert sum(p["n"] for p in parts) == rep["n"]
    assert sum(p["items"]["slots"] for p in parts) == rep["items"]["slots"]
    for r in [rep, *parts]:
        assert sum(r["needs_review_confusion"].values()) == r["n"]
    for f, acc in rep["fields"].items():  # overall = n-weighted mean of the two languages
        assert acc == pytest.approx(sum(p["fields"][f] * p["n"] for p in parts) / rep["n"])


def test_failed_calls_and_non_objects_are_wrong_everywhere(schema):
    rep = score(CASES, [None, "[1, 2]", "not json", {"items": "none"}], schema)
    assert rep["json_valid"] == 1 / 4 and rep["schema_valid"] == 0
    assert rep["items"]["paired"] == 0 and rep["fields"]["item_count"] == 0
    assert rep["per_case"][0]["errors"] == ["no output (failed call)"]
    assert "list" in rep["per_case"][1]["errors"][0]
    with pytest.raises(ValueError, match="one output"):
        score(CASES, [None], schema)


def test_normalisations():
    assert norm_name("  Oakleaf   Tea Co.") == norm_name("oakleaf tea co")
    assert norm_name("") is None and norm_name(None) is None
    assert norm_contact("(03) 555-0142; a.b@x.example") == norm_contact("A.B@X.example ;03 555 0142")
    assert norm_contact("0912-345-678") != norm_contact("0912-345-679")
    assert norm_contact(" ; ") is None
    assert [norm_unit(u) for u in ("Pieces", "pc", "件", "張", "份", "套", "雙", "箱", "捲", None)] == \
        ["pcs", "pcs", "pcs", "sheets", "copies", "sets", "pairs", "boxes", "rolls", None]
    assert norm_unit(5) != norm_unit(5)  # a number is no unit, not even equal to itself


def test_descriptions_match_loosely_with_a_threshold_of_one_half():
    assert dice("roll-up banner with stand", "Roll-up banners with stands") >= 0.5
    assert dice("不鏽鋼固定支架（圖號 HS-2207）", "不鏽鋼固定支架 HS-2207") >= 0.5
    assert dice("flyer, full colour both sides", "roll-up banner with stand") < 0.5


def test_pairing_is_the_best_total_match_not_the_order():
    exp = [item("t-shirt", 10, size="S"), item("t-shirt", 25, size="M"), item("cap", 5, color="red")]
    pred = [item("cap", 5, color="red"), item("t-shirt", 25, size="M"), item("t-shirt", 10, size="S")]
    assert pair_items(pred, exp) == [(0, 2), (1, 1), (2, 0)]
    assert pair_items(pred[:1], exp) == [(0, 2)]
    assert pair_items(pred + [item("mug", 1)], exp) == [(0, 2), (1, 1), (2, 0)]
    assert pair_items([], exp) == []


def test_cli_prints_the_table_and_writes_json(schema, tmp_path, capsys):
    cases_path, schema_path, outs = tmp_path / "cases.jsonl", tmp_path / "schema.json", tmp_path / "outs.jsonl"
    cases_path.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in CASES), "utf-8")
    schema_path.write_text(json.dumps(schema), "utf-8")
    lines = [{"id": c["id"], "output": o if isinstance(o, str) else json.dumps(o, ensure_ascii=False)}
             for c, o in zip(CASES, broken_outputs())]
    outs.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines[:3]), "utf-8")  # t-d missing
    assert main([str(outs), "--cases", str(cases_path), "--schema", str(schema_path),
                 "--json", str(tmp_path / "r.json")]) == 0
    out, err = capsys.readouterr()
    assert "item_count" in out and "tp 0" in out and "t-b [zh]" in out
    assert "t-d" in err  # a case without an output line is reported and counted as a failed call
    rep = json.loads((tmp_path / "r.json").read_text("utf-8"))
    assert rep["json_valid"] == 2 / 4 and rep["per_case"][3]["errors"] == ["no output (failed call)"]
    assert format_report(rep) == out.rstrip("\n")
