"""Split a file into parts of at most `max_bytes` with a sha256 manifest, and join them back.

What it is: the way a big file crosses a channel that takes only files of a bounded size and
number: the GPU machine's return channel (at most 8 files of 16 MiB, draft_training/GPU.md) and
the carry of a target GGUF to it in several calls. `split` writes `NAME.part-I-of-N` files of
nearly equal size plus `NAME.parts.json` (each part's size and sha256, and the whole file's);
`join` refuses a missing, short or altered part, or a joined file whose digest differs, and
only then renames the result into place.

What it is not: compression (GGUF weights barely compress: zstd -19 takes SmolLM2's Q4_1 file
from 98.4 to 89.9 MB) or a transfer tool.

    python -m draft_training.parts split FILE OUT_DIR [--max-bytes 16MiB] [--max-parts 8]
    python -m draft_training.parts join OUT_DIR/NAME.parts.json DEST
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from pathlib import Path

MiB = 1 << 20
MAX_BYTES = 16 * MiB  # the GPU machine returns files of at most 16 MiB
MAX_PARTS = 8  # ... and at most 8 files
MANIFEST_SUFFIX = ".parts.json"
CHUNK = 4 * MiB  # read size while hashing and copying


class PartsError(ValueError):
    """A split that would break the limits, or parts that do not join into the original."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def manifest_path(out_dir: str | os.PathLike, name: str) -> Path:
    return Path(out_dir) / (name + MANIFEST_SUFFIX)


def part_sizes(size: int, max_bytes: int, first_bytes: int | None = None) -> list[int]:
    """The fewest part sizes of at most `max_bytes` (the first at most `first_bytes`, when given:
    a call that carries other things beside it), the rest of nearly equal size."""
    if max_bytes <= 0 or (first_bytes is not None and first_bytes <= 0):
        raise PartsError(f"part sizes must be positive, got {max_bytes} and {first_bytes}")
    first = [] if first_bytes is None or size <= first_bytes else [first_bytes]
    rest = size - sum(first)
    n = max(1, math.ceil(rest / max_bytes))
    each = math.ceil(rest / n)  # equal parts: the last one is never a sliver
    return first + [min(each, rest - i * each) for i in range(n)]


def split(path: str | os.PathLike, out_dir: str | os.PathLike, max_bytes: int = MAX_BYTES,
          max_parts: int = MAX_PARTS, first_bytes: int | None = None) -> list[Path]:
    """Cut `path` into the fewest parts of at most `max_bytes` (see `part_sizes`); returns the
    part files (the manifest, `NAME.parts.json`, is written beside them)."""
    path, out_dir = Path(path), Path(out_dir)
    size = path.stat().st_size
    sizes = part_sizes(size, max_bytes, first_bytes)
    n = len(sizes)
    if n > max_parts:
        raise PartsError(f"{path.name} is {size} bytes: {n} parts of at most {max_bytes} bytes would be needed, "
                         f"more than the {max_parts} allowed. HINT: a smaller file, or larger parts.")
    out_dir.mkdir(parents=True, exist_ok=True)
    whole, parts, entries = hashlib.sha256(), [], []
    with open(path, "rb") as src:
        for i, each in enumerate(sizes):
            part = out_dir / f"{path.name}.part-{i + 1}-of-{n}"
            h, left = hashlib.sha256(), each
            with open(part, "wb") as dst:
                while left and (block := src.read(min(CHUNK, left))):
                    dst.write(block)
                    h.update(block)
                    whole.update(block)
                    left -= len(block)
            parts.append(part)
            entries.append({"file": part.name, "bytes": part.stat().st_size, "sha256": h.hexdigest()})
    man = {"name": path.name, "bytes": size, "sha256": whole.hexdigest(), "parts": entries}
    manifest_path(out_dir, path.name).write_text(json.dumps(man, indent=1))
    return parts


def join(manifest: str | os.PathLike, dest: str | os.PathLike, *, missing_ok: bool = False) -> Path | None:
    """Join the parts that `manifest` lists (they lie beside it) into `dest`, checking every
    digest. With `missing_ok`, a missing part returns None instead of raising (a caller that
    waits for parts still on their way)."""
    manifest, dest = Path(manifest), Path(dest)
    man = json.loads(manifest.read_text())
    folder = manifest.parent
    missing = [e["file"] for e in man["parts"] if not (folder / e["file"]).exists()]
    if missing:
        if missing_ok:
            return None
        raise PartsError(f"part(s) {', '.join(missing)} of {man['name']} are missing from {folder}")
    for e in man["parts"]:
        p = folder / e["file"]
        if p.stat().st_size != e["bytes"]:
            raise PartsError(f"part {p} is {p.stat().st_size} bytes, the manifest says {e['bytes']}")
        if _sha256(p) != e["sha256"]:
            raise PartsError(f"part {p} does not match its sha256 in {manifest.name}: altered or corrupt")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".joining")
    whole = hashlib.sha256()
    with open(tmp, "wb") as out:
        for e in man["parts"]:
            with open(folder / e["file"], "rb") as f:
                while block := f.read(CHUNK):
                    out.write(block)
                    whole.update(block)
    if whole.hexdigest() != man["sha256"]:
        tmp.unlink()
        raise PartsError(f"the joined {man['name']} does not match the sha256 in {manifest.name}")
    os.replace(tmp, dest)
    return dest


def _size(text: str) -> int:
    """'16MiB', '1.5MB', '4096' -> bytes."""
    t = text.strip()
    for unit, mult in (("MiB", MiB), ("KiB", 1 << 10), ("MB", 10**6), ("kB", 10**3)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    return int(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m draft_training.parts", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="cut FILE into parts in OUT_DIR")
    s.add_argument("file")
    s.add_argument("out_dir")
    s.add_argument("--max-bytes", type=_size, default=MAX_BYTES)
    s.add_argument("--max-parts", type=int, default=MAX_PARTS)
    j = sub.add_parser("join", help="join the parts a NAME.parts.json lists into DEST")
    j.add_argument("manifest")
    j.add_argument("dest")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "split":
            for p in split(a.file, a.out_dir, a.max_bytes, a.max_parts):
                print(p)
        else:
            print(join(a.manifest, a.dest))
    except PartsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
