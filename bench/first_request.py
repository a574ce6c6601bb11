"""First-chat benchmark: does a fresh install's first answer wait for anything?

Two sides, alternated A B A B, each a new `flashdesk serve` on a new home with the model and its
paired draft: A has no learned decode costs (as right after `flashdesk pull`), B has the ones
the model's folder keeps from an earlier start. Once /health says ready (the model is loaded),
one streamed greedy chat through the openai client: time to the first token and to the end.
A learns from its own decodes and fills in the rest while idle; its first chat must not wait.
Reports medians and the A/B ratios; writes JSON to bench/out/first_request.json.

    .venv/bin/python bench/first_request.py [--rounds 5] [--max-tokens 32]

Speed is noisy on a shared 2-core machine: quote the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import ServerProcess, drop_callers_settings, linked_home, test_home  # noqa: E402

drop_callers_settings()  # the servers it starts read none of the caller's own settings

from engine.models.store import ModelStore, no_progress  # noqa: E402
from engine.models.pull import pull  # noqa: E402

CHAT = [{"role": "user", "content": "Write two sentences about printing 500 A5 flyers for a bakery."}]


def timed_chat(client: openai.OpenAI, max_tokens: int) -> tuple[float, float]:
    """(ms to the first token, ms to the end) of one streamed greedy chat."""
    t0 = time.perf_counter()
    first = None
    for chunk in client.chat.completions.create(model="smollm2", messages=CHAT, temperature=0,
                                                max_tokens=max_tokens, stream=True):
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    end = time.perf_counter()
    return (first - t0) * 1000.0, (end - t0) * 1000.0


def first_chat(store: ModelStore, kept_curve: bool, max_tokens: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="flashdesk-first-") as tmp:
        home = linked_home(Path(tmp) / "home", store)  # copies the store's kept curve, if any
        if not kept_curve:
            for kept in (home / "models" / "smollm2").glob("verify-cost-*.json"):
                kept.unlink()
        srv = ServerProcess(home)
        try:
            srv.wait_ready(measured=False)
            client = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="unused", max_retries=0, timeout=300)
            return timed_chat(client, max_tokens)
        finally:
            srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "first_request.json"))
    a = ap.parse_args()
    store = ModelStore(test_home())
    pull(store, "smollm2", progress=no_progress)
    first_chat(store, True, a.max_tokens)  # makes sure the store keeps a measured curve for B
    sides = {"fresh": [], "kept": []}
    for _ in range(a.rounds):
        sides["fresh"].append(first_chat(store, False, a.max_tokens))
        sides["kept"].append(first_chat(store, True, a.max_tokens))
    med = {side: {"ttft_ms": statistics.median(t for t, _ in r), "total_ms": statistics.median(e for _, e in r)}
           for side, r in sides.items()}
    result = {"max_tokens": a.max_tokens, "rounds": sides, "median": med,
              "ttft_ratio_fresh_over_kept": med["fresh"]["ttft_ms"] / med["kept"]["ttft_ms"],
              "total_ratio_fresh_over_kept": med["fresh"]["total_ms"] / med["kept"]["total_ms"]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1), "utf-8")
    for side, m in med.items():
        print(f"{side:>5}: first chat TTFT {m['ttft_ms']:.0f} ms, whole answer {m['total_ms']:.0f} ms "
              f"(median of {a.rounds})")
    print(f"fresh/kept: TTFT x{result['ttft_ratio_fresh_over_kept']:.2f}, "
          f"whole answer x{result['total_ratio_fresh_over_kept']:.2f}  ({a.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
