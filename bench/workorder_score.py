"""Work-order extraction scorer: model outputs against the `expected` objects of the dev set.

Implements "How to score" of tests/data/README.md section 2: JSON validity, schema
validity (draft 2020-12, format checking on), per-field accuracy with the README's
normalisations, one-to-one item pairing, notes presence, the needs_review confusion
matrix, and the same numbers split by language (zh: the message has CJK characters; en).

It is not a runner: it never calls a model or builds prompts. Give it the outputs of a
run (raw texts, parsed dicts, or None for a failed call), one per case, in case order.

    .venv/bin/python -m bench workorder_score OUTPUTS.jsonl [--cases CASES.jsonl]
                                             [--schema SCHEMA.json] [--out OUT]

OUTPUTS.jsonl lines are {"id": "wo-dev-01", "output": "<raw text>"}; a case without a line
is scored as a failed call.

Scoring rules beyond the README, fixed here so runs compare:
- "Valid JSON" is strict: the whole text must be one JSON object (a ```json fence fails).
- Fields of a JSON object that fails the schema are still scored one by one; a wrong enum
  or a missing key is simply wrong there. Output that is not a JSON object is wrong on
  every field. A missing key means null; a blank string counts as null.
- Items: sim(pred, exp) = [size equal] + [colour equal] + Dice(description bigrams); the
  pairing maximises the summed sim (exhaustive, ties keep the earlier order; greedy
  beyond MAX_PERMUTATIONS). A description is right when Dice >= DESCRIPTION_DICE (0.5).
- Item field accuracy = paired items whose field matches / item slots, where a case has
  max(len(expected items), len(predicted items)) slots (predicted = 0 for non-JSON
  output). An unpaired expected item and an extra prediction are wrong on every field.
- needs_review confusion: positive = true. A prediction counts as positive only when it
  is the JSON value true, so an invalid output is "not flagged" (fn or tn) there, while
  the needs_review accuracy counts it wrong.

References: tests/data/README.md (section 2), tests/data/workorder.schema.json.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
import unicodedata
from pathlib import Path

from jsonschema import Draft202012Validator

from bench.datasets import WORKORDER_SCHEMA as DEFAULT_SCHEMA
from bench.datasets import WORKORDERS as DEFAULT_CASES  # the project's dev set, kept in the repository
from bench.lib import Record

EXACT_FIELDS = ("order_type", "priority", "delivery_method", "needs_review", "due_date")
CASE_FIELDS = ("customer_name", "contact") + EXACT_FIELDS + ("item_count",)
ITEM_FIELDS = ("description", "quantity", "unit", "color", "size", "material")
DESCRIPTION_DICE = 0.5       # loose enough for a paraphrase, strict enough to reject another item
MAX_PERMUTATIONS = 200_000   # exhaustive pairing up to about 20 predictions for 4 expected items

# The schema's normalised units, plus the English and CJK words models write instead.
UNIT_SYNONYMS = {
    "pcs": ("pcs", "pc", "piece", "pieces", "pce", "ea", "each", "件", "個", "个", "座"),
    "sheets": ("sheets", "sheet", "張", "张"),
    "copies": ("copies", "copy", "份"),
    "sets": ("sets", "set", "組", "组", "套"),
    "pairs": ("pairs", "pair", "雙", "双"),
    "boxes": ("boxes", "box", "盒", "箱"),
    "rolls": ("rolls", "roll", "捲", "卷"),
    "m": ("m", "meter", "meters", "metre", "metres", "米", "公尺"),
    "yd": ("yd", "yds", "yard", "yards", "碼"),
    "kg": ("kg", "kgs", "kilogram", "kilograms", "公斤"),
    "dozen": ("dozen", "dozens", "doz", "dz", "打"),
}
UNIT_OF = {w: unit for unit, words in UNIT_SYNONYMS.items() for w in words}

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
CONTACT_JUNK = re.compile(r"[\s\-\u2010-\u2015\u2212\uff0d.\u3002\uff0e()\uff08\uff09]")  # spaces, dashes, dots, parens


class _NotText:
    """A non-string where text belongs (a number as a colour): equal to nothing, itself included."""
    def __eq__(self, other):
        return False
    __hash__ = object.__hash__


NOT_TEXT = _NotText()


def has_text(v) -> bool:
    """notes presence: a blank string is as good as null."""
    return v is not None and not (isinstance(v, str) and not v.strip())


def language(text: str) -> str:
    return "zh" if CJK.search(text) else "en"


def parse_output(output) -> tuple[dict | None, str | None]:
    """(object, None) when the output is one JSON object, else (None, why not)."""
    if output is None:
        return None, "no output (failed call)"
    if isinstance(output, dict):
        return output, None
    try:
        obj = json.loads(output)
    except (TypeError, ValueError) as e:
        return None, f"invalid JSON: {e}"
    if not isinstance(obj, dict):
        return None, f"JSON is a {type(obj).__name__}, not an object"
    return obj, None


# --- normalisation: each returns a comparable value; None means null -------------------

def same(a, b) -> bool:
    """Exact JSON equality: true is not 1 (Python says it is), 500.0 is 500."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def norm_name(v):
    if v is None:
        return None
    if not isinstance(v, str):
        return NOT_TEXT
    s = " ".join(v.casefold().split())
    while s and unicodedata.category(s[-1]).startswith("P"):  # "Oakleaf Tea Co." == "Oakleaf Tea Co"
        s = s[:-1].rstrip()
    return s or None


