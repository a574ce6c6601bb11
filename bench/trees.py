"""Did a change make decoding slower? bench/spec.py on two checkouts, alternated in one run.

Side A is a commit (checked out into a temporary git worktree), side B the working tree.
Each round runs bench/spec.py once per side, in the order A B, then B A, and so on, so
the machine's drift falls on both sides alike. Both sides use this interpreter and its
installed llama.cpp and native library; each imports its own Python packages (the
editable install's redirect is dropped for side A). Reports, per mode, the median tok/s of
each side over the rounds and the median of the per-round ratios B / A. Writes JSON to
bench/out/trees.json.

    .venv/bin/python bench/trees.py --a HEAD~3 [--rounds 3] -- --prompts 1 --max-tokens 64 \\
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

ROOT = Path(__file__).resolve().parent.parent

# Runs bench/spec.py of one tree: that tree's packages first, never the editable install's.
BOOT = """import runpy, sys
tree, argv = sys.argv[1], sys.argv[2:]
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, tree)
sys.argv = [tree + "/bench/spec.py"] + argv
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_side(tree: Path, spec_args: list[str], out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", BOOT, str(tree), *spec_args, "--out", str(out)],
                          cwd=tree, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench/spec.py failed in {tree} (status {proc.returncode}):\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    return {r["mode"]: r for r in data["table"] if r["category"] == "all"} | {"_mismatches": data["mismatches"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", default="HEAD", help="the commit to compare against (side A)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "trees.json"))
    ap.add_argument("spec_args", nargs=argparse.REMAINDER, help="after --: arguments for bench/spec.py")
    a = ap.parse_args()
    spec_args = [x for x in a.spec_args if x != "--"]
    work = Path(tempfile.mkdtemp(prefix="flashdesk-trees-"))
    tree_a = work / "a"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree_a), a.a], cwd=ROOT, check=True,
                   capture_output=True)
    sides = {"A": tree_a, "B": ROOT}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    try:
        for rnd in range(a.rounds):
            for side in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
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
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"A = {result['a']}, B = working tree, {a.rounds} rounds (A B, B A, ...)")
    print(f"{'mode':18} {'A tok/s':>8} {'B tok/s':>8} {'B/A':>6} {'A vs plain':>10} {'B vs plain':>10}")
    for r in table:
        print(f"{r['mode']:18} {r['tok_per_s_a']:8.1f} {r['tok_per_s_b']:8.1f} {r['ratio_b_over_a']:6.3f} "
              f"{r['speedup_vs_plain_a']:10.3f} {r['speedup_vs_plain_b']:10.3f}")
    print(f"mismatches against plain: A {mismatches['A'] or 'none'}, B {mismatches['B'] or 'none'}")
    return 1 if any(mismatches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
