"""The schema corpus report: which real-world JSON Schemas the grammar enforces, and why the rest
are refused.

Compiles every schema of tests/data/schemas (Pydantic v2 models, OpenAI strict schemas, business
schemas) with this checkout's compile_response_format and reports the share enforced, per source
kind and overall, every refusal with the keyword and reason the 400 gives, and the compile time
and grammar size of each. Correctness is the test suite's (tests/engine/grammar/test_schema_corpus.py);
this is the figure.

    .venv/bin/python -m bench schema_corpus [--corpus DIR] [--out OUT]

--corpus lets an older checkout report on the same corpus (run it from that tree, with
PYTHONPATH=. and this corpus's folder) so the share before and after a change compares.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

from bench.datasets import EVAL_DATA
from bench.lib import Record
from engine.errors import InvalidRequest
from engine.grammar.schema import compile_response_format

CORPUS = EVAL_DATA / "schemas"


def report_on(corpus: Path) -> dict:
    rows = []
    for path in sorted(corpus.glob("*.json")):
        entry = json.loads(path.read_text("utf-8"))
        fmt = {"type": "json_schema", "json_schema": {"name": "corpus", "schema": entry["schema"]}}
        t0 = time.perf_counter()
        try:
            grammar, reason = compile_response_format(fmt).grammar, None
        except InvalidRequest as e:
            grammar, reason = None, e.message
        ms = (time.perf_counter() - t0) * 1000
        keyword = re.search(r'keyword "([^"]+)"', reason or "")
        kind = next((k for k in ("Pydantic v2", "OpenAI strict") if entry["source"].startswith(k)), "hand-written")
        rows.append({"schema": path.stem, "kind": kind, "enforced": grammar is not None,
                     "keyword": keyword[1] if keyword else None, "reason": reason, "compile_ms": round(ms, 1),
                     "grammar_bytes": len(grammar) if grammar else 0})
    share = {k: _share([r for r in rows if r["kind"] == k]) for k in ("Pydantic v2", "OpenAI strict", "hand-written")}
    return {"schemas": len(rows), "enforced": sum(r["enforced"] for r in rows), "share": _share(rows),
            "share_by_kind": share, "rows": rows}


def _share(rows: list) -> float:
    return round(sum(r["enforced"] for r in rows) / len(rows), 3) if rows else 0.0


def add_arguments(ap) -> None:
    ap.add_argument("--corpus", type=Path, default=CORPUS)


def run(args) -> Record:
    report = report_on(args.corpus)
    print(f"enforced {report['enforced']} of {report['schemas']} ({report['share']:.0%})")
    for kind, share in report["share_by_kind"].items():
        n = sum(r["kind"] == kind for r in report["rows"])
        print(f"  {kind:<14} {share:>5.0%} of {n}")
    print("refused:")
    for r in report["rows"]:
        if not r["enforced"]:
            print(f"  {r['schema']:<32} {r['keyword'] or '?':<18} {r['reason']}")
    slow = max(report["rows"], key=lambda r: r["compile_ms"])
    print(f"slowest compile: {slow['schema']} {slow['compile_ms']} ms; largest grammar: "
          f"{max(r['grammar_bytes'] for r in report['rows'])} bytes")
    rows = report.pop("rows")
    return Record("schema_corpus", {"corpus": str(args.corpus)}, samples=rows,
                  medians={"compile_ms": statistics.median(r["compile_ms"] for r in rows)}, figures=report)
