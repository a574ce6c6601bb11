"""A copy of the installed llama_cpp package, optionally with a second build in lib_cuda/, as the
Windows package lays them out (installers/windows/build.ps1), for the build-choice tests."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.llama.build import package_folder

LIB = package_folder() / "lib"


def package(parent: Path, cuda: str | None = "copy") -> Path:
    """<parent>/llama_cpp: its Python files and CPU build, and `cuda` = "copy" (the CPU libraries
    standing in for a CUDA build, beside a CUDA 12 runtime's name), "broken" or None. Put
    <parent> first on PYTHONPATH and a fresh interpreter imports this copy."""
    pkg = parent / "llama_cpp"
    shutil.copytree(LIB.parent, pkg, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "server"))
    if cuda == "copy":
        shutil.copytree(LIB, pkg / "lib_cuda", symlinks=True)
        (pkg / "lib_cuda" / "libcudart.so.12").write_bytes(b"")
    elif cuda == "broken":
        (pkg / "lib_cuda").mkdir()
        (pkg / "lib_cuda" / "libllama.so").write_bytes(b"not a library")
    return pkg
