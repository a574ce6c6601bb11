"""The project's dev data the benchmarks run on: the 60 dev prompts and the dev work orders
(tests/data/README.md), and `spread`, the one round robin over prompt categories that every
`--prompts N` of the suite means."""

from __future__ import annotations

import json
from pathlib import Path

EVAL_DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
WORKORDERS = EVAL_DATA / "workorders-dev.jsonl"
WORKORDER_SCHEMA = EVAL_DATA / "workorder.schema.json"


def dev_prompts() -> list[dict]:
    """The 60 dev prompts (tests/data/prompts-dev.jsonl), in file order."""
    text = (EVAL_DATA / "prompts-dev.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def spread(prompts: list[dict], n: int) -> list[dict]:
    """n prompts taken in turn from each category, so every kind of request is in a short run."""
    by_cat: dict[str, list[dict]] = {}
    for p in prompts:
        by_cat.setdefault(p.get("category", "misc"), []).append(p)
    out, i = [], 0
    while len(out) < min(n, len(prompts)):
        for rows in by_cat.values():
            if i < len(rows) and len(out) < n:
                out.append(rows[i])
        i += 1
    return out


def prompts(n: int) -> list[dict]:
    """What `--prompts N` picks: N dev prompts, spread over the categories."""
    return spread(dev_prompts(), n)


def workorders(path: Path | str = WORKORDERS) -> list[dict]:
    """The dev work orders (or another JSONL of cases), in file order."""
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines() if line.strip()]
