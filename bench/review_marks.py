"""What a work order's review marks are worth, field by field (issue 52, item 5).

Of the fields a parse marked for review, how many were wrong (precision); of the wrong fields, how
many were marked (recall). A field is right or wrong as bench/workorder_score.py scores it against
the dev case's expected answer: the case fields, and each predicted item's fields where the item is
paired with an expected one (an extra item is wrong on every field; an expected item nobody wrote
is wrong fields with nothing to mark but the order). A mark on a field is a reason or a warning
with that field; one without a field (the answer is cut off, items repeated) marks the whole order.

Then the same with the confidence marks redrawn at each threshold (a field whose value was written
through a token below it), the other checks kept: the frontier the threshold is chosen on.

Reads a workorders record (`python -m bench workorders`): its baseline run's answers, marks and
field confidences.

    .venv/bin/python -m bench review_marks [bench/out/workorders.json] [--cases CASES.jsonl]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.lib import OUT_DIR, Record
from bench.workorder_score import (DEFAULT_CASES, EXACT_FIELDS, ITEM_FIELDS, item_field_ok, norm_contact, norm_name,
                                   pair_items, parse_output, read_jsonl, same)

CASE_FIELDS = ("customer_name", "contact") + tuple(f for f in EXACT_FIELDS if f != "needs_review")
UNCERTAIN = "uncertain"  # review.py's code for a low-confidence value: redrawn by the sweep
THRESHOLDS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def field_truth(case: dict, output) -> tuple[dict[str, bool], int]:
    """(path -> right, for each field the answer wrote or should have; wrong fields of expected
    items nobody wrote)."""
    exp, (got, _) = case["expected"], parse_output(output)
    got = got or {}
    out = {"customer_name": norm_name(got.get("customer_name")) == norm_name(exp.get("customer_name")),
           "contact": norm_contact(got.get("contact")) == norm_contact(exp.get("contact"))}
    out |= {f: same(got.get(f), exp.get(f)) for f in CASE_FIELDS[2:]}
    pred = [it if isinstance(it, dict) else {} for it in got.get("items") or []] \
        if isinstance(got.get("items"), list) else []
    expected = exp.get("items") or []
    pairs = dict(pair_items(pred, expected))
    for i, item in enumerate(pred):
        for f in ITEM_FIELDS:
            out[f"items[{i}].{f}"] = i in pairs and item_field_ok(f, item, expected[pairs[i]])
    return out, (len(expected) - len(pairs)) * len(ITEM_FIELDS)


def tally(cases: list[dict], runs: list[dict], outputs: dict, threshold: float | None,
          orders: bool = True) -> dict:
    """Marked, wrong and marked-wrong fields over the cases; `threshold` None keeps the run's own
    marks, else the confidence marks are redrawn at it; `orders` False leaves whole-order marks out."""
    n = {"fields": 0, "wrong": 0, "marked": 0, "marked_wrong": 0, "orders": 0, "orders_flagged": 0,
         "flagged_with_a_wrong_field": 0, "orders_with_a_wrong_field": 0}
    by_id = {r["case"]: r for r in runs}
    for case in cases:
        run = by_id[case["id"]]
        truth, missed = field_truth(case, outputs.get(case["id"]))
        marks = [m for m in run.get("marks", []) if threshold is None or m["code"] != UNCERTAIN]
        whole = orders and any(m["field"] is None for m in marks)
        on = {m["field"] for m in marks if m["field"] is not None}
        if threshold is not None:
            on |= {path for path, p in run.get("confidence", {}).items() if p < threshold}
        wrong_fields = missed
        for path, right in truth.items():
            marked = whole or path in on
            n["fields"] += 1
            n["wrong"] += not right
            n["marked"] += marked
            n["marked_wrong"] += marked and not right
            wrong_fields += not right
        n["fields"] += missed
        n["wrong"] += missed
        n["marked"] += missed * whole
        n["marked_wrong"] += missed * whole
        flagged = whole or bool(on & set(truth))
        n["orders"] += 1
        n["orders_flagged"] += flagged
        n["orders_with_a_wrong_field"] += wrong_fields > 0
        n["flagged_with_a_wrong_field"] += flagged and wrong_fields > 0
    n["precision"] = n["marked_wrong"] / n["marked"] if n["marked"] else None
    n["recall"] = n["marked_wrong"] / n["wrong"] if n["wrong"] else None
    return n


def by_code(cases: list[dict], runs: list[dict], outputs: dict) -> dict[str, list[int]]:
    """code -> [fields it marked, of them wrong] (field-level marks only)."""
    out: dict[str, list[int]] = {}
    by_id = {r["case"]: r for r in runs}
    for case in cases:
        truth, _ = field_truth(case, outputs.get(case["id"]))
        for m in by_id[case["id"]].get("marks", []):
            if m["field"] in truth:
                cell = out.setdefault(m["code"], [0, 0])
                cell[0] += 1
                cell[1] += not truth[m["field"]]
    return out


def null_copies(cases: list[dict], outputs: dict, template: str) -> list[int]:
    """[copy fields left null, of them wrong]: what a `not_found` mark would be worth."""
    from engine.grammar import copy
    from server.workorders.review import _values
    from server.workorders.templates import TemplateStore, load_file
    tpl = load_file(Path(template), "user") if template.endswith(".json") else TemplateStore(None).get(template)
    n = [0, 0]
    for case in cases:
        truth, _ = field_truth(case, outputs.get(case["id"]))
        got, _ = parse_output(outputs.get(case["id"]))
        for pattern in copy.fields(tpl.schema) if got else ():
            for where, value in _values(got, pattern):
                if value is None and where in truth:
                    n[0] += 1
                    n[1] += not truth[where]
    return n


def add_arguments(ap) -> None:
    ap.add_argument("run", nargs="?", default=str(OUT_DIR / "workorders.json"), help="a workorders record")
    ap.add_argument("--cases", default=str(DEFAULT_CASES))


def run(a) -> Record:
    data = json.loads(Path(a.run).read_text("utf-8"))
    runs, outputs = data["runs"][data["baseline"]], data["outputs"]
    cases = [c for c in read_jsonl(Path(a.cases)) if c["id"] in outputs]
    if not any(r.get("confidence") for r in runs):
        print("this run kept no field confidences (a workorders run before they were saved): "
              "the sweep is left out", file=sys.stderr)
    pct = lambda v: "    -" if v is None else f"{100 * v:4.0f}%"  # noqa: E731
    print(f"{data['template']} at {data.get('commit')}, {len(cases)} cases")
    print(f"\n{'marks':22} {'fields':>6} {'wrong':>6} {'marked':>6} {'m+wrong':>7} {'precision':>9} {'recall':>6}"
          f" {'orders flagged (with a wrong field)':>36}")
    rows = [("as the run marked", None, True), ("  fields only", None, False)]
    if any(r.get("confidence") for r in runs):
        rows += [(f"confidence < {t:.2f}", t, o) for t in THRESHOLDS for o in (True, False)]
    tallies = []
    for label, t, whole in rows:
        n = tally(cases, runs, outputs, t, whole)
        tallies.append({"marks": label.strip(), "threshold": t, "whole_order": whole, **n})
        label = label if whole or t is None else "  fields only"
        print(f"{label:22} {n['fields']:6} {n['wrong']:6} {n['marked']:6} {n['marked_wrong']:7} "
              f"{pct(n['precision']):>9} {pct(n['recall']):>6} "
              f"{n['orders_flagged']:>22} of {n['orders']} ({n['flagged_with_a_wrong_field']})")
    print("\nfield marks by code: marked, of them wrong")
    codes = by_code(cases, runs, outputs)
    for code, (marked, wrong) in sorted(codes.items(), key=lambda kv: -kv[1][0]):
        print(f"  {code:18} {marked:4} {wrong:4}")
    marked, wrong = null_copies(cases, outputs, data["template"])
    print(f"copy fields left null (a not_found mark): {marked}, of them wrong {wrong}")
    whole = {}
    for r in runs:
        for code in {m["code"] for m in r.get("marks", []) if m["field"] is None}:
            whole[code] = whole.get(code, 0) + 1
    print("whole-order marks by code: orders")
    for code, n in sorted(whole.items(), key=lambda kv: -kv[1]):
        print(f"  {code:18} {n:4}")
    return Record("review_marks", {"run": a.run, "cases": a.cases, "template": data["template"],
                                   "run_commit": data.get("commit")},
                  samples=tallies, figures={"by_code": codes, "null_copies": {"marked": marked, "wrong": wrong},
                                            "whole_order_marks": whole})
