"""`auto` against plain decoding over HTTP, as a user's software sees it: the dev work orders through
POST /v1/workorders/parse, and the dev prompts through the openai client's chat completions.

One `flashdesk serve` (a real subprocess on loopback, SmolLM2 and its shipped draft, 2 threads),
its verify-cost curve measured first. Each case is sent with `"speculative": {"mode": "off"}` and
with `"auto"`, the order alternating from case to case; every auto answer must equal the plain one
(the same JSON for a parse, the same text for a chat). Reports, per part, the median of the
per-case time ratios (off / auto: above 1 means auto is faster), the total time ratio, and the
share of committed tokens each drafter wrote. Writes bench/out/workorders_http.json.

    .venv/bin/python bench/workorders_http.py [--limit 24] [--prompts 12] [--max-tokens 128]

The server loads whatever llama.cpp build this environment selects (LLAMA_CPP_LIB_PATH passes,
so `bench/cpu_verify.py`'s sides can be compared here too). Quote ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import EVAL_DATA, ServerProcess, dev_prompts, drop_callers_settings, linked_home, test_home  # noqa: E402

drop_callers_settings()

from engine.store import ModelStore, no_progress  # noqa: E402

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


def run_part(name: str, cases: list, send) -> dict:
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
    ratios = [o / a for o, a in zip(times["off"], times["auto"])]
    total = sum(sources.values()) or 1
    return {"cases": len(cases), "median_ratio": statistics.median(ratios),
            "total_ratio": sum(times["off"]) / sum(times["auto"]), "differ": differ,
            "committed_share": {k: v / total for k, v in sorted(sources.items())}, "seconds": times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=24, help="dev work orders")
    ap.add_argument("--prompts", type=int, default=12, help="dev prompts (every 5th)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "workorders_http.json"))
    args = ap.parse_args()
    store = ModelStore(test_home())
    store.pull("smollm2", progress=no_progress)
    tmp = tempfile.TemporaryDirectory(prefix="flashdesk-wo-http-")  # a fresh home each run
    server = ServerProcess(linked_home(Path(tmp.name) / "home", store))
    try:
        server.wait_ready()  # the cost curve measured: auto decides from it
        health = httpx.get(f"{server.base}/health").json()
        cases = [json.loads(line) for line in (EVAL_DATA / "workorders-dev.jsonl").read_text("utf-8").splitlines()
                 if line.strip()][: args.limit]
        prompts = dev_prompts()[::5][: args.prompts]
        with httpx.Client(base_url=server.base) as http:
            parse(http, cases[0], "off")  # warm-up
            report = {"speculation": health.get("speculation"),
                      "workorders": run_part("workorders", cases, lambda c, m: parse(http, c, m))}
        client = openai.OpenAI(base_url=f"{server.base}/v1", api_key="none")
        report["prompts"] = run_part("prompts", prompts, lambda p, m: chat(client, p, m, args.max_tokens))
    finally:
        server.stop()
        tmp.cleanup()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    sp = report["speculation"] or {}
    print(f"exact: {sp.get('exact')} ({sp.get('exact_why')})")
    for part in ("workorders", "prompts"):
        r = report[part]
        print(f"{part}: auto/off speed, median of {r['cases']} cases {r['median_ratio']:.3f}x, total "
              f"{r['total_ratio']:.3f}x; answers that differ: {r['differ'] or 'none'}; committed by "
              + ", ".join(f"{k} {v:.0%}" for k, v in r["committed_share"].items()))
    return 1 if report["workorders"]["differ"] or report["prompts"]["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
