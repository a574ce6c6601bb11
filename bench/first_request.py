"""First-chat benchmark: does a fresh install's first answer wait for anything?

Two sides, alternated A B A B, each a new `flashdesk serve` on a new home with the model and its
paired draft: A has no learned decode costs (as right after `flashdesk pull`), B has the ones
the model's folder keeps from an earlier start. Once /health says ready (the model is loaded),
one streamed greedy chat through the openai client: time to the first token and to the end.
A learns from its own decodes and fills in the rest while idle; its first chat must not wait.
Reports medians and the A/B ratios.

    .venv/bin/python -m bench first_request [--rounds 5] [--max-tokens 32]

Speed is noisy on a shared 2-core machine: quote the ratios, not the absolute numbers.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import openai

from bench import lib
from bench.harness import ServerProcess, linked_home, test_home
from bench.lib import Record
from engine.models.store import ModelStore

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


def add_arguments(ap) -> None:
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.set_defaults(rounds=5)


def run(a) -> Record:
    path = lib.test_model("smollm2").path
    store = ModelStore(test_home())
    first_chat(store, True, a.max_tokens)  # makes sure the store keeps a measured curve for B
    sides = lib.alternate({"fresh": lambda: first_chat(store, False, a.max_tokens),
                           "kept": lambda: first_chat(store, True, a.max_tokens)}, a.rounds)
    med = {f"{k} {side}": statistics.median(t[i] for t in r) for side, r in sides.items()
           for i, k in enumerate(("ttft_ms", "total_ms"))}
    ratios = {f"{k} fresh/kept": med[f"{k} fresh"] / med[f"{k} kept"] for k in ("ttft_ms", "total_ms")}
    for side in sides:
        print(f"{side:>5}: first chat TTFT {med[f'ttft_ms {side}']:.0f} ms, whole answer "
              f"{med[f'total_ms {side}']:.0f} ms (median of {a.rounds})")
    print(f"fresh/kept: TTFT x{ratios['ttft_ms fresh/kept']:.2f}, whole answer x{ratios['total_ms fresh/kept']:.2f}")
    return Record("first_request", {"max_tokens": a.max_tokens, "rounds": a.rounds, "threads": 2},
                  samples=[{"side": s, "round": i, "ttft_ms": t, "total_ms": e}
                           for s, r in sides.items() for i, (t, e) in enumerate(r)],
                  medians=med, ratios=ratios, model={"path": path})
