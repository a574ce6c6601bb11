"""The CPU tier's speed prediction against the speed measured, on this machine (issue 44).

Every catalog entry offered to a computer without a graphics card (`cpu`) is measured: SmolLM2 as
its own file, the others as random targets of their real shapes, quantized as published
(gguf_tools/random_targets/real.py; written once into --dir, a few minutes each). The prediction
(engine/advisor/speed.py) comes from one measurement with SmolLM2, the model a new install serves
(engine/advisor/measure.py), exactly as the Models page makes it. Entries alternate round by round
(A B C D, A B C D, ...); each figure is a median over rounds. One "work order" is what speed.py
prices: WORK_ORDER_PROMPT_TOKENS read in one batch, then WORK_ORDER_ANSWER_TOKENS decoded one by
one; its decode phase gives tokens a second.

Then the recommendation per computer (engine/advisor/tiers.py): RAM 8/16/32 GB without a graphics card
at this machine's memory rate, at half and at a quarter of it, and with an 8 GB and a 24 GB graphics
card (table() says why cores share a row).

`--tokens` instead prints the work-order token counts speed.py uses: medians over the dev cases
(tests/data/workorders-dev.jsonl) of the tokens an order adds after the shared prompt (the system
prompt and worked examples, whose KV is reused) and of its expected JSON, in SmolLM2's tokenizer.

    .venv/bin/python -m bench cpu_tier [--rounds 3] [--threads 2] [--dir ~/.cache/flashdesk-bench/real]
    .venv/bin/python -m bench cpu_tier --tokens
    .venv/bin/python -m bench cpu_tier --table   # the table again from bench/out/cpu_tier.json's rates
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

from bench import datasets, lib
from bench.harness import test_home
from bench.lib import Record
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.models import catalog
from engine.advisor import measure, speed, tiers
from engine.models.store import ModelStore
from gguf_tools.random_targets.real import SHAPES, write_real_shape
from server.settings import ENGINE_DEFAULTS

GIB = 1 << 30


def work_order(model: Model, threads: int) -> tuple[float, float]:
    """(seconds, decode tokens a second) of one work order as speed.py prices it."""
    p, a = speed.WORK_ORDER_PROMPT_TOKENS, speed.WORK_ORDER_ANSWER_TOKENS
    ctx = Context(model, ContextConfig(n_ctx_seq=p + a + 8, n_seq=1, n_batch=512, n_threads=threads))
    toks = [(31 * i + 7) % model.n_vocab for i in range(p + a)]
    try:
        b = ctx.batch
        t0 = time.perf_counter()
        for s in range(0, p, b.capacity):
            b.clear()
            for j in range(s, min(p, s + b.capacity)):
                b.add(toks[j], j, 0, logits=j == p - 1)
            ctx.decode(b)
        t1 = time.perf_counter()
        for j in range(p, p + a):
            b.clear()
            b.add(toks[j], j, 0, logits=True)
            ctx.decode(b)
        t2 = time.perf_counter()
    finally:
        ctx.close()
    return t2 - t0, a / (t2 - t1)


def files(store: ModelStore, folder: Path) -> dict[str, str]:
    smollm2 = store.get(catalog.DEFAULT_MODEL).path
    out = {catalog.DEFAULT_MODEL: smollm2}
    offered = {e.name for e in catalog.load(None).entries.values() if e.cpu}
    for name in (n for n in SHAPES if n in offered):  # real.py also holds shapes of entries for graphics cards
        path = folder / f"{name}.gguf"
        if not path.exists():
            print(f"writing a random {name} of its real shape into {folder} (minutes)", file=sys.stderr)
            write_real_shape(path, name, tokenizer_from=smollm2)
        out[name] = str(path)
    return out


def compare(paths: dict[str, str], rounds: int, threads: int) -> tuple[speed.Rates, list[dict]]:
    """Each round measures this computer as the Models page does, then runs every entry; the
    prediction is made from the median measurement (a shared machine's memory rate drifts)."""
    models = {name: Model(p, n_gpu_layers=0) for name, p in paths.items()}
    runs: dict[str, list[tuple[float, float]]] = {n: [] for n in paths}
    measured: list[speed.Rates] = []
    try:
        for name in paths:
            work_order(models[name], threads)  # warm: page the file in once
        for r in range(rounds):
            measured.append(measure.measure(paths[catalog.DEFAULT_MODEL], threads))
            order = list(paths)[r % len(paths):] + list(paths)[:r % len(paths)]
            for name in order:
                runs[name].append(work_order(models[name], threads))
                print(f"round {r + 1} {name}: {runs[name][-1][1]:.2f} tok/s, {runs[name][-1][0]:.1f} s",
                      file=sys.stderr)
    finally:
        for m in models.values():
            m.close()
    rates = speed.Rates(*(statistics.median(getattr(m, f.name) for m in measured) for f in fields(speed.Rates)))
    rows = []
    for name, p in paths.items():
        want = speed.predict(os.path.getsize(p), rates)
        tok_s = statistics.median(r[1] for r in runs[name])
        wo_s = statistics.median(r[0] for r in runs[name])
        rows.append({"entry": name, "file_bytes": os.path.getsize(p),
                     "predicted_tok_s": round(want.tokens_per_s, 2), "measured_tok_s": round(tok_s, 2),
                     "tok_s_ratio": round(want.tokens_per_s / tok_s, 3),
                     "predicted_work_order_s": round(want.work_order_s, 1), "measured_work_order_s": round(wo_s, 1),
                     "work_order_ratio": round(want.work_order_s / wo_s, 3)})
    return rates, rows


def table(rates: speed.Rates, cells: int) -> list[dict]:
    """The recommendation per computer. Without a graphics card at this machine's rates, and with its
    memory at a half and a quarter of this rate (one memory channel; an older office PC). Cores
    enter through the measured weight rate only, and two threads here already reach about the
    memory rate, so 2, 4 and 8 cores share a row."""
    cat = catalog.load(None)
    rows = []
    variants = (("this memory", rates), ("half its rate", rates.with_memory(rates.memory_bytes_per_s / 2)),
                ("a quarter", rates.with_memory(rates.memory_bytes_per_s / 4)))
    for ram in (8, 16, 32):
        for label, r in variants:
            offers = tiers.offers(cat, tiers.Machine("cpu", "", ram * GIB), cells, r)
            best = next((o for o in offers if o.recommended), None)
            s = best.speed if best else None
            rows.append({"ram_gb": ram, "gpu": None, "memory": label,
                         "memory_gb_s": round(r.memory_bytes_per_s / 1e9, 1),
                         "recommended": best.name if best else None,
                         "words_per_s": round(s.words_per_s(), 1) if s else None,
                         "work_order_s": round(s.work_order_s) if s else None})
        for gpu, vram in (("8 GB graphics card", 8), ("24 GB graphics card", 24)):
            offers = tiers.offers(cat, tiers.Machine("gpu", gpu, vram * GIB), cells)
            best = next((o for o in offers if o.recommended), None)
            rows.append({"ram_gb": ram, "gpu": gpu, "recommended": best.name if best else None})
    return rows


def tokens(store: ModelStore) -> dict:
    from server.workorders.prompt import messages
    from server.workorders.templates import TemplateStore

    model = Model(store.get(catalog.DEFAULT_MODEL).path, n_gpu_layers=0)
    template = TemplateStore(None).get("work_order")
    added, answers = [], []
    try:
        for case in datasets.workorders():
            turn = messages(template, case["text"], dt.date.fromisoformat(case["sent"]))[-1]["content"]
            added.append(len(model.tokenize(turn, add_bos=False)) + 8)  # + the turn's role markers
            answers.append(len(model.tokenize(json.dumps(case["expected"], ensure_ascii=False), add_bos=False)))
    finally:
        model.close()
    return {"cases": len(added), "prompt_tokens_added": statistics.median(added),
            "answer_tokens": statistics.median(answers)}


def add_arguments(ap) -> None:
    ap.add_argument("--dir", default=os.path.expanduser("~/.cache/flashdesk-bench/real"))
    ap.add_argument("--tokens", action="store_true", help="the work-order token medians only")
    ap.add_argument("--table", action="store_true", help="recompute only the table, from --out's rates")


def run(a) -> Record | int:
    cells = ENGINE_DEFAULTS.n_ctx * ENGINE_DEFAULTS.n_parallel  # as the server allocates by default
    if a.table:
        rec = Record.from_json(json.loads(lib.out_json(a.out).read_text(encoding="utf-8")))
        rec.figures["table"] = table(speed.Rates(**rec.figures["rates"]), cells)
        print(json.dumps(rec.figures["table"], indent=1))
        return rec
    lib.test_model(catalog.DEFAULT_MODEL)  # pulled into the tests' cache once per machine
    store = ModelStore(test_home())
    if a.tokens:
        found = tokens(store)
        print(json.dumps(found, indent=1))
        return Record("cpu_tier --tokens", {}, medians=found, model={"path": store.get(catalog.DEFAULT_MODEL).path})
    folder = Path(a.dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = files(store, folder)
    rates, rows = compare(paths, a.rounds, a.threads)
    print(f"\nmeasured with SmolLM2 on {a.threads} threads (medians of {a.rounds}): "
          f"memory {rates.memory_bytes_per_s / 1e9:.1f} GB/s, weights {rates.weights_bytes_per_s / 1e9:.1f} GB/s, "
          f"decode {rates.decode_s * 1e3:.1f} ms (of which {rates.fixed_s * 1e3:.1f} ms fixed), "
          f"prefill {rates.prefill_s * 1e3:.2f} ms a token")
    print(f"\n{'entry':12} {'tok/s pred':>10} {'meas':>6} {'ratio':>6}  {'order s pred':>12} {'meas':>6} {'ratio':>6}")
    for r in rows:
        print(f"{r['entry']:12} {r['predicted_tok_s']:10.2f} {r['measured_tok_s']:6.2f} {r['tok_s_ratio']:6.2f}  "
              f"{r['predicted_work_order_s']:12.1f} {r['measured_work_order_s']:6.1f} {r['work_order_ratio']:6.2f}")
    return Record("cpu_tier", {"threads": a.threads, "rounds": a.rounds}, samples=rows,
                  medians={r["entry"]: r["measured_tok_s"] for r in rows},
                  ratios={r["entry"]: r["tok_s_ratio"] for r in rows},
                  figures={"rates": rates.__dict__, "entries": rows, "table": table(rates, cells)},
                  model={"path": paths.get(catalog.DEFAULT_MODEL) or store.get(catalog.DEFAULT_MODEL).path})
