"""`auto` against plain decoding over HTTP, as a user's software sees it: the dev work orders through
POST /v1/workorders/parse, and the dev prompts through the openai client's chat completions.

One `flashdesk serve` (a real subprocess on loopback, a fresh home, SmolLM2 and its shipped draft,
2 threads, 8 slots). Each case is sent with `"speculative": {"mode": "off"}` and with `"auto"`,
the order alternating from case to case; every auto answer must equal the plain one (the same JSON
for a parse, the same text for a chat). In order:
  fresh       the first --fresh work orders, sent back to back the moment the model is loaded: the
              chooser learns its costs from this traffic alone (no idle time to measure in);
  workorders  the dev work orders, once the idle fill-in has timed every one-sequence row count;
  streams     the first N work orders sent at once, N in --streams, off and auto alternated per
              round: aggregate completion tokens per second;
  prompts     --prompts N dev prompts (spread over the categories) through the openai client.
Reports, per part, the median of the per-case time ratios (off / auto: above 1 means auto is
faster), the total time ratio (cases after the first, for `fresh`), and the share of committed
tokens each drafter wrote.

    .venv/bin/python -m bench workorders_http [--limit 24] [--fresh 10] [--streams 1,4,8] [--rounds 3]
                                              [--prompts 12] [--max-tokens 128]

The server loads whatever llama.cpp build this environment selects (LLAMA_CPP_LIB_PATH passes,
so cpu_verify's sides can be compared here too). Quote ratios, not absolute times.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai

from bench import datasets, lib
from bench.harness import ServerProcess, linked_home, test_home
from bench.lib import Record
from engine.models.store import ModelStore

MODES = ("off", "auto")


def parse(client: httpx.Client, case: dict, mode: str) -> tuple[float, str, dict]:
    body = {"text": case["text"], "sent_date": case["sent"], "speculative": {"mode": mode}}
    t0 = time.perf_counter()
    r = client.post("/v1/workorders/parse", json=body, timeout=600)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    out = r.json()
    return elapsed, json.dumps(out["result"], sort_keys=True), out["usage"]


def chat(client: openai.OpenAI, prompt: dict, mode: str, max_tokens: int) -> tuple[float, str, dict]:
    t0 = time.perf_counter()
    r = client.chat.completions.create(model="smollm2", messages=prompt["messages"], max_tokens=max_tokens,
                                       temperature=0, extra_body={"speculative": {"mode": mode}})
    elapsed = time.perf_counter() - t0
    return elapsed, r.choices[0].message.content, r.usage.model_dump()


def run_part(name: str, cases: list, send, skip: int = 0) -> dict:
    """Each case off and auto, alternated; `skip` first cases left out of the ratios (still sent)."""
    times = {m: [] for m in MODES}
    differ, sources = [], {}
    for i, case in enumerate(cases):
        got = {}
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            elapsed, answer, usage = send(case, mode)
            times[mode].append(elapsed)
            got[mode] = answer
            spec = (usage or {}).get("speculation") or {}
            if mode == "auto":
                for src, n in (spec.get("committed_by_source") or {}).items():
                    sources[src] = sources.get(src, 0) + n
        if got["off"] != got["auto"]:
            differ.append(i)
        print(f"{name} {i + 1}/{len(cases)}: off {times['off'][-1]:.2f} s, auto {times['auto'][-1]:.2f} s",
              file=sys.stderr)
    off, auto = times["off"][skip:], times["auto"][skip:]
    ratios = [o / a for o, a in zip(off, auto)]
    total = sum(sources.values()) or 1
    return {"cases": len(ratios), "median_ratio": statistics.median(ratios), "total_ratio": sum(off) / sum(auto),
            "differ": differ, "committed_share": {k: v / total for k, v in sorted(sources.items())},
            "seconds": times}


def streams_part(http: httpx.Client, cases: list, counts: list[int], rounds: int) -> dict:
    """The first n cases sent at once, off then auto (auto then off on odd rounds), after one untimed
    pass: aggregate completion tokens per second, and whether every auto answer equalled its plain one."""
    out, differ = {}, []
    for n in counts:
        rates = {m: [] for m in MODES}
        with ThreadPoolExecutor(n) as pool:  # untimed: the first to send these would pay their prefill alone
            list(pool.map(lambda c: parse(http, c, "off"), cases[:n]))
        for r in range(rounds):
            got = {}
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                with ThreadPoolExecutor(n) as pool:
                    t0 = time.perf_counter()
                    done = list(pool.map(lambda c: parse(http, c, mode), cases[:n]))
                    secs = time.perf_counter() - t0
                rates[mode].append(sum(u["completion_tokens"] for _, _, u in done) / secs)
                got[mode] = [answer for _, answer, _ in done]
            if got["off"] != got["auto"]:
                differ.append((n, r))
            print(f"streams {n} round {r + 1}/{rounds}: off {rates['off'][-1]:.1f}, auto {rates['auto'][-1]:.1f} "
                  "tok/s", file=sys.stderr)
        ratios = [a / o for a, o in zip(rates["auto"], rates["off"])]
        out[str(n)] = {"off_tok_per_s": round(statistics.median(rates["off"]), 1),
                       "auto_tok_per_s": round(statistics.median(rates["auto"]), 1),
                       "ratio": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios]}
    return {"streams": out, "differ": differ}


def add_arguments(ap) -> None:
    ap.add_argument("--limit", type=int, default=24, help="dev work orders")
    ap.add_argument("--fresh", type=int, default=10, help="work orders sent the moment the model is loaded")
    ap.add_argument("--streams", default="1,4,8", help="concurrent work orders (comma-separated; empty: none)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.set_defaults(prompts=12)


def run(args) -> Record:
    counts = [int(n) for n in args.streams.split(",") if n.strip()]
    path = lib.test_model("smollm2").path
    store = ModelStore(test_home())
    tmp = tempfile.TemporaryDirectory(prefix="flashdesk-wo-http-")  # a fresh home each run: nothing learned yet
    server = ServerProcess(linked_home(Path(tmp.name) / "home", store), "--parallel", str(max(counts + [4])))
    cases = datasets.workorders()
    report: dict = {}
    try:
        server.wait_ready(measured=False)  # loaded: what a user waits for
        with httpx.Client(base_url=server.base) as http:
            if args.fresh:
                report["fresh"] = run_part("fresh", cases[:args.fresh], lambda c, m: parse(http, c, m), skip=1)
            server.wait_ready()  # the idle fill-in has timed every one-sequence row count
            report["speculation"] = httpx.get(f"{server.base}/health").json().get("speculation")
            report["workorders"] = run_part("workorders", cases[:args.limit], lambda c, m: parse(http, c, m))
            if counts:
                report["streams"] = streams_part(http, cases, counts, args.rounds)
        client = openai.OpenAI(base_url=f"{server.base}/v1", api_key="none")
        prompts = datasets.prompts(args.prompts)
        report["prompts"] = run_part("prompts", prompts, lambda p, m: chat(client, p, m, args.max_tokens))
    finally:
        server.stop()
        tmp.cleanup()
    sp = report["speculation"] or {}
    print(f"exact: {sp.get('exact')} ({sp.get('exact_why')})")
    for part in ("fresh", "workorders", "prompts"):
        r = report.get(part)
        if r:
            print(f"{part}: auto/off speed, median of {r['cases']} cases {r['median_ratio']:.3f}x, total "
                  f"{r['total_ratio']:.3f}x; answers that differ: {r['differ'] or 'none'}; committed by "
                  + ", ".join(f"{k} {v:.0%}" for k, v in r["committed_share"].items()))
    for n, r in (report.get("streams") or {}).get("streams", {}).items():
        print(f"streams {n}: off {r['off_tok_per_s']} tok/s, auto {r['auto_tok_per_s']} tok/s, ratio {r['ratio']}x")
    differ = [report[p]["differ"] for p in ("fresh", "workorders", "prompts") if p in report]
    parts = ("fresh", "workorders", "prompts")
    return Record("workorders_http", {"limit": args.limit, "fresh": args.fresh, "streams": args.streams,
                                      "rounds": args.rounds, "prompts": args.prompts, "max_tokens": args.max_tokens,
                                      "threads": 2},
                  ratios={p: report[p]["median_ratio"] for p in parts if p in report}
                  | {f"streams {n}": r["ratio"] for n, r in (report.get("streams") or {}).get("streams", {}).items()},
                  figures=report, model={"path": path},
                  ok=not (any(differ) or (report.get("streams") or {}).get("differ")))