def norm_contact(v):
    if v is None:
        return None
    if not isinstance(v, str):
        return NOT_TEXT
    parts = {CONTACT_JUNK.sub("", p).casefold() for p in re.split(r"[;\uff1b]", v)}
    return frozenset(parts - {""}) or None


def norm_text(v):
    """color / size / material: casefold, no whitespace at all ("50 x 80 mm" == "50x80mm")."""
    if v is None:
        return None
    if not isinstance(v, str):
        return NOT_TEXT
    return "".join(v.casefold().split()) or None


def norm_unit(v):
    s = norm_text(v)
    if s is None or s is NOT_TEXT:
        return s
    s = s.rstrip(".")
    return UNIT_OF.get(s, s)


def bigrams(v) -> set[str]:
    """Character bigrams of letters and digits only: works for Chinese, which has no spaces."""
    s = "".join(c for c in v.casefold() if c.isalnum()) if isinstance(v, str) else ""
    return {s[i:i + 2] for i in range(len(s) - 1)} or set(s)


def dice(a, b) -> float:
    x, y = bigrams(a), bigrams(b)
    if not x and not y:
        return 1.0 if norm_text(a) == norm_text(b) else 0.0
    return 2 * len(x & y) / (len(x) + len(y))


# --- items ------------------------------------------------------------------------------

def item_sim(p: dict, e: dict) -> float:
    return (norm_text(p.get("size")) == norm_text(e.get("size"))) \
        + (norm_text(p.get("color")) == norm_text(e.get("color"))) \
        + dice(p.get("description"), e.get("description"))


def pair_items(pred: list[dict], exp: list[dict]) -> list[tuple[int, int]]:
    """(pred index, expected index) pairs, one to one, maximising the summed similarity."""
    if not pred or not exp:
        return []
    sim = [[item_sim(p, e) for e in exp] for p in pred]  # [P, E]
    flip = len(pred) > len(exp)  # permute over the longer side, one slot per shorter-side item
    short, long_ = (len(exp), len(pred)) if flip else (len(pred), len(exp))
    s = (lambda i, j: sim[j][i]) if flip else (lambda i, j: sim[i][j])  # i: short side, j: long side
    if math.perm(long_, short) <= MAX_PERMUTATIONS:
        best, best_total = None, -1.0
        for perm in itertools.permutations(range(long_), short):  # identity first: ties keep order
            total = sum(s(i, j) for i, j in enumerate(perm))
            if total > best_total + 1e-12:
                best, best_total = perm, total
        pairs = list(enumerate(best))
    else:  # too many to try: take the most similar remaining pair, repeatedly
        pairs, used_i, used_j = [], set(), set()
        for _, i, j in sorted(((-s(i, j), i, j) for i in range(short) for j in range(long_))):
            if i not in used_i and j not in used_j:
                pairs.append((i, j))
                used_i.add(i)
                used_j.add(j)
    return sorted((j, i) if flip else (i, j) for i, j in pairs)


