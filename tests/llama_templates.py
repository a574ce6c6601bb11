"""Real chat templates of the catalog's model families, read from the pinned llama-cpp-python sdist.

llama.cpp ships the templates of many models in vendor/llama.cpp/models/templates/ (its own chat
tests render them). The tests read them from the very sdist pyproject.toml pins
(scripts/llama_source.py: FLASHDESK_LLAMA_SDIST, else downloaded once into the wheel cache),
so nothing of them is copied into this repository. Not a template collection: four names.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import llama_source  # noqa: E402

# family -> the template file llama.cpp keeps for it (a model of that family the catalog lists)
FAMILIES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",  # qwen3-8b
    "qwen3.5": "Qwen3.5-4B.jinja",  # qwen3.8-27b, qwen3.6-35b-a3b (architectures qwen35, qwen35moe)
    "gemma4": "google-gemma-4-31B-it.jinja",  # gemma-4-26b-a4b
    "muse-glimmer": "muse-glimmer.jinja",  # muse-glimmer-30b
}


@functools.lru_cache(maxsize=1)
def _read(version: str) -> dict[str, str] | str:
    """family -> template text, or why the sdist can't be had (cached: one read per run)."""
    try:
        path = llama_source.sdist(version)
    except (subprocess.CalledProcessError, OSError) as e:
        return f"the pinned llama-cpp-python {version} sdist can't be downloaded here: {e}"
    if not path.is_file():
        return f"no llama-cpp-python {version} sdist at {path}"
    folder = f"llama_cpp_python-{version}/vendor/llama.cpp/models/templates"
    try:
        with tarfile.open(path) as tar:
            return {family: tar.extractfile(f"{folder}/{name}").read().decode("utf-8")
                    for family, name in FAMILIES.items()}
    except (tarfile.TarError, KeyError, OSError) as e:
        return f"{path} is not a readable llama-cpp-python sdist with llama.cpp's templates: {e}"


def family_templates() -> dict[str, str]:
    """The four families' templates; skips the calling test, saying why, without the sdist."""
    got = _read(llama_source.pinned_version())
    if isinstance(got, str):
        pytest.skip(got)
    return got
