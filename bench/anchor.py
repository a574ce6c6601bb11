"""The anchor, side by side in one command: stock llama-server against flashdesk (off and auto)
on the same GGUF, prompts and work orders, greedy, at 1, 4 and 8 concurrent clients (issue 51).

    .venv/bin/python -m bench anchor [--model smollm2|random-1.6b] [--loads chat,workorders]
        [--clients 1,4,8] [--rounds 3] [--max-tokens N] [--sides llama-server,off,auto]
        [--native|--portable] [--ctx 4096] [--threads N] [--llama-server-args '--poll 0'] [--out bench/out/anchor]

Sides: `llama-server`, built from the pinned llama.cpp source without flashdesk's patches
(`python -m bench llama_server`, built once per machine and cached like the wheel) and run with its own
settings for this load (one slot per client, continuous batching and prompt cache on, as it
ships); `off` and `auto`: one `flashdesk serve`, each request asking its speculation mode. Both
servers get the same threads, slots (the largest client count) and context per slot, and run for
the whole bench. Each round, each client count, the sides take turns in an order that rotates.

Loads: `chat`, 8 dev prompts (as `--prompts 8` picks them); `workorders`, the dev work orders as the
work-order route prompts them, sent to both servers as chat completions with the template's schema
as `response_format` (json_schema): the work-order route itself exists on flashdesk only.
With c clients, c threads take requests from one shared list until it is empty: every side runs
the same requests. Per cell: aggregate completion tokens/s (tokens / the batch's wall time),
time to first token and latency (p50/p95, over every request of every round), the ratio
flashdesk / llama-server (median of the rounds' ratios), and whether greedy texts matched: off and
auto must (lossless), llama-server's may differ (another chat renderer, its own kernels).
The record's .md has the table (printed too).

Models: `smollm2` (the test cache's, with its paired draft) and `random-1.6b`: 28 layers x 2048,
random Q4_K_M weights, SmolLM2's tokenizer (bench/gpu_check.py's writer, cached in the test home);
real shape and speed, no meaning, no draft (its `auto` is plain decoding). Not a quality benchmark;
a shared machine is noisy: quote the ratios.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import datasets, lib
from bench.harness import ROOT, ServerProcess, free_port, linked_home, test_home
from bench.lib import Record
from bench.llama_server import build_info, ensure_llama_server, llama_source

SIDES = ("llama-server", "off", "auto")
MAX_TOKENS = {"smollm2": 128, "random-1.6b": 32}
LABEL = {"llama-server": "llama-server", "off": "flashdesk off", "auto": "flashdesk auto"}


# ---- numbers: pure, tested in tests/bench/test_anchor.py --------------------------------------

def percentile(xs: list[float], q: float) -> float | None:
    """Linear between the closest ranks (numpy's default), so p50 is the median."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def rotation(sides: list[str], turn: int) -> list[str]:
    """The sides in this turn's order: each takes every place in turn, none is always first."""
    k = turn % len(sides)
    return sides[k:] + sides[:k]


def cell_summary(batches: dict[str, list[dict]], ref: str = "llama-server") -> dict:
    """One (model, load, clients) cell from its batches per side (one per round, each with
    `tokens`, `seconds` and `requests`: [{"ttft", "latency", "text", ...}], in request order)."""
    out: dict = {}
    for side, runs in batches.items():
        reqs = [q for b in runs for q in b["requests"]]
        ttft = [q["ttft"] for q in reqs if q["ttft"] is not None]
        lat = [q["latency"] for q in reqs]
        rates = [b["tokens"] / b["seconds"] for b in runs]
        prompt_rates = [b["prompt_tokens"] / b["seconds"] for b in runs if b.get("prompt_tokens")]
        out[side] = {"tok_per_s": statistics.median(rates), "rounds_tok_per_s": rates,
                     "prompt_tok_per_wall_s": statistics.median(prompt_rates) if prompt_rates else None,
                     "ttft_p50": percentile(ttft, 50), "ttft_p95": percentile(ttft, 95),
                     "latency_p50": percentile(lat, 50), "latency_p95": percentile(lat, 95)}
    if ref in batches:
        for side in batches:
            if side != ref:  # paired by round: the rounds share the machine's moods
                rs = [b["tokens"] / b["seconds"] / (r["tokens"] / r["seconds"])
                      for b, r in zip(batches[side], batches[ref])]
                out[side]["ratio"] = statistics.median(rs)
    out["same_text"] = same_texts(batches)
    return out


def same_texts(batches: dict[str, list[dict]]) -> dict:
    """Per pair of sides: how many requests gave the same text, of how many."""
    pairs = {}
    sides = list(batches)
    for i, a in enumerate(sides):
        for b in sides[i + 1:]:
            texts = [(x["text"], y["text"]) for ra, rb in zip(batches[a], batches[b])
                     for x, y in zip(ra["requests"], rb["requests"])]
            pairs[f"{a}={b}"] = {"equal": sum(x == y for x, y in texts), "of": len(texts)}
    return pairs


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(cells: list[dict], sides: list[str]) -> str:
    """The table: one row per (model, load, clients); flashdesk's tok/s with its ratio to llama-server."""
    head = (["model", "load", "clients"] + [f"{LABEL[s]} tok/s" + (" (ratio)" if s != "llama-server" else "")
                                            for s in sides]
            + ["TTFT p50 s (" + " / ".join(sides) + ")", "p95 latency s (" + " / ".join(sides) + ")"])
    if "off" in sides and "auto" in sides:
        head.append("off = auto texts")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells:
        s = c["summary"]
        row = [c["model"], c["load"], str(c["clients"])]
        for side in sides:
            v = _f(s[side]["tok_per_s"])
            if "ratio" in s[side]:
                v += f" ({s[side]['ratio']:.2f}x)"
            row.append(v)
        row.append(" / ".join(_f(s[side]["ttft_p50"], "{:.2f}") for side in sides))
        row.append(" / ".join(_f(s[side]["latency_p95"], "{:.2f}") for side in sides))
        if "off" in sides and "auto" in sides:
            eq = s["same_text"]["off=auto"]
            row.append(f"{eq['equal']}/{eq['of']}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


# ---- the servers ---------------------------------------------------------------------------

class LlamaServer:
    """Stock llama-server on a free loopback port, its log in `log_path`."""

    def __init__(self, binary: Path, gguf: Path, slots: int, ctx: int, threads: int, log_path: Path,
                 extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # -np given (not auto) keeps the KV per slot, ctx each, like flashdesk's; continuous batching,
        # the prompt cache and the Jinja chat template are on by default
        self.cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port),
                    "-np", str(slots), "-c", str(ctx * slots), "-t", str(threads), "--temp", "0", "--no-webui", *extra]
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600) -> None:
        import httpx
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}): see {self.log_path}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"llama-server was not ready after {timeout:.0f} s: see {self.log_path}")

    stop = ServerProcess.stop  # terminate, kill after 20 s, close the log: the same fields


