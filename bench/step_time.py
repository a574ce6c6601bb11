"""Where a step's time goes in the engine: llama.cpp's decode against the engine's own Python.

For each stream count, the same greedy chat prompts run in-process (no HTTP), several at once, and
every step is timed at three depths: `llama_decode` itself (llama.cpp's compute), the stepper's
step around it (planning, batch filling, sampling, the drafters' bookkeeping: our Python on the
hot path), and the worker's step around that (committing tokens, text, events). Reported per
stream count: tokens/s, steps, and the median milliseconds of each depth with the Python share.
What HTTP adds on top is the serve benchmark's part A; what llama-server does with the same model
is the anchor benchmark's.

    .venv/bin/python -m bench step_time [--model PATH] [--streams 1,4] [--max-tokens 64]
                                        [--mode off] [--rounds 2] [--prompts 8]

The timers wrap the engine's methods from outside (nothing in the engine knows of them).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict

from bench import datasets, lib
from bench.lib import GREEDY, Record
from engine import Engine, EngineConfig
from engine import worker
from engine.llama import context
from engine.speculative import loop
from engine.speculative.params import SpecParams

TIMES: dict[str, list[float]] = defaultdict(list)  # depth -> ms of each call


def timed(cls, name: str, depth: str) -> None:
    """Wrap cls.name so each call's milliseconds land in TIMES[depth]."""
    inner = getattr(cls, name)

    def wrapper(*args, **kw):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            TIMES[depth].append((time.perf_counter() - t0) * 1000.0)
    setattr(cls, name, wrapper)


def streamed(engine: Engine, prompts: list[dict], streams: int, max_tokens: int, mode: str) -> dict:
    """`streams` requests at once, each taking the next prompt until all are answered."""
    TIMES.clear()
    todo, tokens, lock = list(prompts), [], threading.Lock()

    def client():
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop(0)
            c = engine.chat(p["messages"], sampling=GREEDY, max_tokens=max_tokens,
                            speculative=SpecParams(mode=mode))
            with lock:
                tokens.append(len(c.tokens))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in TIMES.items() if v}
    total = {k: sum(v) for k, v in TIMES.items()}
    return {"streams": streams, "tokens": sum(tokens), "wall_s": wall, "tok_s": sum(tokens) / wall,
            "steps": len(TIMES["worker"]), "median_ms": med, "total_ms": total,
            # the engine's own Python on the hot path, as a share of the worker's steps
            "python_share": 1.0 - total["decode"] / total["worker"] if total.get("worker") else None}


def add_arguments(ap) -> None:
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--mode", default="off", help="speculative mode of every request")
    ap.set_defaults(prompts=8, rounds=2)


def run(a) -> Record:
    counts = [int(x) for x in a.streams.split(",")]
    timed(context.Context, "decode", "decode")
    timed(loop.Stepper, "step", "stepper")
    timed(worker.Engine, "_step", "worker")
    path = lib.model_path(a.model)
    engine = Engine.load(path, EngineConfig(n_ctx=2048, n_parallel=max(counts), n_threads=a.threads))
    prompts = datasets.prompts(a.prompts)
    rows = defaultdict(list)
    try:
        # the idle measurement of the cost curve decodes between requests: let it finish first
        engine.speculation.curve_ready.wait(timeout=300)
        streamed(engine, prompts[:1], 1, 8, a.mode)  # warm-up
        for _ in range(a.rounds):
            for n in counts:
                rows[n].append(streamed(engine, prompts, n, a.max_tokens, a.mode))
    finally:
        engine.close()
    heads = ("streams", 7), ("tok/s", 7), ("steps", 6), ("decode ms", 10), ("stepper ms", 11), ("worker ms", 10)
    print(" ".join(f"{h:>{w}}" for h, w in heads), f"{'python':>7}")
    summary = []
    for n, rs in rows.items():
        pick = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        s = {"streams": n, "tok_s": pick(lambda r: r["tok_s"]), "steps": pick(lambda r: r["steps"]),
             **{f"{k}_ms": pick(lambda r, k=k: r["median_ms"][k]) for k in ("decode", "stepper", "worker")},
             "python_share": pick(lambda r: r["python_share"])}
        summary.append(s)
        print(f"{n:>7} {s['tok_s']:>7.1f} {s['steps']:>6.0f} {s['decode_ms']:>10.2f} {s['stepper_ms']:>11.2f} "
              f"{s['worker_ms']:>10.2f} {100 * s['python_share']:>6.1f}%")
    return Record("step_time", {"streams": a.streams, "max_tokens": a.max_tokens, "prompts": len(prompts),
                                "mode": a.mode, "rounds": a.rounds, "threads": a.threads},
                  samples=[{"streams": n, "round": i, **r} for n, rs in rows.items() for i, r in enumerate(rs)],
                  medians={f"tok_s at {s['streams']} streams": s["tok_s"] for s in summary},
                  figures={"summary": summary}, model={"path": path})
