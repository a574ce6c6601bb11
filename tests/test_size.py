"""File sizes (docs/architecture.md, Style: "one concept each; Python soft cap 400 lines, C 600"),
and the width of our JavaScript's lines.

A Python or JavaScript file over the soft cap fails unless OVER_SOFT_CAP states why it is one
concept all the same (issue 43); a file listed there that is no longer over the cap, or no longer
exists, fails too, so the table stays true. C files over their soft cap warn (shown in pytest's
warnings summary): time to ask whether one holds two concepts. Any file at twice its soft cap
fails, listed or not. §7.9 names no cap for JavaScript: the UI's modules are held to Python's.
Files we vendor from others as they ship (ui/vendor/) are not ours to size.

A file kept under its line cap by going wide would be no smaller to read, so JavaScript lines
are held to the width ruff holds Python's to ([tool.ruff] line-length in pyproject.toml).
"""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

from repo_files import repo_files

ROOT = Path(__file__).resolve().parent.parent

# suffix -> (soft cap, hard cap: fail above), in lines
CAPS = {".py": (400, 800), ".js": (400, 800), ".c": (600, 1000), ".h": (600, 1000)}
STRICT = (".py", ".js")  # over the soft cap: fail unless listed below (C: a warning)
NOT_OURS = ("ui/vendor/",)

# path -> why this file is one concept over the soft cap
OVER_SOFT_CAP = {
    "engine/grammar/schema.py": (
        "the fail-closed walk over a JSON Schema is one concept, and its docstring (57 lines) is the "
        "contract of the walk: every keyword it supports, how it is made stricter, and every converter "
        "bug worked around, in one place beside the code that keeps it; the code itself is about 400 lines"),
    "tests/hub_standin.py": (
        "one stand-in for one service, the Hub's download side: its git objects (blob, tree and commit "
        "ids), routes, headers and fault injection describe the same Hub and share one state; the "
        "objects alone would be a module no other file reads"),
}


def source_files() -> list[Path]:
    """The tracked source files, and new ones not ignored."""
    return [f for f in repo_files() if f.suffix in CAPS and not f.relative_to(ROOT).as_posix().startswith(NOT_OURS)]


def lines(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def sizes() -> dict[str, tuple[int, int, int]]:
    """path -> (lines, soft cap, hard cap) of every source file."""
    return {f.relative_to(ROOT).as_posix(): (lines(f), *CAPS[f.suffix]) for f in source_files()}


STYLE = "docs/architecture.md, Style"


def test_no_file_is_over_the_hard_cap():
    files = source_files()
    assert {".py", ".c", ".h", ".js"} <= {f.suffix for f in files}, "the walk misses a kind of source file"
    over = [f"{name}: {n} lines, over the hard cap of {hard} (soft cap {soft}, {STYLE}): split it by concept"
            for name, (n, soft, hard) in sizes().items() if n > hard]
    assert not over, "\n".join(over)


def test_no_file_is_over_the_soft_cap_without_a_stated_reason():
    over = []
    for name, (n, soft, hard) in sizes().items():
        if n <= soft or name in OVER_SOFT_CAP:
            continue
        if name.endswith(STRICT):
            over.append(f"{name}: {n} lines, over the soft cap of {soft} ({STYLE}): split it by concept, "
                        "or state in OVER_SOFT_CAP (tests/test_size.py) why it is one concept")
        else:
            warnings.warn(f"{name}: {n} lines, over the soft cap of {soft} ({STYLE}): one concept?", stacklevel=1)
    assert not over, "\n".join(over)


def test_every_stated_reason_is_still_needed():
    have = sizes()
    stale = []
    for name in OVER_SOFT_CAP:
        if name not in have:
            stale.append(f"{name}: no such source file: take it out of OVER_SOFT_CAP")
        elif have[name][0] <= have[name][1]:
            stale.append(f"{name}: {have[name][0]} lines, within its soft cap: take it out of OVER_SOFT_CAP")
    assert not stale, "\n".join(stale)
    assert all(why.strip() for why in OVER_SOFT_CAP.values()), "a listed file needs its reason"


def test_no_javascript_line_is_wider_than_python_may_be():
    width = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["ruff"]["line-length"]
    scripts = [f for f in source_files() if f.suffix == ".js"]
    assert scripts, "the walk finds no JavaScript"
    wide = [f"{f.relative_to(ROOT).as_posix()}:{i}: {len(line)} columns"
            for f in scripts for i, line in enumerate(f.read_text("utf-8").splitlines(), 1) if len(line) > width]
    assert not wide, f"JavaScript lines over {width} columns (wrap them as the file wraps others):\n" + "\n".join(wide)
