"""Work-order extraction benchmark: schema validity, field accuracy, and speed per speculation mode.

Runs the API's own pipeline (server/workorders: template prompt, grammar from the schema,
greedy, review) on the dev cases, without HTTP. For each case the modes run back to back
(A B C D, the order rotating from case to case) on the same token ids; every mode must
write exactly plain decoding's tokens. Reports, per mode: decode tok/s (median of cases),
the ratio to plain (median of per-case decode-time ratios: same tokens, so time ratio =
speed ratio), the end-to-end ratio (prefill included), tau; and from the plain run:
JSON/schema validity and per-field accuracy (bench/workorder_score.py, against
tests/data/workorder.schema.json). Its record (bench/out/workorders.json) is what review_marks and
workorder_tokens read.

    .venv/bin/python -m bench workorders [--modes off,lookup,grammar,grammar+lookup,grammar+lookup+dflash,auto]
        [--limit 24] [--threads 2]
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bench import datasets, lib
from bench.lib import Record
from bench.workorder_score import format_report, score
from engine import Completion, Engine, EngineConfig, RequestHandle
from engine.speculative.params import SpecParams
from server.workorders import extract
from server.workorders.templates import TemplateStore, load_file


def add_arguments(ap) -> None:
    ap.add_argument("--cases", default=str(datasets.WORKORDERS))
    ap.add_argument("--schema", default=str(datasets.WORKORDER_SCHEMA), help="the schema the scorer checks")
    ap.add_argument("--template", default="work_order", help="a template name, or a template file to try")
    ap.add_argument("--modes", default="off,lookup,grammar,grammar+lookup,grammar+lookup+dflash,auto")
    ap.add_argument("--limit", type=int, default=0, help="first N cases only")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--draft", default="auto", help="auto (the paired draft), none, or a path")


def run(a) -> Record:
    cases = datasets.workorders(a.cases)
    cases = cases[:a.limit] if a.limit else cases
    model = lib.test_model(a.model or "smollm2")
    draft = model.draft_path if a.draft == "auto" else None if a.draft == "none" else a.draft
    eng = Engine.load(model.path, EngineConfig(n_ctx=a.ctx, n_parallel=1, n_threads=a.threads, draft=draft))
    # else every mode decodes plainly
    assert eng.speculation.curve_ready.wait(300), "the verify-cost curve was not measured"
    template = (load_file(Path(a.template), "user") if a.template.endswith(".json")
                else TemplateStore(None).get(a.template))
    modes = [m for m in a.modes.split(",") if m == "off" or m == "auto" or m in eng.drafters]
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    outputs, mismatches = [], []
    try:
        for i, case in enumerate(cases):
            sent = dt.date.fromisoformat(case["sent"])
            ref = None
            for m in modes[i % len(modes):] + modes[:i % len(modes)]:  # rotate who goes first
                req = extract.request_for(eng, template, case["text"], sent, spec=SpecParams(mode=m))
                t0 = time.perf_counter()
                done = Completion.collect(iter(_run(eng, req)))
                wall = (time.perf_counter() - t0) * 1000.0
                if ref is None:
                    ref = done.tokens
                elif done.tokens != ref:
                    mismatches.append((case["id"], m))
                u, s = done.usage, asdict(done.usage.speculation) if done.usage.speculation else {}
                runs[m].append({"case": case["id"], "tokens": len(done.tokens), "decode_ms": u.decode_ms,
                                "prefill_ms": u.prefill_ms, "wall_ms": wall, "finish": done.finish_reason,
                                "tau": s.get("tau"), "verifies": s.get("verifies", 0), "used": s.get("mode"),
                                "closed_early": u.closed_early, "cached_tokens": u.cached_tokens,
                                "by_source": s.get("committed_by_source", {})})
                if m == modes[0]:
                    out = extract.assess(eng, template, done, case["text"], sent)
                    outputs.append(out.result if out.valid else done.text)
                    runs[m][-1] |= {"valid": out.valid, "needs_review": out.review.needs_review,
                                    "reasons": out.review.reasons, "sources": out.sources,
                                    "confidence": {k: round(v, 4) for k, v in out.confidence.items()},
                                    "marks": [{"field": d["field"], "code": d["code"], "flag": flag}
                                              for flag, ds in ((True, out.review.details),
                                                               (False, out.review.warnings)) for d in ds]}
            print(f"{case['id']}: {len(ref)} tokens", file=sys.stderr)
    finally:
        eng.close()

    schema = json.loads(Path(a.schema).read_text("utf-8"))
    report = score(cases, outputs, schema)
    base = {r["case"]: r for r in runs[modes[0]]}
    speed = []
    for m in modes:
        rs = runs[m]
        ver = sum(r["verifies"] for r in rs)
        speed.append({
            "mode": m,
            "tok_per_s": round(statistics.median(r["tokens"] / (r["decode_ms"] / 1e3)
                                                 for r in rs if r["decode_ms"]), 1),
            "ratio": round(statistics.median(base[r["case"]]["decode_ms"] / r["decode_ms"]
                                             for r in rs if r["decode_ms"]), 3),
            "ratio_end_to_end": round(statistics.median(base[r["case"]]["wall_ms"] / r["wall_ms"] for r in rs), 3),
            "tau": round(sum((r["tau"] or 0) * r["verifies"] for r in rs) / ver, 2) if ver else None,
            "used": sorted({r["used"] for r in rs if r["used"]}),
            "share": _shares(rs),
        })
    print(format_report(report))
    print(f"\n{'mode':21} {'tok/s':>7} {'ratio':>6} {'e2e':>6} {'tau':>5}  {'used':21} committed tokens by source")
    for r in speed:
        share = " ".join(f"{k} {v:.0%}" for k, v in r["share"].items())
        print(f"{r['mode']:21} {r['tok_per_s']:7.1f} {r['ratio']:6.3f} {r['ratio_end_to_end']:6.3f} "
              f"{r['tau'] or '-':>5}  {','.join(r['used']):21} {share}")
    finished = sum(r["finish"] == "stop" for r in runs[modes[0]])
    closed = sum(r["closed_early"] for r in runs[modes[0]])
    print(f"ended before max_tokens: {finished}/{len(cases)} ({closed} closed early by the grammar); "
          f"mismatches against {modes[0]}: {mismatches or 'none'}")
    return Record("workorders", {"template": a.template, "cases": len(cases), "threads": a.threads, "ctx": a.ctx,
                                 "draft": draft, "modes": modes},
                  samples=[{"mode": m, **{k: r[k] for k in ("case", "tokens", "decode_ms", "prefill_ms", "wall_ms")}}
                           for m in modes for r in runs[m]],  # the timings; "runs" has all a run kept
                  medians={r["mode"]: r["tok_per_s"] for r in speed},
                  ratios={r["mode"]: r["ratio"] for r in speed if r["mode"] != modes[0]},
                  figures={"template": a.template, "cases": len(cases), "baseline": modes[0], "speed": speed,
                           "mismatches": mismatches, "score": report, "runs": runs,
                           "outputs": dict(zip((c["id"] for c in cases), outputs))},  # the baseline's answers
                  ok=not mismatches, model={"path": model.path})


def _shares(runs: list[dict]) -> dict[str, float]:
    """Of the tokens the speculating steps committed, the share each source wrote (the target:
    verify bonus tokens and plain steps)."""
    total: dict[str, int] = {}
    for r in runs:
        for k, v in r["by_source"].items():
            total[k] = total.get(k, 0) + v
    n = sum(total.values())
    return {k: round(v / n, 3) for k, v in sorted(total.items(), key=lambda kv: -kv[1])} if n else {}


def _run(eng: Engine, req) -> RequestHandle:
    handle = RequestHandle(req)
    eng.submit(req)
    return handle
