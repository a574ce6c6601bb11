"""The repository's own files, for the guard tests (layering, size caps): tracked or new, never ignored."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", "build", "node_modules"}  # where an unpacked sdist without git keeps what is not ours


def repo_files() -> list[Path]:
    """Every tracked file and every new one git does not ignore; without git (an unpacked sdist),
    every file outside SKIP."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True)
    except FileNotFoundError:  # no git here
        out = None
    if out is not None and out.returncode == 0:
        files = [ROOT / f for f in out.stdout.splitlines()]
    else:
        files = [p for p in ROOT.rglob("*") if not SKIP & set(p.relative_to(ROOT).parts)]
    return sorted(f for f in files if f.is_file())
