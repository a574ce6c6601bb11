"""llama-cpp-python's source with flashdesk's patches to llama.cpp applied, for every build.

    python scripts/llama_source.py unpack DEST   # prints the patched source folder (pip wheel it)
    python scripts/llama_source.py digest        # 12 hex digits naming the patch set (wheelhouse keys)
    python scripts/llama_source.py check         # the patches apply to the pinned sdist (nothing kept)

The CPU, CUDA and Metal builds (scripts/setup.sh, installers/windows/build.ps1,
installers/macos/build.sh) are built from this folder with -DGGML_BATCH_INVARIANT=ON.
The patches live in native/llama-patches/ (its README says what each hunk does) and are
applied in name order, with `git apply`, which refuses a patch that does not apply exactly.

The sdist is the one pyproject.toml pins: FLASHDESK_LLAMA_SDIST names a local copy, else pip
downloads it into ~/.cache/flashdesk-wheels/sdist (FLASHDESK_WHEELHOUSE moves that folder).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "native" / "llama-patches"


def pinned_version() -> str:
    """llama-cpp-python's version, from pyproject.toml's one pin."""
    m = re.search(r'"llama-cpp-python==([^"]+)"', (ROOT / "pyproject.toml").read_text("utf-8"))
    if not m:
        sys.exit("pyproject.toml pins no llama-cpp-python version")
    return m.group(1)


def patches() -> list[Path]:
    return sorted(PATCHES.glob("*.patch"))


def digest() -> str:
    h = hashlib.sha256()
    for p in patches():
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


def sdist(version: str) -> Path:
    """The pinned sdist: FLASHDESK_LLAMA_SDIST, or downloaded once into the cache."""
    given = os.environ.get("FLASHDESK_LLAMA_SDIST")
    if given:
        return Path(given)
    house = Path(os.environ.get("FLASHDESK_WHEELHOUSE") or Path.home() / ".cache" / "flashdesk-wheels")
    folder = house / "sdist"
    path = folder / f"llama_cpp_python-{version}.tar.gz"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
                        "--no-binary", ":all:", "-d", str(folder), f"llama-cpp-python=={version}"], check=True)
    return path


def unpack(dest: Path) -> Path:
    """A fresh copy of the pinned source under `dest`, every patch applied; returns its folder."""
    version = pinned_version()
    src = dest / f"llama_cpp_python-{version}"
    if src.exists():
        shutil.rmtree(src)
    dest.mkdir(parents=True, exist_ok=True)
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12
    with tarfile.open(sdist(version)) as tar:
        tar.extractall(dest, **safe)
    # git must not take a repository around `dest` (a checkout) for the one to patch in
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(dest.resolve()))
    for p in patches():
        for args in (["--check"], []):
            r = subprocess.run(["git", "apply", *args, str(p)], cwd=src, env=env, capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"{p.name} does not apply to llama-cpp-python {version}: {r.stderr.strip()}")
    return src


def main(argv: list[str]) -> None:
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "digest":
        print(digest())
    elif cmd == "unpack" and len(argv) == 3:
        print(unpack(Path(argv[2])))
    elif cmd == "check":
        with tempfile.TemporaryDirectory() as tmp:
            print(f"{len(patches())} patch(es) apply to {unpack(Path(tmp)).name}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
