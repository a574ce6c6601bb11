"""ruff over the repository's Python, with the checks [tool.ruff] in pyproject.toml chooses:
mistakes (unused or undefined names, a return in `finally`, ...) and 120-column lines.

ruff comes with the [test] extra, so it is in the venv the tests run in.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    assert importlib.util.find_spec("ruff"), "no ruff in this venv. HINT: bash scripts/setup.sh test"
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_mypy_finds_nothing():
    """mypy over engine/ and server/ with [tool.mypy] in pyproject.toml (the files, the checks)."""
    assert importlib.util.find_spec("mypy"), "no mypy in this venv. HINT: bash scripts/setup.sh test"
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", "/dev/null"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
