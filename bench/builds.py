"""Two builds of llama.cpp's libraries, same model, same prompts: what a build choice costs.

The Linux package ships a portable build (GGML_NATIVE=OFF: an AVX2 baseline) where a build
for this very CPU could use more (AVX-512 here). Each measurement is a fresh process that
loads one build (LLAMA_CPP_LIB_PATH, engine/llama/build.py) and the model, warms up, then
times prompt processing (prefill) and plain greedy decoding on the dev prompts. Builds are
alternated A B, B A; medians and the B/A ratios are printed and written to the record.

    .venv/bin/python -m bench builds --b /path/to/other/llama_cpp/lib [--a FOLDER] [--rounds 5]

A defaults to the venv's own llama_cpp/lib. A folder for B: unpack a wheel built with other
flags (pip wheel llama-cpp-python==0.3.36 with CMAKE_ARGS) and point at its llama_cpp/lib.
Speed is noisy on a shared 2-core machine: quote the ratios, not the absolute numbers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench import lib
from bench.harness import ROOT
from bench.lib import Record

# One measurement, run in a child so each build is the only one loaded in its process.
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench import datasets
from bench.lib import GREEDY as greedy
from engine import Engine, EngineConfig
from engine.speculative.params import SpecParams
import llama_cpp

eng = Engine.load(sys.argv[2], EngineConfig(n_ctx=2048, n_threads=int(sys.argv[5])))
plain = SpecParams(mode="off")
prompts = datasets.prompts(int(sys.argv[3]))
eng.chat(prompts[0]["messages"], sampling=greedy, max_tokens=8, speculative=plain)  # warm-up
prefill_ms = decode_ms = tokens = prompt_tokens = 0
for p in prompts:
    u = eng.chat(p["messages"], sampling=greedy, max_tokens=int(sys.argv[4]), speculative=plain).usage
    prefill_ms += u.prefill_ms; decode_ms += u.decode_ms
    tokens += u.completion_tokens - 1; prompt_tokens += u.prompt_tokens - u.cached_tokens
eng.close()
print(json.dumps({"decode_tok_s": tokens / (decode_ms / 1000), "prefill_tok_s": prompt_tokens / (prefill_ms / 1000),
                  "system_info": llama_cpp.llama_print_system_info().decode(),
                  "loaded": str(llama_cpp.llama_cpp._base_path)}))
"""


def measure(folder: Path, model: str, prompts: int, max_tokens: int, threads: int) -> dict:
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(folder)}
    env.pop("FLASHDESK_LLAMA_BUILD", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), model, str(prompts), str(max_tokens),
                        str(threads)],
                       env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"the measurement with {folder} failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["loaded"]) == folder, out["loaded"]  # the build asked for is the one that ran
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--a", type=Path, help="build A's library folder (default: the venv's llama_cpp/lib)")
    ap.add_argument("--b", type=Path, required=True, help="build B's library folder")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.set_defaults(rounds=5, prompts=4)


def run(a) -> Record:
    from engine.llama.build import package_folder

    model = lib.model_path(a.model)
    folders = {"A": (a.a or package_folder() / "lib").resolve(), "B": a.b.resolve()}
    runs = lib.alternate({s: lambda s=s: measure(folders[s], model, a.prompts, a.max_tokens, a.threads)
                          for s in folders}, a.rounds,
                         lambda i, s, r: print(f"round {i + 1} {s}: decode {r['decode_tok_s']:.1f} tok/s, "
                                               f"prefill {r['prefill_tok_s']:.0f} tok/s", flush=True))
    kinds = ("decode_tok_s", "prefill_tok_s")
    med = {f"{k} {s}": statistics.median(r[k] for r in runs[s]) for s in runs for k in kinds}
    return Record("builds", {"a": str(folders["A"]), "b": str(folders["B"]), "rounds": a.rounds,
                             "prompts": a.prompts, "max_tokens": a.max_tokens, "threads": a.threads},
                  samples=[{"side": s, "round": i, **r} for s in runs for i, r in enumerate(runs[s])],
                  medians=med, ratios={k: med[f"{k} B"] / med[f"{k} A"] for k in kinds},
                  figures={"system_info": {s: runs[s][0]["system_info"] for s in runs}}, model={"path": model})