def item_field_ok(field: str, p: dict, e: dict) -> bool:
    if field == "quantity":
        return same(p.get("quantity"), e.get("quantity"))
    if field == "unit":
        return norm_unit(p.get("unit")) == norm_unit(e.get("unit"))
    if field == "description":
        return dice(p.get("description"), e.get("description")) >= DESCRIPTION_DICE
    return norm_text(p.get(field)) == norm_text(e.get(field))


def score_items(obj: dict | None, exp: list[dict]) -> tuple[bool, dict]:
    """(item count right, {slots, paired, <field>: right count}) for one case."""
    raw = obj.get("items") if obj is not None else None
    pred = [it for it in raw if isinstance(it, dict)] if isinstance(raw, list) else []
    junk = len(raw) - len(pred) if isinstance(raw, list) else 0  # non-objects: extra, unpairable
    pairs = pair_items(pred, exp)
    out = {"slots": max(len(exp), len(pred) + junk), "paired": len(pairs)}
    for f in ITEM_FIELDS:
        out[f] = sum(item_field_ok(f, pred[i], exp[j]) for i, j in pairs)
    return isinstance(raw, list) and len(raw) == len(exp), out


# --- cases and the report ----------------------------------------------------------------

def score_case(case: dict, output, validator: Draft202012Validator) -> dict:
    exp = case["expected"]
    obj, why = parse_output(output)
    errors = [why] if why else []
    if obj is not None:
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
            errors.append(f"schema: /{'/'.join(map(str, err.absolute_path))}: {err.message}")
    got = obj if obj is not None else {}
    fields = {
        "customer_name": norm_name(got.get("customer_name")) == norm_name(exp.get("customer_name")),
        "contact": norm_contact(got.get("contact")) == norm_contact(exp.get("contact")),
    }
    for f in EXACT_FIELDS:
        fields[f] = same(got.get(f), exp.get(f))
    fields["item_count"], items = score_items(obj, exp.get("items") or [])
    if obj is None:  # not a JSON object: wrong everywhere, nulls included
        fields = dict.fromkeys(fields, False)
    return {
        "id": case["id"], "lang": language(case["text"]),
        "json_valid": obj is not None, "schema_valid": obj is not None and len(errors) == 0,
        "errors": errors, "fields": fields, "items": items,
        "notes_presence": obj is not None and has_text(got.get("notes")) == has_text(exp.get("notes")),
        "needs_review": {"predicted": got.get("needs_review") is True, "expected": exp.get("needs_review") is True},
    }


def aggregate(rows: list[dict]) -> dict:
    """Fractions over the given per-case results (None where there is nothing to count)."""
    n = len(rows)
    frac = lambda k, d: k / d if d else None  # noqa: E731
    slots = sum(r["items"]["slots"] for r in rows)
    conf = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for r in rows:
        p, e = r["needs_review"]["predicted"], r["needs_review"]["expected"]
        conf[("t" if p == e else "f") + ("p" if p else "n")] += 1
    return {
        "n": n,
        "json_valid": frac(sum(r["json_valid"] for r in rows), n),
        "schema_valid": frac(sum(r["schema_valid"] for r in rows), n),
        "fields": {f: frac(sum(r["fields"][f] for r in rows), n) for f in CASE_FIELDS},
        "items": {"slots": slots, "paired": sum(r["items"]["paired"] for r in rows),
                  **{f: frac(sum(r["items"][f] for r in rows), slots) for f in ITEM_FIELDS}},
        "notes_presence": frac(sum(r["notes_presence"] for r in rows), n),
        "needs_review_confusion": conf,
    }


def score(cases: list[dict], outputs: list, schema: dict) -> dict:
    """The report for one run: overall, by language, and per case. outputs[i] is for cases[i]."""
    if len(cases) != len(outputs):
        raise ValueError(f"{len(cases)} cases but {len(outputs)} outputs: give one output (or None) per case")
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    rows = [score_case(c, o, validator) for c, o in zip(cases, outputs)]
    report = aggregate(rows)
    report["by_language"] = {lang: aggregate([r for r in rows if r["lang"] == lang]) for lang in ("zh", "en")}
    report["per_case"] = rows
    return report


