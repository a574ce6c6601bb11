"""Bytes on disk for the model store: copying with a progress bar, and hashing.

Shared by the store (install, import, pair), the pull (wheels, Hub downloads) and the Hub client, so
none of them reaches into another's private helpers. Not where files go (store.py) nor where they
come from (pull.py, hub.py).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Callable, Protocol

from tqdm import tqdm

CHUNK = 1 << 20

class Progress(Protocol):
    """A progress bar as the copies, pulls and conversions drive it (tqdm's, or a caller's own)."""

    def update(self, n: int) -> object: ...

    def close(self) -> object: ...


# progress(description, total_bytes) -> its bar
ProgressFactory = Callable[[str, int], Progress]


def tqdm_progress(desc: str, total: int):
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr)


def no_progress(desc: str, total: int):
    return tqdm(total=total, disable=True)


def copy(src, dst: Path, total: int, desc: str, progress: ProgressFactory) -> None:
    """Stream the open file `src` into `dst` with a progress bar."""
    bar = progress(desc, total)
    with open(dst, "wb") as fo:
        while chunk := src.read(CHUNK):
            fo.write(chunk)
            bar.update(len(chunk))
    bar.close()


def sha256(path: Path, progress: ProgressFactory, desc: str) -> str:
    h = hashlib.sha256()
    bar = progress(desc, path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    bar.close()
    return h.hexdigest()


def git_blob_id(path: Path) -> str:
    """git's id of the file's bytes (the sha1 of "blob <size>\\0" and the bytes): how the Hub's tree names
    a small file it keeps in git rather than LFS, for which it gives no sha256."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
