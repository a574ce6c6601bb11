"""Draft-recipe A/B: train several variants of the draft on the same data at the same time and
compare their held-out trajectory tau.

Each arm is one `TrainConfig` change against the first arm (the base). All arms start together,
one process and one thread each, with the same seed (so the same batches in the same order
where the change does not alter sampling) and the same wall-clock budget: they share the
machine's noise, which on a busy 2-core machine is the only fair way to alternate them. Each
arm ends with the trainer's held-out evaluation (the same validation sequences for all); the
report gives per arm the steps done, the best and final offline tau per selector, and the
difference to the base.

    .venv/bin/python -m bench draft_ab --data DIR [DIR ...] --minutes 20 \\
        --arm base '{}' --arm kl '{"kl_weight": 0.5}' --arm dpace '{"position_weights": "dpace"}'

The overrides are TrainConfig fields (draft_training/train.py), plus "data": a list of data
folders that arm trains on instead of --data. That is how a data change (sampled answers,
self-written prompts) is A/B tested: each arm its own folders, of equal answer tokens. Each
arm's held-out set is then its own, so offline tau no longer compares them. `--online N`
exports every arm's draft once all have trained and decodes N of the dev prompts
(tests/data/prompts-dev.jsonl, spread over its categories) through the engine, one arm after
the other, with the selectors of `--online-selectors`: the same prompts for every arm. What it
is not: a speed benchmark (`python -m bench spec`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import datasets
from bench.harness import ROOT, test_home
from bench.lib import Record


def run_arm(target: str, data: list[str], work: Path, overrides: dict, minutes: float, eval_seqs: int) -> dict:
    """One arm in this process: train for `minutes`, export its draft, report the evaluations."""
    from draft_training.recipe import TrainConfig
    from draft_training.train import Trainer

    overrides = dict(overrides)
    data = overrides.pop("data", data)
    cfg = TrainConfig(**{"threads": 1, "eval_seqs": eval_seqs, **overrides})
    t = Trainer(target, data if len(data) > 1 else data[0], work, cfg, log=lambda m: print(m, flush=True))
    t0 = time.perf_counter()
    t.run(minutes * 60)
    evals = [{"step": h["step"], "t": h["t"], "tau": h["eval"]["tau"]} for h in t.history if h.get("eval")]
    best = max(evals, key=lambda e: max(e["tau"].values()), default=None)
    start = (t.best.get("start") or {}).get("tau")  # an arm that continues a draft: that draft's tau
    t.export(work / "draft.gguf")
    return {"data": data, "draft": str(work / "draft.gguf"), "start": start, "steps": t.step,
            "train_s": round(t.elapsed), "wall_s": round(time.perf_counter() - t0),
            "evals": evals, "final": evals[-1]["tau"] if evals else {}, "best": best}


def online(target: str, results: dict, n: int, selectors: tuple[str, ...]) -> None:
    """Every trained arm's draft on the same n dev prompts through the engine, one arm at a time."""
    from draft_training.evaluate import online_eval

    prompts = datasets.prompts(n)
    for name, r in results.items():
        if r["rc"] == 0:
            t0 = time.perf_counter()
            r["online"] = online_eval(target, r["draft"], prompts, selectors=selectors)
            print(f"online {name}: " + ", ".join(f"{s} {v['tau']}" for s, v in r["online"]["selectors"].items())
                  + f" ({time.perf_counter() - t0:.0f} s, mismatches {r['online']['mismatches']})", flush=True)


def add_arguments(ap) -> None:
    ap.add_argument("--data", nargs="+", default=[], help="captured data folder(s) of the arms without their own")
    ap.add_argument("--arm", nargs=2, action="append", metavar=("NAME", "JSON"), required=True,
                    help="an arm: its name and its TrainConfig overrides as JSON; the first is the base")
    ap.add_argument("--minutes", type=float, default=20.0, help="training time of every arm")
    ap.add_argument("--eval-seqs", type=int, default=48, help="held-out sequences every arm is evaluated on")
    ap.add_argument("--online", type=int, default=0, metavar="N",
                    help="then decode N dev prompts with every arm's draft")
    ap.add_argument("--online-selectors", default="dp,top1", help="selectors of --online, comma-separated")
    ap.add_argument("--work", default=str(ROOT / "bench" / "out" / "draft_ab"), help="arms' checkpoints")
    ap.add_argument("--one", nargs=2, metavar=("NAME", "JSON"), help=argparse.SUPPRESS)  # an arm's own process


def run(a) -> Record | int:
    target = a.model or str(test_home() / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    work = Path(a.work)
    if a.one:
        name, over = a.one
        res = run_arm(target, a.data, work / name, json.loads(over), a.minutes, a.eval_seqs)
        (work / f"{name}.json").write_text(json.dumps(res, indent=1))
        return 0
    names = [n for n, _ in a.arm]
    if len(set(names)) != len(names):
        raise SystemExit("draft_ab: arm names must differ")
    for name, over in a.arm:  # a typo fails here, before any arm starts
        if not (json.loads(over).get("data") or a.data):
            raise SystemExit(f"draft_ab: arm {name}: no data (give --data or a \"data\" list in its JSON)")
    work.mkdir(parents=True, exist_ok=True)
    procs = []
    for name, over in a.arm:
        log = open(work / f"{name}.log", "w")
        cmd = [sys.executable, "-m", "bench", "draft_ab", "--model", target, *(["--data", *a.data] if a.data else []),
               "--minutes", str(a.minutes), "--eval-seqs", str(a.eval_seqs), "--work", str(work),
               "--arm", name, over, "--one", name, over]
        procs.append((name, over, subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    results = {}
    for name, over, p, log in procs:
        rc = p.wait()
        log.close()
        res_path = work / f"{name}.json"
        results[name] = {"overrides": json.loads(over), "rc": rc,
                         **(json.loads(res_path.read_text()) if rc == 0 and res_path.exists() else {})}
    if a.online:
        online(target, results, a.online, tuple(a.online_selectors.split(",")))
    base = results[names[0]].get("final", {})
    print(f"{'arm':<14}{'steps':>7}  " + "  ".join(f"{s:>14}" for s in base) + "   (final offline tau, delta to base)")
    for name in names:
        r = results[name]
        if r["rc"] != 0:
            print(f"{name:<14} failed (rc {r['rc']}): see {work / (name + '.log')}")
            continue
        cells = [f"{v:6.3f} ({v - base.get(s, v):+.3f})" for s, v in r["final"].items()]
        print(f"{name:<14}{r['steps']:>7}  " + "  ".join(f"{c:>14}" for c in cells))
    if a.online:
        base_on = results[names[0]].get("online", {}).get("selectors", {})
        print(f"online tau on {a.online} dev prompts, block 8 (delta to base):")
        for name in names:
            on = results[name].get("online", {}).get("selectors", {})
            print(f"{name:<14}" + "  ".join(f"{s} {v['tau']:6.3f} ({v['tau'] - base_on.get(s, v)['tau']:+.3f})"
                                            for s, v in on.items()))
    lossy = [n for n, r in results.items() if r.get("online", {}).get("mismatches")]
    if lossy:
        print(f"LOSSY: the drafts of {lossy} changed the output", file=sys.stderr)
    return Record("draft_ab", {"minutes": a.minutes, "data": a.data, "online_prompts": a.online,
                               "arms": dict(a.arm), "eval_seqs": a.eval_seqs},
                  samples=[{"arm": n, **r.get("final", {})} for n, r in results.items()],
                  figures={"arms": results}, model={"path": target},
                  ok=all(r["rc"] == 0 for r in results.values()) and not lossy)
