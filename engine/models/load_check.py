"""Try to load a GGUF with llama.cpp in a child process, and report what it is.

llama.cpp aborts the whole process on some malformed files, so a file the user
imports is first loaded here, in a throw-away process: a crash there costs nothing.
Run as `python -m engine.models.load_check PATH`; prints one JSON object (ModelInfo) on success.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

from ..errors import ModelLoadError


def load_check(path: str, timeout: float = 300.0) -> dict:
    """ModelInfo of `path` as a dict, loaded in a child process; raises ModelLoadError."""
    try:
        out = subprocess.run([sys.executable, "-m", "engine.models.load_check", path], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ModelLoadError(f"llama.cpp took over {timeout:.0f} s to load {path}") from None
    if out.returncode != 0:
        lines = [ln.strip() for ln in (out.stderr or "").splitlines() if ln.strip()]
        if out.returncode == 1 and lines:  # a clean refusal: its message is the last line
            raise ModelLoadError(lines[-1])
        why = lines[-1] if lines else f"exit status {out.returncode}"
        raise ModelLoadError(f"llama.cpp crashed while loading {path} ({why}); the file is not usable")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _main(path: str) -> int:
    from ..llama.model import Model

    try:
        model = Model(path, n_gpu_layers=0)
    except ModelLoadError as e:
        print(f"\n{e.message}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(model.info)))
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
