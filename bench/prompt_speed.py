"""Prompt processing, side by side: flashdesk's engine against stock llama-server, same GGUF,
same prompt tokens, per weight type (issue 51, item 2).

    .venv/bin/python -m bench prompt_speed [--quants Q4_K_M,Q4_0,Q8_0] [--tokens 512]
        [--rounds 3] [--layers 4] [--threads N] [--out bench/out/prompt_speed]

Models: random llamas 2048 wide (bench/gpu_check.py's writer, SmolLM2's tokenizer), `--layers`
deep, one per weight type, written once into the test home. A prompt's speed per layer is what
a deeper model has too; tokens/s scale with the depth.
Sides, alternated A B A B with the order rotating each round:
- `flashdesk`: an engine in this process (spec off), one plain request of `--tokens` prompt
  tokens and one answer token; its prompt time is the request's `prefill_ms` (submit to first
  token). The prompt is cut as the engine cuts it (engine/chunks.py): aligned chunks decoded alone
  where the model's prompt rows depend on the decode.
- `llama-server`: the stock build of the pinned llama.cpp (bench/llama_server.py), one slot,
  `/completion` with the same token ids, `cache_prompt` false, one token; its `timings.prompt_ms`.
Every prompt starts with BOS and is new (a salt per measurement): nothing is reused but BOS (where a
kept prefix is reused to the token), and the rate counts only the tokens decoded.
Prints tokens/s medians per side and the median of flashdesk / llama-server per round.

    .venv/bin/python -m bench prompt_speed --chunk-sizes 64,512 [--quants Q4_K_M]

times the prompt on a bare context instead, cut into chunks of each size (A B A B): what the
engine's aligned chunks (engine/chunks.py: CHUNK) cost against one chunk of a whole batch.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import lib
from bench.harness import test_home
from bench.lib import Record, rotation

WIDTH = 2048


def model_file(quant: str, layers: int, tokenizer_from: str) -> Path:
    out = test_home() / "anchor" / f"random-{layers}x{WIDTH}-{quant.lower()}.gguf"
    if not out.exists():  # written once, under a part name so a killed write is not taken
        from bench.gpu_check import random_model
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(f"{out.stem}.part.gguf")
        print(f"writing {out} ...", file=sys.stderr)
        random_model(part, layers, WIDTH, tokenizer_from=tokenizer_from, quant=quant)
        os.replace(part, out)
    return out


def prompt(n: int, salt: int, bos: int, n_vocab: int) -> list[int]:
    return [bos] + [(7919 * i + 104729 * salt + 12345) % (n_vocab - 300) + 200 for i in range(1, n)]


def flashdesk_side(gguf: Path, threads: int):
    from bench.lib import GREEDY
    from engine import Completion, Engine, EngineConfig
    from engine.speculative.params import SpecParams

    eng = Engine.load(str(gguf), EngineConfig(n_ctx=2048, n_parallel=1, n_threads=threads, spec_mode="off"))
    # an idle engine times its decode costs (costs.FillIn): done first, so it never runs beside the other side
    if eng.speculation.enabled and not eng.speculation.curve_ready.wait(timeout=900):
        raise TimeoutError("the engine's idle measurement of its decode costs did not finish")

    def run(tokens: list[int]) -> float:
        c = Completion.collect(iter(eng.generate(tokens, max_tokens=1, sampling=GREEDY,
                                                 speculative=SpecParams(mode="off"))))
        assert c.usage.cached_tokens <= 1, c.usage  # BOS, which every prompt shares, at most
        return c.usage.prefill_ms * len(tokens) / (len(tokens) - c.usage.cached_tokens)
    return eng, run


def llama_server_side(gguf: Path, threads: int, log: Path):
    import httpx

    from bench.anchor import LlamaServer
    from bench.llama_server import ensure_llama_server

    srv = LlamaServer(ensure_llama_server(native=False), gguf, 1, 2048, threads, log)
    srv.wait_ready()

    def run(tokens: list[int]) -> float:
        r = httpx.post(f"{srv.base}/completion", timeout=600, json={
            "prompt": tokens, "n_predict": 1, "cache_prompt": False, "temperature": 0})
        r.raise_for_status()
        t = r.json()["timings"]
        assert t["prompt_n"] == len(tokens), t
        return t["prompt_ms"]
    return srv, run


def chunk_curve(gguf: Path, sizes: list[int], tokens: int, rounds: int, threads: int) -> dict[int, list[float]]:
    """Prompt tokens/s on a bare context, the prompt cut into chunks of each size, sizes alternated."""
    from engine.llama.context import Context, ContextConfig
    from engine.llama.model import Model

    model = Model(str(gguf))
    ctx = Context(model, ContextConfig(n_ctx_seq=max(tokens, 256), n_seq=1, n_batch=max(sizes), n_threads=threads))
    bos = model.bos_id if model.bos_id >= 0 else 1
    out: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for r in range(rounds):
            for size in sizes if r % 2 == 0 else sizes[::-1]:
                toks = prompt(tokens, r, bos, model.n_vocab)
                ctx.forget(0)
                t0 = time.perf_counter()
                for start in range(0, tokens, size):
                    ctx.batch.clear()
                    for j in range(start, min(tokens, start + size)):
                        ctx.batch.add(toks[j], j, 0, logits=j == tokens - 1)
                    ctx.decode(ctx.batch)
                out[size].append(tokens / (time.perf_counter() - t0))
                print(f"round {r + 1} chunks of {size}: {out[size][-1]:.1f} tok/s", file=sys.stderr)
    finally:
        ctx.close()
        model.close()
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--quants", default="Q4_K_M,Q4_0,Q8_0")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--chunk-sizes", default="", help="time chunk sizes on a bare context instead, e.g. 64,512")


def run(a) -> Record:
    smollm2 = lib.test_model("smollm2").path  # its tokenizer goes into the random models
    results = []
    quants = [q for q in a.quants.split(",") if q]
    if a.chunk_sizes:
        sizes = [int(n) for n in a.chunk_sizes.split(",")]
        print("| weights | " + " | ".join(f"chunks of {n}, tok/s" for n in sizes) + " |")
        print("|---" * (len(sizes) + 1) + "|")
        curves = {}
        for quant in quants:
            curve = chunk_curve(model_file(quant, a.layers, smollm2), sizes, a.tokens, a.rounds, a.threads)
            curves[quant] = curve
            print(f"| {quant} | " + " | ".join(f"{statistics.median(curve[n]):.1f}" for n in sizes) + " |")
        return Record("prompt_speed --chunk-sizes", params(a),
                      samples=[{"quant": q, "chunk": n, "tok_s": v} for q, c in curves.items() for n, v in c.items()],
                      medians={f"{q} chunks of {n}": statistics.median(v) for q, c in curves.items()
                               for n, v in c.items()})
    for quant in quants:
        gguf = model_file(quant, a.layers, smollm2)
        with tempfile.TemporaryDirectory(prefix="flashdesk-prompt-speed-") as tmp:
            eng, fd = flashdesk_side(gguf, a.threads)
            srv, ls = llama_server_side(gguf, a.threads, Path(tmp) / "llama-server.log")
            try:
                sides = {"flashdesk": fd, "llama-server": ls}
                bos = eng.model.bos_id if eng.model.bos_id >= 0 else 1
                for run in sides.values():  # untimed warm-up
                    run(prompt(64, 0, bos, eng.model.n_vocab))
                ms: dict[str, list[float]] = {s: [] for s in sides}
                for r in range(a.rounds):
                    for i, side in enumerate(rotation(list(sides), r)):
                        time.sleep(0.5)  # the other side's threads stop spinning
                        ms[side].append(sides[side](prompt(a.tokens, 1 + 2 * r + i, bos, eng.model.n_vocab)))
                        print(f"{quant} round {r + 1} {side}: {a.tokens / ms[side][-1] * 1000:.1f} tok/s",
                              file=sys.stderr)
                chunks = eng.chunks
            finally:
                srv.stop()
                eng.close()
        tps = {s: [a.tokens / m * 1000.0 for m in v] for s, v in ms.items()}
        ratio = statistics.median(ours / stock for ours, stock in zip(tps["flashdesk"], tps["llama-server"]))
        results.append({"quant": quant, "gguf": str(gguf), "tok_s": tps,
                        "median": {s: statistics.median(v) for s, v in tps.items()}, "ratio": ratio,
                        "chunks": {"aligned": chunks.aligned, "size": chunks.size}})
    print("| weights | llama-server tok/s | flashdesk tok/s | flashdesk / llama-server | prompt chunks |")
    print("|---|---|---|---|---|")
    for x in results:
        cut = f"aligned, {x['chunks']['size']}" if x["chunks"]["aligned"] else "any"
        print(f"| {x['quant']} | {x['median']['llama-server']:.1f} | {x['median']['flashdesk']:.1f} | "
              f"{x['ratio']:.2f}x | {cut} |")
    return Record("prompt_speed", params(a), samples=[{"quant": x["quant"], **x["tok_s"]} for x in results],
                  medians={f"{x['quant']} {s}": v for x in results for s, v in x["median"].items()},
                  ratios={f"{x['quant']} flashdesk/llama-server": x["ratio"] for x in results},
                  figures={"results": results})


def params(a) -> dict:
    return {"quants": a.quants, "tokens": a.tokens, "rounds": a.rounds, "layers": a.layers, "threads": a.threads,
            "chunk_sizes": a.chunk_sizes}
