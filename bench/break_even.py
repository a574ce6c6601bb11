"""Where a published DFlash draft pays on this processor, at the real shapes (issue 53, item 4).

For each catalog entry with a published draft (qwen3.5-4b, qwen3-8b): the target as random weights of
its real shape, quantized as published (gguf_tools/random_targets/real.py, written once into --dir),
and a random plain DFlash draft of the published draft's shape (five layers, block 16), its matrices
in each of --draft-dtypes. One engine per entry holds the target and every draft copy (the copies as
extra modes). Each round decodes the same prompt plainly and with each copy (alternated: plain, copy
1, copy 2, ...) at a fixed block of 16. A random draft is never accepted, so every speculative step
drafts as many tokens as the block and the answer's end allow: the answer's first --steps steps run
at B = 16, then each step one row narrower down to 2 (a path never runs past max_tokens), so one
answer times every block. What is timed, from outside the engine:

- c(k): the target's decode of k rows of one sequence (c(1) from the plain steps, c(B) from the
  verifies), milliseconds, median over its decodes;
- d(B): one draft call at block B (its KV injection of the last step's row and its block of B slots,
  whose logits come through the target's output matrix), median over its calls;
- break-even tau(B) = (c(B) + d(B)) / c(1): the tokens a step must commit to match plain decoding;
- the speed-up predicted at a published tau: tau_pub(B) c(1) / (c(B) + d(B)), where tau_pub(B) is
  the published block-16 tau carried to block B with one acceptance rate per position (a draft whose
  acceptance falls along the block, as DFlash's does, does better at small B than this says).

    .venv/bin/python -m bench break_even [--entries qwen3.5-4b,qwen3-8b] [--draft-dtypes bf16,q8_0]
        [--rounds 3] [--steps 2] [--threads 2] [--dir ~/.cache/flashdesk-bench/real]
    .venv/bin/python -m bench break_even --table   # the Markdown again from bench/out/break_even.json

Prints the Markdown table docs/speculative.md quotes (and keeps it in the record's .md).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench import lib
from bench.lib import GREEDY, Record
from engine import Engine, EngineConfig
from engine.speculative.drafters.dflash import DFlashDrafter
from engine.speculative.params import DFLASH, OFF, SpecParams
from gguf_tools.random_targets.real import DRAFT_BLOCK, DRAFT_LAYERS, write_real_draft, write_real_shape

# Published acceptance (tau: tokens committed per verify at block 16, greedy, thinking off) of z-lab's
# Qwen3-4B-DFlash-b16, measured by a third party on SGLang against Qwen/Qwen3-4B: MT-Bench (chat) 3.43,
# the mean over GSM8K, MATH-500, HumanEval, MBPP and MT-Bench 6.05. No figure was found for the
# Qwen3.5-4B or Qwen3-8B drafts (same recipe and block): the sibling's stand in for both.
PUBLISHED_TAU = {"chat": 3.43, "mean of 5": 6.05}
PROMPT = "Write a short note to a customer: their order of 500 flyers ships on Friday, and the invoice follows."


def rate_for(tau16: float, slots: int = DRAFT_BLOCK - 1) -> float:
    """The per-position acceptance a for which 1 + a + ... + a^slots = tau16 (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(slots + 1)) < tau16:
            lo = mid
        else:
            hi = mid
    return lo


def tau_at(tau16: float, block: int) -> float:
    """tau at block B (B-1 drafted tokens) with the acceptance rate fitted to the block-16 figure."""
    a = rate_for(tau16)
    return sum(a ** i for i in range(block))


class Timed:
    """Times each call of `obj.method` from outside (the engine knows nothing of it), keyed by
    `rows(args, result)`; None leaves the call out. Instance attributes: this object's calls only."""

    def __init__(self, obj, method: str, rows):
        self.ms: dict[int, list[float]] = {}
        inner = getattr(obj, method)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = inner(*args, **kwargs)
            k = rows(args, out)
            if k is not None:
                self.ms.setdefault(k, []).append((time.perf_counter() - t0) * 1e3)
            return out

        setattr(obj, method, timed)


def draft_block(args, proposals) -> int | None:
    """A draft call's block B, or None for a request's first call (it injects the prompt's rows)."""
    if any(p.inject_rows > DRAFT_BLOCK for p in proposals if not p.skipped):
        return None
    return args[1] + 1


def copy_factory(path: str, name: str, timers: dict):
    def make(model, drafters):
        d = DFlashDrafter(path, model)
        d.name = name  # a mode of its own beside the engine's own "dflash"
        timers[name] = Timed(d, "propose", draft_block)
        return d
    return make