# ---- the requests --------------------------------------------------------------------------

def one(client, model: str, side: str, req: dict, max_tokens: int) -> dict:
    """One streamed chat completion: its text, tokens, time to first content and total time."""
    extra = {} if side == "llama-server" else {"speculative": {"mode": side}}
    kw = {"response_format": req["response_format"]} if req.get("response_format") else {}
    t0 = time.perf_counter()
    ttft, parts, usage = None, [], None
    for chunk in client.chat.completions.create(model=model, messages=req["messages"], temperature=0,
                                                max_tokens=max_tokens, stream=True, extra_body=extra,
                                                stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta and ch.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                parts.append(ch.delta.content)
    latency = time.perf_counter() - t0
    return {"id": req["id"], "text": "".join(parts), "ttft": ttft, "latency": latency,
            "completion_tokens": usage.completion_tokens if usage else None,
            "prompt_tokens": usage.prompt_tokens if usage else None}


def batch(client, model: str, side: str, reqs: list[dict], clients: int, max_tokens: int) -> dict:
    """`clients` threads drain one shared list of `reqs`; the answers in request order."""
    todo: queue.Queue = queue.Queue()
    for item in enumerate(reqs):
        todo.put(item)
    done: list = [None] * len(reqs)
    errors: list = []

    def worker():
        while True:
            try:
                i, r = todo.get_nowait()
            except queue.Empty:
                return
            try:
                done[i] = one(client, model, side, r, max_tokens)
            except Exception as e:  # noqa: BLE001  (reported after the batch, not lost in a thread)
                errors.append(e)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return {"seconds": secs, "tokens": sum(q["completion_tokens"] or 0 for q in done),
            "prompt_tokens": sum(q["prompt_tokens"] or 0 for q in done), "requests": done,
            "load_avg_1min": os.getloadavg()[0]}  # a neighbour's job shows here, not in the medians


# ---- the loads and models ------------------------------------------------------------------

def chat_load() -> list[dict]:
    return [{"id": p.get("id"), "messages": p["messages"]} for p in datasets.prompts(8)]  # serve's part C too


def workorder_load(n: int) -> list[dict]:
    """The dev work orders as the work-order route prompts them, the template's schema as the format."""
    import datetime as dt

    from server.workorders import prompt
    from server.workorders.templates import TemplateStore
    t = TemplateStore(None).get("work_order")
    cases = datasets.workorders()[:n]
    fmt = {"type": "json_schema", "json_schema": {"name": t.name, "schema": t.schema}}
    return [{"id": c["id"], "messages": prompt.messages(t, c["text"], dt.date.fromisoformat(c["sent"])),
             "response_format": fmt} for c in cases]


def model_file(name: str, store) -> Path:
    """The GGUF both servers load."""
    smollm2 = Path(store.get("smollm2").path)
    if name == "smollm2":
        return smollm2
    out = test_home() / "anchor" / "random-1.6b-q4_k_m.gguf"
    if not out.exists():  # written once (minutes), under a part name so a killed write is not taken
        from bench.gpu_check import random_model
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name("random-1.6b.part.gguf")
        print(f"writing {out} (28 layers x 2048, random Q4_K_M) ...", file=sys.stderr)
        random_model(part, 28, 2048, tokenizer_from=str(smollm2))
        os.replace(part, out)
    return out


def flashdesk_build() -> dict:
    """What the .venv's llama-cpp-python was built with (scripts/setup.sh's stamp)."""
    stamp = ROOT / ".venv" / "llama-cpp-flags"
    flags = stamp.read_text().strip() if stamp.exists() else ""
    return {"flags": flags, "native": "GGML_NATIVE=OFF" not in flags, "patched": True}


# ---- the run -------------------------------------------------------------------------------

def add_arguments(ap) -> None:
    ap.add_argument("--loads", default="chat,workorders")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--max-tokens", type=int, help="default: 128 for smollm2, 32 for random-1.6b")
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--workorders", type=int, default=8, help="dev work orders in the workorders load")
    ap.add_argument("--ctx", type=int, default=4096, help="context per slot, both servers")
    ap.add_argument("--llama-server-args", default="", help="extra llama-server flags, e.g. '--poll 0'")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--native", dest="native", action="store_true", default=None, help="llama-server: GGML_NATIVE on")
    g.add_argument("--portable", dest="native", action="store_false", help="llama-server: GGML_NATIVE=OFF")
    ap.set_defaults(model="smollm2")


def run(a) -> Record:
    if a.model not in MAX_TOKENS:
        raise SystemExit(f"anchor: --model is one of {', '.join(MAX_TOKENS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill runs the finally below too

    import openai

    from engine.models.store import ModelStore

    sides = [s for s in a.sides.split(",") if s]
    counts = [int(n) for n in a.clients.split(",") if n]
    loads = [x for x in a.loads.split(",") if x]
    max_tokens = a.max_tokens or MAX_TOKENS[a.model]
    fd_build = flashdesk_build()
    native = fd_build["native"] if a.native is None else a.native  # default: like flashdesk's own build
    lib.test_model("smollm2")
    store = ModelStore(test_home())
    gguf = model_file(a.model, store)
    requests = {"chat": chat_load} | {"workorders": lambda: workorder_load(a.workorders)}
    reqs = {name: requests[name]() for name in loads}
    slots = max(counts)

    tmp = tempfile.TemporaryDirectory(prefix="flashdesk-anchor-")
    home = Path(tmp.name) / "home"
    servers: dict = {}
    clients, names = {}, {}
    try:
        if "llama-server" in sides:
            binary = ensure_llama_server(native)
            log = lib.out_base(a.out).with_name(lib.out_base(a.out).name + "-llama-server.log")  # kept: says why
            log.parent.mkdir(parents=True, exist_ok=True)
            servers["llama-server"] = LlamaServer(binary, gguf, slots, a.ctx, a.threads, log,
                                                  tuple(shlex.split(a.llama_server_args)))
        if {"off", "auto"} & set(sides):
            if a.model == "smollm2":  # by store name: its paired draft comes along
                fd = ServerProcess(linked_home(home, store), "--model", "smollm2", "--parallel", str(slots),
                                   "--ctx", str(a.ctx), "--threads", str(a.threads))
            else:
                home.mkdir(parents=True)
                fd = ServerProcess(home, "--model", str(gguf), "--parallel", str(slots), "--ctx", str(a.ctx),
                                   "--threads", str(a.threads))
            servers["flashdesk"] = fd
        for name, srv in servers.items():
            srv.wait_ready(timeout=900)
            c = openai.OpenAI(base_url=f"{srv.base}/v1", api_key="none", max_retries=0, timeout=900)
            model_id = c.models.list().data[0].id
            for side in sides:
                if (side == "llama-server") == (name == "llama-server"):
                    clients[side], names[side] = c, model_id
        for side in sides:  # untimed: templates, grammars and prompt prefixes warm on every side
            for load in loads:
                one(clients[side], names[side], side, reqs[load][0], 8)
        samples = {(load, n): {s: [] for s in sides} for load in loads for n in counts}
        for r in range(a.rounds):
            for load in loads:
                for i, n in enumerate(counts):
                    for side in rotation(sides, r + i):
                        b = batch(clients[side], names[side], side, reqs[load], n, max_tokens)
                        samples[(load, n)][side].append(b)
                        print(f"round {r + 1}/{a.rounds} {load} c={n} {side}: {b['tokens'] / b['seconds']:.1f} tok/s",
                              file=sys.stderr)
    finally:
        for srv in servers.values():
            srv.stop()
        tmp.cleanup()

    cells = [{"model": a.model, "load": load, "clients": n, "summary": cell_summary(samples[(load, n)]),
              "samples": samples[(load, n)]} for load in loads for n in counts]
    table = markdown(cells, sides)
    print(table)
    bad = sum(c["summary"]["same_text"].get("off=auto", {}).get("of", 0)
              - c["summary"]["same_text"].get("off=auto", {}).get("equal", 0) for c in cells)
    print(f"off and auto texts that differ: {bad}")
    return Record("anchor", {"model": a.model, "loads": loads, "clients": counts, "rounds": a.rounds,
                             "max_tokens": max_tokens, "sides": sides, "ctx_per_slot": a.ctx, "slots": slots,
                             "threads": a.threads, "llama_server_native": native, "workorders": a.workorders},
                  figures={"llama_cpp_python": llama_source.pinned_version(),
                           "llama_server_build": build_info(binary) if "llama-server" in sides else None,
                           "flashdesk_build": fd_build,
                           "llama_server_cmd": servers["llama-server"].cmd if "llama-server" in servers else None,
                           "cells": cells},
                  markdown=table, ok=not bad, model={"path": str(gguf)})
