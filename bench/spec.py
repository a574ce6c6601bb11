"""Speculative decoding benchmark: every mode against plain decoding, per dev-prompt category.

One engine, one run; for each prompt the modes run back to back (A B C ... A B C ...),
greedy, the same token ids for every mode. Reports per category and mode: tau, tok/s
(median of per-prompt rates), ratio to plain (median of per-prompt, per-round ratios),
where the time went (draft, select, target, Python overhead), and whether every output
equalled plain (it must).

    .venv/bin/python -m bench spec [--draft PATH|auto|random] [--prompts 12] [--max-tokens 96]
                                   [--rounds 1] [--modes a,b]
    .venv/bin/python -m bench spec --rollback [--archs qwen35,gemma4] [--steps 48] [--rounds 5]

`--rollback` reports instead, per architecture the catalog offers (each on its tiny random
target), the share of a speculative step spent rolling back rejected tokens, and what a
host-memory state checkpoint would cost instead (bench/rollback_cost.py).

Without a trained draft (`--draft random`, the default when none is paired) the DFlash
rows measure the machinery's costs only: a random draft is almost never accepted.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from dataclasses import asdict

from bench import datasets, lib
from bench.lib import GREEDY, Record
from engine import Engine, EngineConfig
from engine.speculative.params import SpecParams



def modes(have_dflash: bool, block: int) -> dict[str, SpecParams]:
    """Fixed-block modes show the raw trade-off; "+chooser" rows let the chooser pick the block
    (or plain) every step, which is what `auto` does with the best drafter the engine has."""
    out = {"plain": SpecParams(mode="off"), f"lookup B={block}": SpecParams(mode="lookup", block=block),
           "lookup+chooser": SpecParams(mode="lookup")}
    if have_dflash:
        for sel in ("walk", "viterbi", "dp"):
            out[f"dflash-{sel} B={block}"] = SpecParams(mode="dflash", selector=sel, block=block)
        out["dflash+chooser"] = SpecParams(mode="dflash")
    out["auto"] = SpecParams(mode="auto")
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--draft", default="auto", help="auto (paired), random, none, or a path")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--modes", default="", help="comma-separated mode names to run (plain always runs)")
    ap.add_argument("--rollback", action="store_true", help="the rollback cost per architecture instead")
    ap.add_argument("--archs", default="", help="--rollback: comma-separated architectures (default: all)")
    ap.add_argument("--steps", type=int, default=48, help="--rollback: verify steps per side and round")
    ap.set_defaults(prompts=12, rounds=1)


def run(a) -> Record:
    model = lib.test_model(a.model or "smollm2")
    if a.rollback:
        return rollback(a, model.path)
    draft, draft_kind = lib.draft_for(model, a.draft, seed=0)
    eng = Engine.load(model.path, EngineConfig(n_ctx=2048, n_parallel=1, n_threads=a.threads, draft=draft))
    # else the chooser decodes plainly
    assert eng.speculation.curve_ready.wait(300), "the verify-cost curve was not measured"
    by_cat: dict[str, list] = defaultdict(list)
    for p in datasets.prompts(a.prompts):
        by_cat[p.get("category", "misc")].append(p)
    ms = modes("dflash" in eng.drafters, a.block)
    if a.modes:
        keep = {m.strip() for m in a.modes.split(",")} | {"plain"}
        ms = {k: v for k, v in ms.items() if k in keep}
    rows: dict[tuple[str, str], list[dict]] = defaultdict(list)
    mismatches = []
    try:
        eng.complete("warm up", sampling=GREEDY, max_tokens=4, speculative=SpecParams(mode="auto"))
        for cat, ps in by_cat.items():
            for p, rnd in [(p, r) for p in ps for r in range(a.rounds)]:
                ids = eng.tokenize_prompt(eng.render_chat(p["messages"]))
                n = min(p["max_tokens"], a.max_tokens)
                ref = None
                for name, spec in ms.items():  # A B C ... on the same prompt
                    t0 = time.perf_counter()
                    c = eng.complete(ids, sampling=GREEDY, max_tokens=n, speculative=spec)
                    wall = (time.perf_counter() - t0) * 1000.0 - c.usage.prefill_ms
                    ref = c.tokens if ref is None else ref
                    if c.tokens != ref:
                        mismatches.append((p["id"], name))
                    s = asdict(c.usage.speculation) if c.usage.speculation else {}
                    rows[(cat, name)].append({
                        "prompt": p["id"], "round": rnd, "tokens": len(c.tokens),
                        "decode_ms": c.usage.decode_ms, "wall_ms": wall,
                        "tau": s.get("tau"), "verifies": s.get("verifies", 0),
                        "draft_ms": s.get("draft_ms", 0.0), "select_ms": s.get("select_ms", 0.0),
                        "target_ms": s.get("verify_ms", 0.0) + s.get("plain_ms", 0.0)})
            print(f"{cat} done", file=sys.stderr)
    finally:
        eng.close()

    table = []
    for cat in list(by_cat) + ["all"]:
        plain_rate = None
        for name in ms:
            rs = [r for (c, m), lst in rows.items() if m == name and (cat == "all" or c == cat) for r in lst]
            rate = statistics.median(r["tokens"] / (r["decode_ms"] / 1000.0) for r in rs if r["decode_ms"] > 0)
            plain_rate = rate if name == "plain" else plain_rate
            # the ratio: median over (prompt, round) of this mode's rate over plain's in the same
            # round, so the machine's drift between rounds cancels
            plain_of = {(r["prompt"], r["round"]): r for (c, m), lst in rows.items() if m == "plain" for r in lst}
            paired = [(r["tokens"] / r["decode_ms"]) / (q["tokens"] / q["decode_ms"])
                      for r in rs if (q := plain_of[(r["prompt"], r["round"])])["decode_ms"] > 0 and r["decode_ms"] > 0]
            ver = sum(r["verifies"] for r in rs)
            spent = sum(r["decode_ms"] for r in rs) or 1.0
            shares = {k: round(100 * sum(r[k] for r in rs) / spent, 1) for k in ("draft_ms", "select_ms", "target_ms")}
            table.append({
                "category": cat, "mode": name, "tok_per_s": round(rate, 1),
                "ratio": round(statistics.median(paired), 3),
                "tau": round(sum((r["tau"] or 0) * r["verifies"] for r in rs) / ver, 2) if ver else None,
                "share_pct": shares | {"python_other": round(100 - sum(shares.values()), 1)} if ver else None,
            })
    params = {"draft": draft_kind, "block": a.block, "threads": a.threads, "max_tokens": a.max_tokens,
              "prompts": a.prompts, "rounds": a.rounds, "modes": list(ms)}
    rec = Record("spec", params, samples=[{"category": c, "mode": m, **r} for (c, m), lst in rows.items() for r in lst],
                 medians={r["mode"]: r["tok_per_s"] for r in table if r["category"] == "all"},
                 ratios={r["mode"]: r["ratio"] for r in table if r["category"] == "all" and r["mode"] != "plain"},
                 figures={"mismatches": mismatches, "table": table}, ok=not mismatches, markdown=markdown(table),
                 model={"path": model.path})
    print(f"{'category':20} {'mode':16} {'tok/s':>7} {'ratio':>6} {'tau':>5}  shares % (draft/select/target/other)")
    for r in table:
        sh = r["share_pct"]
        shares = f"{sh['draft_ms']}/{sh['select_ms']}/{sh['target_ms']}/{sh['python_other']}" if sh else "-"
        print(f"{r['category']:20} {r['mode']:16} {r['tok_per_s']:7.1f} {r['ratio']:6.3f} "
              f"{r['tau'] or '-':>5}  {shares}")
    print(f"mismatches against plain: {mismatches or 'none'}")
    return rec


def markdown(table: list[dict]) -> str:
    lines = ["| category | mode | tok/s | ratio to plain | tau |", "|---|---|---|---|---|"]
    lines += [f"| {r['category']} | {r['mode']} | {r['tok_per_s']} | {r['ratio']} | {r['tau'] or '-'} |" for r in table]
    return "\n".join(lines)


def rollback(a, tokenizer_from: str) -> Record:
    from bench import rollback_cost

    rows = rollback_cost.run(tokenizer_from, [x for x in a.archs.split(",") if x] or None, a.steps,
                             max(a.rounds, 3), a.threads)
    rollback_cost.print_table(rows)
    return Record("spec --rollback", {"block": rollback_cost.BLOCK, "threads": a.threads, "steps": a.steps,
                                      "rounds": max(a.rounds, 3)}, samples=rows)
