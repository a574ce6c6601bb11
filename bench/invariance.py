"""Greedy invariance over every dev prompt: speculative output == plain output, token for token.

The CI tests check a slice of the dev set (tests/engine/speculative); this sweep runs all of
tests/data/prompts-dev.jsonl through every selector and block length, one and four
sequences at a time, against plain decoding of the same engine. The draft is random
unless --draft names a trained one, so acceptance is low and every step exercises
drafting, injection, selection, partial acceptance and rollback. Writes JSON to --out
(default bench/out/invariance.json) and exits 1 on any difference.

    .venv/bin/python bench/invariance.py [--draft PATH] [--max-tokens 32] [--blocks 2,4,8]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import dev_prompts, drop_callers_settings, test_home  # noqa: E402

drop_callers_settings()  # before the engine loads: it reads FLASHDESK_LLAMA_BUILD

from engine import Completion, Engine, EngineConfig, SamplingParams  # noqa: E402
from engine.speculative.params import SELECTORS, SpecParams  # noqa: E402
from engine.models.pull import pull  # noqa: E402
from engine.models.store import ModelStore, no_progress  # noqa: E402

GREEDY = SamplingParams(temperature=0)


def run(eng: Engine, prompts: list[dict], spec: SpecParams, max_tokens: int, parallel: int) -> dict[str, list[int]]:
    """Outputs by prompt id, `parallel` requests in flight at a time."""
    out: dict[str, list[int]] = {}
    for i in range(0, len(prompts), parallel):
        group = prompts[i:i + parallel]
        hs = [(p["id"], eng.generate(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=max_tokens,
                                     speculative=spec)) for p in group]
        for pid, h in hs:
            out[pid] = Completion.collect(iter(h)).tokens
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draft", help="a DFlash draft GGUF, 2 or v1 (default: a random DFlash 2 one)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--blocks", default="2,4,8")
    ap.add_argument("--selectors", default=",".join(SELECTORS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "invariance.json"))
    a = ap.parse_args()
    model = pull(ModelStore(test_home()), "smollm2", progress=no_progress)
    draft = a.draft
    if draft is None:
        from gguf_tools.dflash import write_random_draft

        draft = str(Path(tempfile.mkdtemp()) / "random-dflash2.gguf")
        write_random_draft(draft, model.path, seed=1)
    prompts = dev_prompts()
    eng = Engine.load(model.path, EngineConfig(n_ctx=2048, n_parallel=4, n_threads=a.threads, draft=draft))
    configs = [("plain x4", SpecParams(mode="off"), 4)]
    for block in (int(b) for b in a.blocks.split(",")):
        configs.append((f"lookup B={block} x4", SpecParams(mode="lookup", block=block), 4))
        for sel in a.selectors.split(","):
            configs.append((f"dflash-{sel} B={block} x4", SpecParams(mode="dflash", selector=sel, block=block), 4))
    configs += [("dflash-walk B=8 x1", SpecParams(mode="dflash", selector="walk", block=8), 1),
                ("dflash-dp B=8 x1", SpecParams(mode="dflash", selector="dp", block=8), 1),
                ("auto x4", SpecParams(mode="auto"), 4)]
    report = {"prompts": len(prompts), "max_tokens": a.max_tokens, "exact": eng.spec.exactness.exact, "configs": {}}
    failed = False
    try:
        plain = run(eng, prompts, SpecParams(mode="off"), a.max_tokens, 1)
        for name, spec, par in configs:
            t0 = time.perf_counter()
            got = run(eng, prompts, spec, a.max_tokens, par)
            bad = sorted(pid for pid, toks in got.items() if toks != plain[pid])
            failed |= bool(bad)
            report["configs"][name] = {"differ": bad, "seconds": round(time.perf_counter() - t0, 1)}
            print(f"{name:24} {'OK' if not bad else 'DIFFERS: ' + ', '.join(bad)}  "
                  f"({report['configs'][name]['seconds']} s)", flush=True)
    finally:
        eng.close()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=1))
    print(f"{len(prompts)} prompts x {len(configs)} configurations: {'DIFFERENCES FOUND' if failed else 'all equal'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