def format_report(report: dict) -> str:
    """A text table: every accuracy overall, zh and en, then the needs_review matrix and misses."""
    cols = [("all", report)] + list(report.get("by_language", {}).items())
    pct = lambda v: "     -" if v is None else f"{100 * v:5.1f}%"  # noqa: E731
    lines = [f"{'':18}" + "".join(f"{name + ' (n=' + str(r['n']) + ')':>14}" for name, r in cols)]
    row = lambda label, get: lines.append(f"{label:18}" + "".join(f"{pct(get(r)):>14}" for _, r in cols))  # noqa: E731
    row("json_valid", lambda r: r["json_valid"])
    row("schema_valid", lambda r: r["schema_valid"])
    for f in CASE_FIELDS:
        row(f, lambda r, f=f: r["fields"][f])
    row("notes_presence", lambda r: r["notes_presence"])
    lines.append(f"{'item slots':18}" + "".join(f"{r['items']['slots']:>14}" for _, r in cols))
    for f in ITEM_FIELDS:
        row(f"  item.{f}", lambda r, f=f: r["items"][f])
    c = report["needs_review_confusion"]
    lines.append(f"needs_review confusion (positive = true): tp {c['tp']}  fp {c['fp']}  "
                 f"fn {c['fn']} (missed reviews)  tn {c['tn']}")
    misses = []
    for r in report.get("per_case", []):
        wrong = [f for f, ok in r["fields"].items() if not ok]
        wrong += [f"item.{f}" for f in ITEM_FIELDS if r["items"][f] < r["items"]["slots"]]
        if r["items"]["paired"] < r["items"]["slots"]:  # says why every item field misses at once
            wrong.append(f"(items paired {r['items']['paired']} of {r['items']['slots']} slots)")
        wrong += [] if r["notes_presence"] else ["notes_presence"]
        wrong = wrong if r["json_valid"] else ["every field (not a JSON object)"]
        if wrong or r["errors"]:
            misses.append(f"  {r['id']} [{r['lang']}] " + (", ".join(wrong) or "fields ok")
                          + "".join(f"\n      {e}" for e in r["errors"][:3]))
    if misses:
        lines += ["cases with a miss:"] + misses
    return "\n".join(lines)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def add_arguments(ap) -> None:
    ap.add_argument("outputs", type=Path, help='JSONL of {"id": ..., "output": "<raw model text>"}')
    ap.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    ap.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA)


def run(args) -> Record:
    for p in (args.outputs, args.cases, args.schema):
        if not p.is_file():
            raise SystemExit(f"{p} not found. HINT: the dev set lives in tests/data/; "
                             "pass --cases and --schema to use another copy")
    cases = read_jsonl(args.cases)
    by_id = {}
    for line in read_jsonl(args.outputs):
        by_id[line["id"]] = line.get("output")
    unknown = sorted(set(by_id) - {c["id"] for c in cases})
    if unknown:
        raise SystemExit(f"outputs for ids not in {args.cases}: {', '.join(unknown[:5])}. "
                         "HINT: pass the --cases file the run used")
    missing = [c["id"] for c in cases if c["id"] not in by_id]
    if missing:
        print(f"note: {len(missing)} case(s) have no output line and count as failed calls: "
              f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}", file=sys.stderr)
    report = score(cases, [by_id.get(c["id"]) for c in cases], json.loads(args.schema.read_text("utf-8")))
    print(format_report(report))
    return Record("workorder_score", {"outputs": str(args.outputs), "cases": str(args.cases),
                                      "schema": str(args.schema)},
                  figures=report)  # its samples are the report's per_case rows


def main(argv: list[str] | None = None) -> int:
    """The scorer as a function (`python -m bench workorder_score ARGS`); `--json PATH`, its flag from
    before the suite, is the suite's `--out PATH`."""
    from bench.suite import main as suite_main

    return suite_main(["workorder_score", *("--out" if a == "--json" else a for a in argv or sys.argv[1:])])
