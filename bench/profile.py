"""Profile of the speculative step on this machine's backend (CPU, CUDA or Metal build).

What it measures, in one run, for one target model and a random DFlash 2 draft:
  1. the target's verify-cost curve c(k), k = 1..16 rows of one sequence;
  2. batch invariance: logits of the same tokens decoded one at a time and as verify
     batches of 2, 4, 8 and 16 rows (max |difference|, argmax disagreements). Greedy
     speculative output equals plain output exactly only where these are bit-identical;
  3. where a speculative step's time goes (draft incl. KV injection and lattice
     read-back, select, target verify, the rest = Python) for fixed blocks of each
     selector and for prompt lookup, and whether every output equalled plain decoding.
The random draft is almost never accepted: speeds here are the machinery's costs, not
a speed-up.

    .venv/bin/python -m bench profile [--model PATH] [--prompts 6] [--max-tokens 64] [--parallel 4]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench import datasets, lib
from bench.lib import GREEDY, Record
from engine import Engine, EngineConfig
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.speculative.params import SELECTORS, SpecParams
from engine.speculative.verify import target_logits
from gguf_tools.dflash import write_random_draft

import llama_cpp  # after engine, whose __init__ picks the build it loads


def batch_invariance(model: Model, prompt: list[int], n_threads: int, n: int = 16) -> dict:
    """Decode `n` tokens after the prompt one by one, then again as batches of k rows."""
    ctx = Context(model, ContextConfig(n_ctx_seq=1024, n_seq=1, n_batch=512, n_threads=n_threads))
    try:
        b = ctx.batch
        b.clear()
        for i, tok in enumerate(prompt):
            b.add(tok, i, 0, logits=False)
        ctx.decode(b)
        base = len(prompt)
        toks = [int(t) for t in np.random.default_rng(0).integers(100, model.n_vocab - 100, n)]
        single = []
        for j, tok in enumerate(toks):  # [n, V] one row per decode
            b.clear()
            row = b.add(tok, base + j, 0, logits=True)
            ctx.decode(b)
            single.append(target_logits(ctx, [row])[0])
        ctx.forget(0, base)
        out, by_k = {}, {}
        for k in (2, 3, 4, 8, 16):
            got_k = []
            for start in range(0, n, k):
                b.clear()
                rows = [b.add(tok, base + start + j, 0, logits=True) for j, tok in enumerate(toks[start:start + k])]
                ctx.decode(b)
                got_k.extend(target_logits(ctx, rows))
            ctx.forget(0, base)  # the batches of k rows ran back to back over the same n tokens
            by_k[k] = np.stack(got_k)  # [n, V]
            ref = np.stack(single)
            out[str(k)] = {"max_abs_diff": float(np.max(np.abs(by_k[k] - ref))),
                           "argmax_flips": int(np.sum(by_k[k].argmax(1) != ref.argmax(1))), "rows": n,
                           # is a k-row batch bit-identical to a 2-row one (one kernel family)?
                           "vs_2_rows_max_abs_diff": float(np.max(np.abs(by_k[k] - by_k[2])))}
        return out
    finally:
        ctx.close()


def add_arguments(ap) -> None:
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=1, help="also run the prompts concurrently with this many")
    ap.set_defaults(prompts=6)


def run(a) -> Record:
    model_path = lib.model_path(a.model)
    prompts = datasets.prompts(a.prompts)
    result: dict = {"system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
                    "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload())}

    model = Model(model_path)
    try:
        probe = model.tokenize(prompts[0]["messages"][-1]["content"])[:200]
        result["batch_invariance"] = batch_invariance(model, probe, a.threads)
    finally:
        model.close()
    print("batch invariance:", json.dumps(result["batch_invariance"]), flush=True)

    draft = str(Path(tempfile.mkdtemp()) / "random-dflash2.gguf")
    write_random_draft(draft, model_path, seed=0)
    eng = Engine.load(model_path, EngineConfig(n_ctx=2048, n_parallel=max(1, a.parallel), n_threads=a.threads,
                                               draft=draft))
    modes = {"plain": SpecParams(mode="off"), "lookup B=8": SpecParams(mode="lookup", block=8)}
    if "dflash" in eng.drafters:
        for sel in SELECTORS:
            modes[f"dflash-{sel} B=8"] = SpecParams(mode="dflash", selector=sel, block=8)
        modes["dflash-walk B=4"] = SpecParams(mode="dflash", selector="walk", block=4)
    modes["auto"] = SpecParams(mode="auto")
    rows: dict[str, list[dict]] = {m: [] for m in modes}
    plain_out: dict[str, list[int]] = {}
    mismatches = []
    try:
        eng.complete("warm up", sampling=GREEDY, max_tokens=4, speculative=SpecParams(mode="auto"))
        for p in prompts:
            ids = eng.tokenize_prompt(eng.render_chat(p["messages"]))
            ref = None
            for name, spec in modes.items():  # A B C ... on the same prompt
                c = eng.complete(ids, sampling=GREEDY, max_tokens=a.max_tokens, speculative=spec)
                ref = c.tokens if ref is None else ref
                plain_out.setdefault(p["id"], c.tokens)
                if c.tokens != ref:
                    mismatches.append([p["id"], name])
                s = asdict(c.usage.speculation) if c.usage.speculation else {}
                rows[name].append({"tokens": len(c.tokens), "decode_ms": c.usage.decode_ms,
                                   "verifies": s.get("verifies", 0), "tau": s.get("tau"),
                                   "draft_ms": s.get("draft_ms", 0.0), "select_ms": s.get("select_ms", 0.0),
                                   "target_ms": s.get("verify_ms", 0.0) + s.get("plain_ms", 0.0)})
        if a.parallel > 1:  # the same prompts, a.parallel at a time, against the sequential plain output
            for name in ("plain", "dflash-walk B=8", "lookup B=8"):
                if name not in modes:
                    continue
                hs = [(p, eng.generate(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=a.max_tokens,
                                       speculative=modes[name])) for p in prompts]
                for p, h in hs:
                    if [t for ev in h for t in ev.tokens] != plain_out[p["id"]]:
                        mismatches.append([p["id"], f"{name} x{a.parallel}"])
        costs = eng.speculation.costs
        result["cost_curve_ms"] = [round(x, 3) for x in costs.curve()] if costs.ready else None
    finally:
        eng.close()

    table = []
    plain_rate = statistics.median(r["tokens"] / (r["decode_ms"] / 1e3) for r in rows["plain"])
    for name, rs in rows.items():
        rate = statistics.median(r["tokens"] / (r["decode_ms"] / 1e3) for r in rs)
        spent = sum(r["decode_ms"] for r in rs) or 1.0
        ver = sum(r["verifies"] for r in rs)
        shares = {k: round(100 * sum(r[k] for r in rs) / spent, 2) for k in ("draft_ms", "select_ms", "target_ms")}
        table.append({"mode": name, "tok_per_s": round(rate, 1), "ratio": round(rate / plain_rate, 3),
                      "verifies": ver, "ms_per_step": round(spent / ver, 3) if ver else None,
                      "share_pct": shares | {"python_other": round(100 - sum(shares.values()), 2)} if ver else None})
    result |= {"table": table, "mismatches": mismatches}
    print(f"cost curve c(1..16) ms: {result['cost_curve_ms']}")
    print(f"{'mode':18} {'tok/s':>7} {'ratio':>6} {'ms/step':>8}  shares % (draft/select/target/other)")
    for r in table:
        sh = r["share_pct"]
        s = f"{sh['draft_ms']}/{sh['select_ms']}/{sh['target_ms']}/{sh['python_other']}" if sh else "-"
        print(f"{r['mode']:18} {r['tok_per_s']:7.1f} {r['ratio']:6.3f} {r['ms_per_step'] or '-':>8}  {s}")
    print(f"mismatches against plain: {mismatches or 'none'}")
    return Record("profile", {"max_tokens": a.max_tokens, "prompts": len(prompts), "threads": a.threads,
                              "parallel": a.parallel, "draft": "random (costs only)"},
                  samples=[{"mode": m, **r} for m, rs in rows.items() for r in rs],
                  medians={r["mode"]: r["tok_per_s"] for r in table},
                  ratios={r["mode"]: r["ratio"] for r in table if r["mode"] != "plain"},
                  figures=result, ok=not mismatches, model={"path": model_path})
