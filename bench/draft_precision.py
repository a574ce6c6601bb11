"""A draft's acceptance in each precision a converted draft can be stored in (issue 53, item 3).

The shipped draft (or --draft) is read back to float32 and written again with its 2-D weights in
each of --dtypes (gguf_tools/dflash/write.py MATRIX_DTYPES); each copy then drafts the same dev
prompts, greedy, against the same target (draft_training/evaluate.py's online_eval: block 8, the
`walk` selector), and its tau (tokens committed per verify) is set beside the f32 copy's. Greedy
tau is deterministic, so the copies run one after the other; what each costs per step at a real
shape is bench/break_even.py's `--draft-dtypes`. Every copy's output must equal plain decoding's.

    .venv/bin/python bench/draft_precision.py [--draft engine/drafts/smollm2-dflash2.gguf]
        [--prompts 12] [--max-tokens 96] [--dtypes f32,bf16,f16,q8_0]

Writes bench/out/draft_precision.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import dev_prompts, spread, test_home  # noqa: E402
from draft_training.evaluate import online_eval  # noqa: E402
from draft_training.warm_start import load_warm_start  # noqa: E402
from gguf_tools.dflash import write_dflash_draft  # noqa: E402
from gguf_tools.dflash.write import MATRIX_DTYPES  # noqa: E402

SHIPPED = ROOT / "engine" / "drafts" / "smollm2-dflash2.gguf"


def rewrite(draft: Path, target: str, dtype: str, folder: Path) -> Path:
    """The draft at `draft` again, its 2-D weights stored as `dtype`."""
    cfg, tensors = load_warm_start(draft)
    out = folder / f"{draft.stem}-{dtype}.gguf"
    write_dflash_draft(out, cfg, tensors, target, matrix_dtype=dtype)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draft", default=str(SHIPPED))
    ap.add_argument("--target", help="the draft's target GGUF (default: the test store's SmolLM2)")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--dtypes", default=",".join(MATRIX_DTYPES))
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "draft_precision.json"))
    a = ap.parse_args()
    target = a.target
    if target is None:
        from engine.models.pull import pull
        from engine.models.store import ModelStore, no_progress
        target = pull(ModelStore(test_home()), "smollm2", progress=no_progress).path
    prompts = spread(dev_prompts(), a.prompts)
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
    result = {"draft": Path(a.draft).name, "target": Path(target).name, "prompts": len(prompts),
              "max_tokens": a.max_tokens, "block": a.block, "rows": rows, "when": time.strftime("%Y-%m-%d %H:%M")}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(f"\n| precision | file MB | tau (walk, block {a.block}) | vs f32 | outputs equal plain |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['bytes'] / 1e6:.1f} | {r['tau']:.3f} | {r['tau'] - base:+.3f} | "
              f"{'all' if not r['mismatches'] else r['mismatches']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
