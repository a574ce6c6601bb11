"""Did a change make decoding slower? The spec benchmark on two checkouts, alternated in one run.

Side A is a commit (checked out into a temporary git worktree), side B the working tree.
Each round runs the spec benchmark once per side, in the order A B, then B A, and so on, so
the machine's drift falls on both sides alike. Both sides use this interpreter and its
installed llama.cpp and native library; each imports its own Python packages (the
editable install's redirect is dropped for side A). Reports, per mode, the median tok/s of
each side over the rounds and the median of the per-round ratios B / A. A commit from before
the suite runs its bench/spec.py (whose --prompts counted per category).

    .venv/bin/python -m bench trees --a HEAD~3 [--rounds 3] -- --prompts 6 --max-tokens 64 \\
        --modes "lookup B=8,dflash-walk B=8"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import ROOT
from bench.lib import Record, out_json, rotation

# Runs the spec benchmark of one tree: that tree's packages first, never the editable install's.
BOOT = """import runpy, sys
tree, argv = sys.argv[1], sys.argv[2:]
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, tree)
try:
    import bench.suite
except ImportError:  # a commit from before the suite: its bench/spec.py
    sys.argv = [tree + "/bench/spec.py"] + argv
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    sys.exit(bench.suite.main(["spec"] + argv))
"""


def run_side(tree: Path, spec_args: list[str], out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", BOOT, str(tree), *spec_args, "--out", str(out)],
                          cwd=tree, capture_output=True, text=True)
    if proc.returncode not in (0, 1) or not out_json(out).is_file() and not out.is_file():
        raise SystemExit(f"the spec benchmark failed in {tree} (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads((out if out.is_file() else out_json(out)).read_text())
    return {r["mode"]: r for r in data["table"] if r["category"] == "all"} | {"_mismatches": data["mismatches"]}


def add_arguments(ap) -> None:
    ap.add_argument("--a", default="HEAD", help="the commit to compare against (side A)")
    ap.add_argument("spec_args", nargs=argparse.REMAINDER, help="after --: the spec benchmark's flags")


def run(a) -> Record:
    spec_args = [x for x in a.spec_args if x != "--"]
    work = Path(tempfile.mkdtemp(prefix="flashdesk-trees-"))
    tree_a = work / "a"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree_a), a.a], cwd=ROOT, check=True,
                   capture_output=True)
    sides = {"A": tree_a, "B": ROOT}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        for rnd in range(a.rounds):
            for side in rotation(["A", "B"], rnd):
                runs[side].append(run_side(sides[side], spec_args, work / f"{side}{rnd}.json"))
                print(f"round {rnd + 1}/{a.rounds}: side {side} done", file=sys.stderr)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree_a)], cwd=ROOT, capture_output=True)
    table = []
    for mode in [m for m in runs["A"][0] if not m.startswith("_")]:
        rate = {s: [r[mode]["tok_per_s"] for r in runs[s]] for s in runs}
        table.append({"mode": mode, "tok_per_s_a": statistics.median(rate["A"]),
                      "tok_per_s_b": statistics.median(rate["B"]),
                      "ratio_b_over_a": round(statistics.median(b / x for x, b in zip(rate["A"], rate["B"])), 3),
                      "speedup_vs_plain_a": statistics.median(r[mode]["ratio"] for r in runs["A"]),
                      "speedup_vs_plain_b": statistics.median(r[mode]["ratio"] for r in runs["B"])})
    commit = subprocess.run(["git", "rev-parse", "--short", a.a], cwd=ROOT, capture_output=True, text=True)
    mismatches = {s: [m for r in runs[s] for m in r["_mismatches"]] for s in runs}
    result = {"a": commit.stdout.strip(), "b": "working tree", "rounds": a.rounds, "spec_args": spec_args,
              "mismatches": mismatches, "table": table}
    print(f"A = {result['a']}, B = working tree, {a.rounds} rounds (A B, B A, ...)")
    print(f"{'mode':18} {'A tok/s':>8} {'B tok/s':>8} {'B/A':>6} {'A vs plain':>10} {'B vs plain':>10}")
    for r in table:
        print(f"{r['mode']:18} {r['tok_per_s_a']:8.1f} {r['tok_per_s_b']:8.1f} {r['ratio_b_over_a']:6.3f} "
              f"{r['speedup_vs_plain_a']:10.3f} {r['speedup_vs_plain_b']:10.3f}")
    print(f"mismatches against plain: A {mismatches['A'] or 'none'}, B {mismatches['B'] or 'none'}")
    return Record("trees", {"a": result["a"], "b": "working tree", "rounds": a.rounds, "spec_args": spec_args},
                  samples=[{"side": s, "round": i, **{m: r[m]["tok_per_s"] for m in r if not m.startswith("_")}}
                           for s in runs for i, r in enumerate(runs[s])],
                  medians={f"{r['mode']} {s}": r[f"tok_per_s_{s.lower()}"] for r in table for s in "AB"},
                  ratios={r["mode"]: r["ratio_b_over_a"] for r in table},
                  figures={"mismatches": mismatches, "table": table}, ok=not any(mismatches.values()))
