"""What a verify costs on the CPU, and whether its rows are exact: the CPU batch-invariant patch
(native/llama-patches/0002) on and off, and any other build of llama.cpp's libraries beside them.

Sides, each measured in fresh processes (the patch's switch, GGML_BATCH_INVARIANT, is read once
per process), alternated A B C A B C ... for `--rounds` rounds; medians per side:
  on     the venv's build (or --lib), the patch on
  off    the same build, GGML_BATCH_INVARIANT=0: stock ggml-cpu kernels
  NAME   --side NAME=FOLDER: another build's llama_cpp/lib folder (for example llama.cpp's own
         stock CPU build with llamafile's sgemm and the repacked GEMM on: the inexact speed anchor)

Per side: c(k) for k = 1..16 (one decode of k tokens after 256 of history, median of --reps),
c(k)/c(1), plain decoding tokens/s (64 tokens) and prefill tokens/s (a 512-token prompt).
Once per side: the exactness table of bench/gpu_check.py (every width 2..16 at every offset,
after 40 and 250 tokens, and 4 sequences together against alone), max |diff| per width.

    .venv/bin/python -m bench cpu_verify --model MODEL.gguf [--side stock=/path/lib] [--rounds 3]
        [--out bench/out/cpu_verify-MODEL]
    .venv/bin/python -m bench cpu_verify --tables bench/out/cpu_verify-*.json   # Markdown, for the notes
    .venv/bin/python -m bench gpu_check random-model M.gguf --layers 28 --embd 2048 [--quant Q4_0]

Quote ratios, not absolute times: a shared 2-core machine is noisy, which is why the sides alternate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import ROOT
from bench.lib import Record, rotation

N_MAX = 16  # the CPU band
HISTORY = 256
PREFILL = 512


def speed(model_path: str, reps: int) -> dict:
    """In this process, with whatever build and switch it loaded."""
    from bench.gpu_check import filler, logits_of, prefill
    from engine.llama import ggml
    from engine.llama.context import Context, ContextConfig
    from engine.llama.model import Model

    model = Model(model_path)
    ctx = Context(model, ContextConfig(n_ctx_seq=1024, n_seq=1, n_batch=512, n_threads=os.cpu_count() or 2))
    v = model.n_vocab
    try:
        prefill(ctx, 0, filler(HISTORY, v))
        logits_of(ctx, 0, filler(4, v, salt=99), HISTORY)  # warm-up
        ctx.forget(0, HISTORY)
        ms = {}
        for k in range(1, N_MAX + 1):
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                logits_of(ctx, 0, filler(k, v, salt=k), HISTORY)
                times.append((time.perf_counter() - t0) * 1000.0)
                ctx.forget(0, HISTORY)
            ms[k] = statistics.median(times)
        t0, n = time.perf_counter(), 64
        for j in range(n):
            logits_of(ctx, 0, [filler(1, v, salt=j)[0]], HISTORY + j)
        decode = n / (time.perf_counter() - t0)
        ctx.forget(0)
        t0 = time.perf_counter()
        prefill(ctx, 0, filler(PREFILL, v, salt=7))
        return {"feature": ggml.batch_invariant(), "c_ms": ms, "decode_tok_s": decode,
                "prefill_tok_s": PREFILL / (time.perf_counter() - t0)}
    finally:
        ctx.close()
        model.close()


def child(args, side: str, part: str) -> dict:
    env = dict(os.environ)
    folder = dict(args.side).get(side, args.lib)
    if folder:
        env["LLAMA_CPP_LIB_PATH"] = folder
    env["GGML_BATCH_INVARIANT"] = "0" if side == "off" else "1"
    r = subprocess.run([sys.executable, "-m", "bench", "cpu_verify", "--child", part, "--model", args.model,
                        "--reps", str(args.reps)], env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{side} {part}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def exactness_table(ex: dict) -> dict:
    """max |diff| per width over both histories and every offset, and the multi-sequence rows."""
    widths = {}
    for c in ex["chunks"]:
        widths[c["k"]] = max(widths.get(c["k"], 0.0), c["max_diff"])
    return {"exact": ex["exact"], "max_diff_by_width": widths,
            "multi_rows_differ": sum(len(m["rows_differ"]) for m in ex["multi"])}


def summarize(runs: list[dict]) -> dict:
    c = {k: statistics.median(r["c_ms"][str(k)] for r in runs) for k in range(1, N_MAX + 1)}
    return {"feature": runs[0]["feature"], "c_ms": c, "c_ratio": {k: c[k] / c[1] for k in c},
            "decode_tok_s": statistics.median(r["decode_tok_s"] for r in runs),
            "prefill_tok_s": statistics.median(r["prefill_tok_s"] for r in runs), "rounds": len(runs)}


def name(run: dict) -> str:
    """The model of a finished run: a record's model facts, or (before the suite) its file name."""
    return run["model"]["name"] if isinstance(run["model"], dict) else run["model"]


