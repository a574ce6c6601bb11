"""Server benchmark: what HTTP costs, and what continuous batching buys.

In one run, on the same model and settings:
  A. in-process engine vs streamed HTTP (`flashdesk serve` subprocess, openai client),
     the same prompts alternated A B A B -> tokens/s of each and the overhead ratio;
  B. aggregate tokens/s with 1 stream vs 4 concurrent streams (HTTP), alternated;
  C. speculation (auto, with the paired draft) against off at 1, 4 and 8 concurrent streams
     (in-process engine, 8 mixed prompts), alternated: aggregate tokens/s and the ratio, and
     whether every answer equalled plain decoding's (it must).
Reports medians and ratios.

    .venv/bin/python -m bench serve [--rounds 5] [--max-tokens 96] [--parts ABC]

Speed is noisy on a shared 2-core machine: quote the ratios, not the absolute numbers.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

import openai

from bench import lib
from bench.datasets import prompts as pick_prompts
from bench.harness import ROOT, free_port, test_home, wait_ready
from bench.lib import GREEDY, Record
from engine import Completion, Engine, EngineConfig
from engine.models.store import ModelStore
from engine.speculative.params import SpecParams


def in_process(engine: Engine, p: dict, max_tokens: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    c = engine.chat(p["messages"], sampling=GREEDY, max_tokens=max_tokens)
    return len(c.tokens), time.perf_counter() - t0


def over_http(client: openai.OpenAI, p: dict, max_tokens: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    for chunk in client.chat.completions.create(model="smollm2", messages=p["messages"], temperature=0,
                                                max_tokens=max_tokens, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            n = chunk.usage.completion_tokens
    return n, time.perf_counter() - t0


def concurrent(client: openai.OpenAI, prompts: list[dict], max_tokens: int) -> tuple[int, float]:
    counts = [0] * len(prompts)

    def run(i):
        counts[i] = over_http(client, prompts[i], max_tokens)[0]

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - t0


def streams(engine: Engine, prompts: list[dict], mode: str, max_tokens: int) -> tuple[int, float, list]:
    """All `prompts` at once in `mode`: tokens written, seconds, and each answer's tokens."""
    t0 = time.perf_counter()
    handles = [engine.generate(engine.render_chat(p["messages"]), sampling=GREEDY, max_tokens=max_tokens,
                               speculative=SpecParams(mode=mode)) for p in prompts]
    done = [Completion.collect(iter(h)) for h in handles]
    return sum(len(c.tokens) for c in done), time.perf_counter() - t0, [c.tokens for c in done]


def spec_at_streams(model, a, counts=(1, 4, 8)) -> dict:
    """Part C: auto against off at each stream count, the two alternated (A B, then B A)."""
    prompts = pick_prompts(max(counts))
    engine = Engine.load(model.path, EngineConfig(n_ctx=4096, n_parallel=max(counts), n_threads=a.threads,
                                                  draft=model.draft_path))
    rates = {(n, m): [] for n in counts for m in ("off", "auto")}
    mismatches = []
    try:
        assert engine.speculation.curve_ready.wait(300), "the verify-cost curve was not measured"
        streams(engine, prompts[:1], "off", 8)  # warm
        for r in range(a.rounds):
            for n in counts:
                ref = None
                for m in (("off", "auto") if r % 2 == 0 else ("auto", "off")):
                    tokens, secs, answers = streams(engine, prompts[:n], m, a.max_tokens)
                    rates[(n, m)].append(tokens / secs)
                    if ref is not None and answers != ref:
                        mismatches.append((r, n, m))
                    ref = answers
            print(f"streams round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        engine.close()
    out = {}
    for n in counts:
        off, auto = statistics.median(rates[(n, "off")]), statistics.median(rates[(n, "auto")])
        ratios = [x / y for x, y in zip(rates[(n, "auto")], rates[(n, "off")])]
        out[str(n)] = {"off_tok_per_s": round(off, 1), "auto_tok_per_s": round(auto, 1),
                       "ratio": round(statistics.median(ratios), 3)}
    return {"streams": out, "mismatches": mismatches, "prompts": [p.get("id") for p in prompts]}


def add_arguments(ap) -> None:
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--parts", default="ABC", help="which parts to run (see above)")
    ap.set_defaults(rounds=5)


def run(a) -> Record:
    model = lib.test_model("smollm2")
    store = ModelStore(test_home())
    result: dict = {}
    if "C" in a.parts:
        result["speculation"] = spec_at_streams(model, a)
    if "A" in a.parts or "B" in a.parts:
        result |= http_parts(store, model, a)
    spec = result.get("speculation", {})
    print(json.dumps(result, indent=2))
    return Record("serve", {"threads": a.threads, "max_tokens": a.max_tokens, "rounds": a.rounds, "parts": a.parts},
                  medians=result.get("median_tok_per_s", {}),
                  ratios={k: result[k] for k in ("http_over_engine", "aggregate_4_over_1") if k in result}
                  | {f"auto/off at {n} streams": r["ratio"] for n, r in spec.get("streams", {}).items()},
                  figures=result, ok=not spec.get("mismatches"), model={"path": model.path})


def http_parts(store, model, a) -> dict:
    """Parts A and B."""
    prompts = pick_prompts(4)
    ctx = 2048
    engine = Engine.load(model.path, EngineConfig(n_ctx=ctx, n_parallel=4, n_threads=a.threads))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "server.cli", "--home", str(store.home), "serve",
                               "--port", str(port), "--ctx", str(ctx), "--threads", str(a.threads)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=300)
        over_http(client, prompts[0], 8), in_process(engine, prompts[0], 8)  # warm both
        rates = {"engine": [], "http": [], "http_1": [], "http_4": []}
        for r in range(a.rounds):
            for p in prompts:  # A B A B on the same prompt
                n, t = in_process(engine, p, a.max_tokens)
                rates["engine"].append(n / t)
                n, t = over_http(client, p, a.max_tokens)
                rates["http"].append(n / t)
            n, t = concurrent(client, prompts[:1], a.max_tokens)
            rates["http_1"].append(n / t)
            n, t = concurrent(client, prompts[:4], a.max_tokens)
            rates["http_4"].append(n / t)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
        engine.close()

    med = {k: statistics.median(v) for k, v in rates.items()}
    return {"prompts": [p.get("id") for p in prompts], "median_tok_per_s": {k: round(v, 2) for k, v in med.items()},
            "http_over_engine": round(med["http"] / med["engine"], 3),
            "aggregate_4_over_1": round(med["http_4"] / med["http_1"], 3)}
