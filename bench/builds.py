"""Two builds of llama.cpp's libraries, same model, same prompts: what a build choice costs.

The Linux package ships a portable build (GGML_NATIVE=OFF: an AVX2 baseline) where a build
for this very CPU could use more (AVX-512 here). Each measurement is a fresh process that
loads one build (LLAMA_CPP_LIB_PATH, engine/llama/build.py) and the model, warms up, then
times prompt processing (prefill) and plain greedy decoding on the dev prompts. Builds are
alternated A B A B; medians and the B/A ratios are printed and written to bench/out/builds.json.

    .venv/bin/python bench/builds.py --b /path/to/other/llama_cpp/lib [--a FOLDER] [--rounds 5]

A defaults to the venv's own llama_cpp/lib. A folder for B: unpack a wheel built with other
flags (pip wheel llama-cpp-python==0.3.36 with CMAKE_ARGS) and point at its llama_cpp/lib.
Speed is noisy on a shared 2-core machine: quote the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One measurement, run in a child so each build is the only one loaded in its process.
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench.common import dev_prompts
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.params import SpecParams
import llama_cpp

eng = Engine.load(sys.argv[2], EngineConfig(n_ctx=2048, n_threads=2))
greedy, plain = SamplingParams(temperature=0), SpecParams(mode="off")
prompts = dev_prompts()[: int(sys.argv[3])]
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


def measure(folder: Path, model: str, prompts: int, max_tokens: int) -> dict:
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(folder)}
    env.pop("FLASHDESK_LLAMA_BUILD", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), model, str(prompts), str(max_tokens)],
                       env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"the measurement with {folder} failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(out["loaded"]) == folder, out["loaded"]  # the build asked for is the one that ran
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from bench.common import drop_callers_settings, test_home

    drop_callers_settings()  # the children read none of the caller's own settings

    from engine.llama.build import package_folder
    from engine.models.pull import pull
    from engine.models.store import ModelStore, no_progress

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, default=package_folder() / "lib", help="build A's library folder")
    ap.add_argument("--b", type=Path, required=True, help="build B's library folder")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    model = pull(ModelStore(test_home()), "smollm2", progress=no_progress).path
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for i in range(a.rounds):
        for side, folder in (("A", a.a.resolve()), ("B", a.b.resolve())):
            runs[side].append(measure(folder, model, a.prompts, a.max_tokens))
            r = runs[side][-1]
            print(f"round {i + 1} {side}: decode {r['decode_tok_s']:.1f} tok/s, prefill {r['prefill_tok_s']:.0f} tok/s",
                  flush=True)
    med = {s: {k: statistics.median(r[k] for r in runs[s]) for k in ("decode_tok_s", "prefill_tok_s")} for s in runs}
    report = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "A": {"folder": str(a.a), "system_info": runs["A"][0]["system_info"], **med["A"]},
        "B": {"folder": str(a.b), "system_info": runs["B"][0]["system_info"], **med["B"]},
        "ratio_b_over_a": {k: med["B"][k] / med["A"][k] for k in med["A"]},
        "rounds": a.rounds, "prompts": a.prompts, "max_tokens": a.max_tokens,
    }
    print(json.dumps(report, indent=2))
    out = ROOT / "bench" / "out" / "builds.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
