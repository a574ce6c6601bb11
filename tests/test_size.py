"""File sizes (DESIGN.md §7.9: "one concept each; Python soft cap 400 lines, C 600").

Over the soft cap a file warns (shown in pytest's warnings summary): time to ask whether it holds
two concepts. At twice the soft cap it fails. §7.9 names no cap for JavaScript: the UI's modules
are held to Python's. Files we vendor from others as they ship (ui/vendor/) are not ours to size.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from repo_files import repo_files

ROOT = Path(__file__).resolve().parent.parent

# suffix -> (soft cap: warn above, hard cap: fail above), in lines
CAPS = {".py": (400, 800), ".js": (400, 800), ".c": (600, 1000), ".h": (600, 1000)}
NOT_OURS = ("ui/vendor/",)


def source_files() -> list[Path]:
    """The tracked source files, and new ones not ignored."""
    return [f for f in repo_files() if f.suffix in CAPS and not f.relative_to(ROOT).as_posix().startswith(NOT_OURS)]


def lines(path: Path) -> int:
    return len(path.read_bytes().splitlines())


def test_no_file_is_over_the_hard_cap():
    files = source_files()
    assert {".py", ".c", ".h", ".js"} <= {f.suffix for f in files}, "the walk misses a kind of source file"
    sizes = {f.relative_to(ROOT).as_posix(): (lines(f), *CAPS[f.suffix]) for f in files}
    for name, (n, soft, hard) in sizes.items():
        if soft < n <= hard:
            warnings.warn(f"{name}: {n} lines, over the soft cap of {soft} (DESIGN §7.9): one concept?", stacklevel=1)
    over = [f"{name}: {n} lines, over the hard cap of {hard} (soft cap {soft}, DESIGN §7.9): split it by concept"
            for name, (n, soft, hard) in sizes.items() if n > hard]
    assert not over, "\n".join(over)