def tables(paths: list[str]) -> str:
    """Markdown tables of finished runs (their JSON files): exactness per width, and the cost curves."""
    runs = [json.loads(Path(p).read_text("utf-8")) for p in paths]
    widths = range(2, N_MAX + 1)
    out = ["| model | side | " + " | ".join(str(k) for k in widths) + " | 4 seqs |",
           "|---|---|" + "---|" * (len(widths) + 1)]
    for r in runs:
        for side, v in r["sides"].items():
            ex = v.get("exactness")
            if ex:
                diffs = [ex["max_diff_by_width"].get(str(k), ex["max_diff_by_width"].get(k)) for k in widths]
                multi = "exact" if ex["multi_rows_differ"] == 0 else f"{ex['multi_rows_differ']} rows differ"
                out.append(f"| {name(r)} | {side} | " + " | ".join("0" if d == 0 else f"{d:.2g}" for d in diffs)
                           + f" | {multi} |")
    ks = range(2, N_MAX + 1)
    out += ["", "| model | side | " + " | ".join(f"c({k})" for k in ks) + " | c(1) ms | decode tok/s | prefill tok/s |",
            "|---|---|" + "---|" * (N_MAX + 2)]
    for r in runs:
        for side, v in r["sides"].items():
            if "c_ratio" in v:
                out.append(f"| {name(r)} | {side} | " + " | ".join(f"{v['c_ratio'][str(k)]:.2f}" for k in ks)
                           + f" | {v['c_ms']['1']:.1f} | {v['decode_tok_s']:.1f} | {v['prefill_tok_s']:.0f} |")
    return "\n".join(out)


def add_arguments(ap) -> None:
    ap.add_argument("--lib", help="the llama_cpp/lib folder of the patched build (default: the venv's)")
    ap.add_argument("--side", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                    help="NAME=FOLDER: another build to measure beside on and off")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-exactness", action="store_true", help="speed only (--rounds 0: exactness only)")
    ap.add_argument("--child", choices=("speed", "exactness"), help=argparse.SUPPRESS)  # one side's process
    ap.add_argument("--tables", nargs="+", metavar="JSON", help="print Markdown tables of finished runs, and stop")


def run(args) -> Record | int:
    if args.tables:
        print(tables(args.tables))
        return 0
    if not args.model:
        raise SystemExit("cpu_verify: --model, the GGUF to measure, is missing")
    if args.child == "speed":
        print(json.dumps(speed(args.model, args.reps)))
        return 0
    if args.child == "exactness":
        from bench.gpu_check import exactness
        from engine.llama.model import Model

        model = Model(args.model)
        try:
            print(json.dumps(exactness(model, smoke=False)))
        finally:
            model.close()
        return 0

    sides = ["on", "off"] + [name for name, _ in args.side]
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for rnd in range(args.rounds):
        for s in rotation(sides, rnd):
            runs[s].append(child(args, s, "speed"))
            print(f"round {rnd + 1} {s}: c(8)/c(1) {runs[s][-1]['c_ms']['8'] / runs[s][-1]['c_ms']['1']:.2f}",
                  file=sys.stderr)
    report = {"sides": {s: summarize(r) if r else {} for s, r in runs.items()}}  # --rounds 0: exactness only
    if args.rounds:
        on, off = report["sides"]["on"], report["sides"]["off"]
        report["on_vs_off"] = {"decode": on["decode_tok_s"] / off["decode_tok_s"],
                               "prefill": on["prefill_tok_s"] / off["prefill_tok_s"]}
    if not args.no_exactness:
        for s in sides:
            report["sides"][s]["exactness"] = exactness_table(child(args, s, "exactness"))
    for s, r in report["sides"].items():
        ex = r.get("exactness")
        line = f"{s:>6}:"
        if "c_ratio" in r:
            ratios = " ".join(f"{r['c_ratio'][k]:.2f}" for k in (2, 4, 8, 16))
            line += (f" c(k)/c(1) k=2,4,8,16: {ratios}; c(1) {r['c_ms'][1]:.1f} ms; decode {r['decode_tok_s']:.1f} "
                     f"tok/s; prefill {r['prefill_tok_s']:.0f} tok/s;")
        if ex:
            line += f" exact: {ex['exact']}, worst |diff| {max(ex['max_diff_by_width'].values()):.3g}"
        print(line)
    if "on_vs_off" in report:
        print(f"on/off: decode {report['on_vs_off']['decode']:.3f}x, prefill {report['on_vs_off']['prefill']:.3f}x")
    return Record("cpu_verify", {"lib": args.lib, "sides": dict(args.side), "rounds": args.rounds, "reps": args.reps,
                                 "threads": os.cpu_count()},
                  samples=[{"side": s, "round": i, **r} for s in runs for i, r in enumerate(runs[s])],
                  medians={f"decode_tok_s {s}": r["decode_tok_s"] for s, r in report["sides"].items() if r.get("c_ms")},
                  ratios=report.get("on_vs_off", {}), figures=report, model={"path": args.model})
