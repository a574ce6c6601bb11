"""What a work order's copy fields cost before the model runs: the per-request grammar (x-copy,
engine/grammar/copy.py) for messages of growing length, in its parts, median of alternated rounds.

    .venv/bin/python -m bench copy_grammar [--chars 500,2000,8000] [--rounds 5]

Parts: the substring automaton and its GBNF (`Constraint.grammar_for`), llama.cpp's check of the
grammar against the vocabulary (the engine's submit), the request's grammar sampler (a slot's
start), and the grammar drafter's parse (gbnf.parse, once per grammar). The message is the dev
work orders' texts joined, cut to the length; the template is the built-in `work_order`.
"""

from __future__ import annotations

import statistics
import time

from bench import datasets, lib
from bench.lib import Record
from engine.grammar import gbnf
from engine.llama.grammar import Grammar
from engine.llama.model import Model
from server.workorders.templates import TemplateStore


def add_arguments(ap) -> None:
    ap.add_argument("--chars", default="500,2000,8000")
    ap.set_defaults(rounds=5)


def run(a) -> Record:
    path = lib.model_path(a.model)
    model = Model(path)
    template = TemplateStore(None).get("work_order")
    corpus = "\n\n".join(c["text"] for c in datasets.workorders())
    sizes = [int(n) for n in a.chars.split(",")]
    times: dict[int, dict[str, list[float]]] = {n: {} for n in sizes}
    for r in range(a.rounds):
        for n in sizes if r % 2 == 0 else reversed(sizes):  # alternated: A B A B
            text = (corpus * (n // len(corpus) + 1))[:n] + f" {r}"  # a new text each round: no cache helps
            t0 = time.perf_counter()
            grammar = template.constraint.grammar_for([text])
            t1 = time.perf_counter()
            Grammar.check(model.vocab, grammar)
            t2 = time.perf_counter()
            Grammar(model.vocab, model.n_vocab, grammar, piece=model.piece).free()
            t3 = time.perf_counter()
            gbnf.parse(grammar)
            t4 = time.perf_counter()
            for part, s in (("automaton+gbnf", t1 - t0), ("llama check", t2 - t1), ("sampler", t3 - t2),
                            ("drafter parse", t4 - t3), ("total", t4 - t0)):
                times[n].setdefault(part, []).append(s * 1000.0)
    print(f"{'chars':>6} " + " ".join(f"{p:>15}" for p in times[sizes[0]]) + "   (ms, median)")
    for n in sizes:
        print(f"{n:6d} " + " ".join(f"{statistics.median(v):15.1f}" for v in times[n].values()))
    model.close()
    return Record("copy_grammar", {"chars": sizes, "rounds": a.rounds},
                  samples=[{"chars": n, "part": part, "ms": v} for n in sizes for part, v in times[n].items()],
                  medians={f"{part} {n}": statistics.median(v) for n in sizes for part, v in times[n].items()},
                  model={"path": path})
