"""The benchmark suite: `python -m bench <name> [flags]`, one module per benchmark, its flags
beside the shared ones, its result one Record (bench/lib.py) written as JSON and Markdown.

A benchmark module declares `add_arguments(ap)` (its own flags; it may set the shared flags'
defaults with ap.set_defaults) and `run(args)`, which returns a Record (the suite stamps it with
the build, commit, device and model, and writes it) or an exit status (a tool that writes no record).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys
from pathlib import Path

from bench.harness import drop_callers_settings

HERE = Path(__file__).resolve().parent

# name (= the module bench/<name>.py): kind. `list` prints them grouped by kind.
BENCHMARKS = {
    "spec": "speed", "trees": "speed", "profile": "speed", "builds": "speed", "step_time": "speed",
    "prompt_speed": "speed", "break_even": "speed", "cpu_tier": "speed", "cpu_verify": "speed",
    "copy_grammar": "speed", "draft_precision": "speed", "anchor": "speed",
    "serve": "serving", "first_request": "serving", "workorders_http": "serving", "soak": "serving",
    "workorders": "quality", "workorder_score": "quality", "review_marks": "quality",
    "workorder_tokens": "quality",
    "invariance": "check", "gpu_check": "check", "schema_corpus": "check",
    "draft_ab": "training",
    "llama_server": "tool",
}
KINDS = {"speed": "decode, prompt and step speed, A B A B in one run",
         "serving": "a real `flashdesk serve` over HTTP",
         "quality": "what a work order's answers are worth",
         "check": "correctness checks, opt-in: speculative output equal to plain, schemas compile",
         "training": "draft training arms side by side",
         "tool": "what the benchmarks need built"}
THREADS = min(os.cpu_count() or 2, 8)  # the one default of --threads


def summary(name: str) -> str:
    """The first line of a benchmark's docstring, read without importing it (imports load the engine)."""
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text("utf-8"))) or ""
    return doc.strip().split("\n")[0]


def listing() -> str:
    lines = []
    for kind, what in KINDS.items():
        lines.append(f"{kind}: {what}")
        lines += [f"  {n:18} {summary(n)}" for n, k in BENCHMARKS.items() if k == kind]
    return "\n".join(lines)


def shared_flags(ap: argparse.ArgumentParser, name: str) -> None:
    g = ap.add_argument_group("shared flags (every benchmark)")
    g.add_argument("--model", help="a GGUF file, or a catalog model in the tests' cache (default: smollm2)")
    g.add_argument("--threads", type=int, default=THREADS, help=f"llama.cpp threads (default {THREADS})")
    g.add_argument("--prompts", type=int, metavar="N",
                   help="N dev prompts, taken in turn from each category (bench/datasets.py)")
    g.add_argument("--rounds", type=int, default=3, help="A B A B rounds; medians over them")
    g.add_argument("--out", default=str(HERE / "out" / name),
                   help="writes OUT.json and OUT.md (a .json or .md suffix is dropped)")


def parser(name: str, module) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=f"python -m bench {name}", description=summary(name),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    shared_flags(ap, name)
    module.add_arguments(ap)
    return ap


def load(name: str):
    return importlib.import_module(f"bench.{name}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "list"):
        print("python -m bench <name> [flags]; python -m bench <name> --help for its flags\n")
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"no benchmark {name!r}; `python -m bench list` names them", file=sys.stderr)
        return 2
    drop_callers_settings()  # before a benchmark imports the engine, which reads FLASHDESK_LLAMA_BUILD
    module = load(name)
    args = parser(name, module).parse_args(rest)
    result = module.run(args)
    if not hasattr(result, "to_json"):
        return int(result or 0)
    result.stamp()
    for path in result.write(args.out):
        print(f"wrote {path}", file=sys.stderr)
    return 0 if result.ok else 1