def measure(entry: str, target: str, drafts: dict[str, str], blocks: list[int], rounds: int, steps: int,
            threads: int) -> dict:
    timers: dict[str, Timed] = {}
    modes = {dtype: f"{DFLASH}-{dtype}" for dtype in drafts}
    eng = Engine.load(target, EngineConfig(n_ctx=1024, n_parallel=1, n_threads=threads, spec_block=DRAFT_BLOCK,
                                           spec_mode=OFF),
                      drafters=[copy_factory(path, modes[d], timers) for d, path in drafts.items()])
    decodes = Timed(eng.ctx, "decode", lambda args, _: args[0].n)  # every decode of the target, by rows
    try:
        if not eng.speculation.enabled:
            raise SystemExit(f"{entry}: speculation is off on this build ({eng.speculation.exactness})")
        ids = eng.tokenize_prompt(eng.render_chat([{"role": "user", "content": PROMPT}]))
        eng.complete(ids, sampling=GREEDY, max_tokens=2, speculative=SpecParams(mode=OFF))  # warm-up
        for r in range(rounds):
            for mode in (OFF, *modes.values()):  # B = 16 for `steps` steps, then 15, 14, ..., 2, 1
                eng.complete(ids, sampling=GREEDY, max_tokens=steps + DRAFT_BLOCK,
                             speculative=SpecParams(mode=mode, block=DRAFT_BLOCK))
            print(f"{entry}: round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        eng.close()
    c1 = statistics.median(decodes.ms[1])
    rows = []
    for dtype, mode in modes.items():
        for b in blocks:
            cb, db = statistics.median(decodes.ms[b]), statistics.median(timers[mode].ms[b])
            even = (cb + db) / c1
            rows.append({"dtype": dtype, "block": b, "c_ms": round(cb, 1), "d_ms": round(db, 1),
                         "c_ratio": round(cb / c1, 2), "break_even_tau": round(even, 2),
                         "predicted": {k: round(tau_at(t, b) / even, 2) for k, t in PUBLISHED_TAU.items()}})
    return {"entry": entry, "c1_ms": round(c1, 1), "plain_tok_s": round(1e3 / c1, 2), "rows": rows,
            "draft_bytes": {d: os.path.getsize(p) for d, p in drafts.items()}}


def table(result: dict) -> str:
    names = list(PUBLISHED_TAU)
    lines = []
    for e in result["entries"]:
        lines.append(f"\n**{e['entry']}**: plain {e['plain_tok_s']} tokens/s (c(1) = {e['c1_ms']} ms); "
                     f"draft files {', '.join(f'{d} {b / 2**30:.2f} GiB' for d, b in e['draft_bytes'].items())}\n")
        lines.append("| draft | B | c(B)/c(1) | d(B) ms | break-even tau | "
                     + " | ".join(f"tau_pub(B), {n} | speed-up, {n}" for n in names) + " |")
        lines.append("|---" * (5 + 2 * len(names)) + "|")
        for r in e["rows"]:
            cells = " | ".join(f"{tau_at(PUBLISHED_TAU[n], r['block']):.2f} | {r['predicted'][n]:.2f}x" for n in names)
            lines.append(f"| {r['dtype']} | {r['block']} | {r['c_ratio']} | {r['d_ms']} | {r['break_even_tau']} "
                         f"| {cells} |")
    return "\n".join(lines)


def add_arguments(ap) -> None:
    ap.add_argument("--entries", default=",".join(DRAFT_LAYERS))
    ap.add_argument("--draft-dtypes", default="bf16,q8_0")
    ap.add_argument("--blocks", default=",".join(str(b) for b in range(2, DRAFT_BLOCK + 1)))
    ap.add_argument("--steps", type=int, default=2, help="steps at B = 16 before the answer's end narrows them")
    ap.add_argument("--dir", default=os.path.expanduser("~/.cache/flashdesk-bench/real"))
    ap.add_argument("--table", action="store_true", help="print the table of --out again")


def run(a) -> Record | int:
    if a.table:
        print(table(json.loads(lib.out_json(a.out).read_text())))
        return 0
    smollm2 = lib.test_model("smollm2").path
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    blocks = [int(b) for b in a.blocks.split(",")]
    entries = []
    for entry in a.entries.split(","):
        target = folder / f"{entry}.gguf"
        if not target.exists():
            print(f"writing a random {entry} of its real shape into {folder} (minutes)", file=sys.stderr)
            write_real_shape(target, entry, tokenizer_from=smollm2)
        drafts = {}
        for dtype in a.draft_dtypes.split(","):
            path = folder / f"{entry}-draft-{dtype}.gguf"
            if not path.exists():
                write_real_draft(path, entry, target, matrix_dtype=dtype)
            drafts[dtype] = str(path)
        entries.append(measure(entry, str(target), drafts, blocks, a.rounds, a.steps, a.threads))
    result = {"entries": entries, "published_tau": PUBLISHED_TAU}
    print(table(result))
    return Record("break_even", {"entries": a.entries, "draft_dtypes": a.draft_dtypes, "blocks": a.blocks,
                                 "rounds": a.rounds, "steps": a.steps, "threads": a.threads},
                  samples=[{"entry": e["entry"], **r} for e in entries for r in e["rows"]],
                  medians={f"c1_ms {e['entry']}": e["c1_ms"] for e in entries}, figures=result,
                  markdown=table(result))
