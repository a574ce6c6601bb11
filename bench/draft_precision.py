"""A draft's acceptance in each precision a converted draft can be stored in (issue 53, item 3).

The shipped draft (or --draft) is read back to float32 and written again with its 2-D weights in
each of --dtypes (gguf_tools/dflash/write.py MATRIX_DTYPES); each copy then drafts the same dev
prompts, greedy, against the same target (draft_training/evaluate.py's online_eval: block 8, the
`walk` selector), and its tau (tokens committed per verify) is set beside the f32 copy's. Greedy
tau is deterministic, so the copies run one after the other; what each costs per step at a real
shape is `python -m bench break_even --draft-dtypes`. Every copy's output must equal plain decoding's.

    .venv/bin/python -m bench draft_precision [--draft engine/drafts/smollm2-dflash2.gguf]
        [--prompts 12] [--max-tokens 96] [--dtypes f32,bf16,f16,q8_0]
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench import datasets, lib
from bench.harness import ROOT
from bench.lib import Record
from draft_training.evaluate import online_eval
from draft_training.warm_start import load_warm_start
from gguf_tools.dflash import write_dflash_draft
from gguf_tools.dflash.write import MATRIX_DTYPES

SHIPPED = ROOT / "engine" / "drafts" / "smollm2-dflash2.gguf"


def rewrite(draft: Path, target: str, dtype: str, folder: Path) -> Path:
    """The draft at `draft` again, its 2-D weights stored as `dtype`."""
    cfg, tensors = load_warm_start(draft)
    out = folder / f"{draft.stem}-{dtype}.gguf"
    write_dflash_draft(out, cfg, tensors, target, matrix_dtype=dtype)
    return out


def add_arguments(ap) -> None:
    ap.add_argument("--draft", default=str(SHIPPED))
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--dtypes", default=",".join(MATRIX_DTYPES))
    ap.set_defaults(prompts=12)


def run(a) -> Record:
    target = lib.model_path(a.model)  # the draft's target
    prompts = datasets.prompts(a.prompts)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in a.dtypes.split(","):
            path = rewrite(Path(a.draft), target, dtype, Path(tmp))
            t0 = time.perf_counter()
            got = online_eval(target, path, prompts, block=a.block, max_tokens=a.max_tokens, selectors=("walk",))
            walk = got["selectors"]["walk"]
            rows.append({"dtype": dtype, "bytes": path.stat().st_size, "tau": walk["tau"],
                         "verifies": walk.get("verifies"), "mismatches": got["mismatches"],
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(json.dumps(rows[-1]), flush=True)
    base = next((r["tau"] for r in rows if r["dtype"] == "f32"), rows[0]["tau"])
    print(f"\n| precision | file MB | tau (walk, block {a.block}) | vs f32 | outputs equal plain |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['bytes'] / 1e6:.1f} | {r['tau']:.3f} | {r['tau'] - base:+.3f} | "
              f"{'all' if not r['mismatches'] else r['mismatches']} |")
    return Record("draft_precision", {"draft": Path(a.draft).name, "prompts": len(prompts),
                                      "max_tokens": a.max_tokens, "block": a.block, "dtypes": a.dtypes},
                  samples=rows, medians={r["dtype"]: r["tau"] for r in rows},
                  ratios={r["dtype"]: r["tau"] / base for r in rows if base}, figures={"rows": rows},
                  ok=not any(r["mismatches"] for r in rows), model={"path": target})
