"""Prepare, on this machine, what a GPU machine call needs and lacks: the folder .gpu/ (ignored,
never committed) and the exact device calls that carry it (draft_training/GPU.md).

    python scripts/gpu_pack.py [--target T.gguf] [--dry-run] [--configure]

What it puts in .gpu/:
- llama_cpp_python-<pin>.tar.gz: the pinned sdist with flashdesk's patches applied
  (scripts/llama_source.py) and trimmed to what a CUDA + CPU build reads (the whole sdist is
  ~75 MB, over the 64 MiB a call may carry; DROP below says what goes and why it may);
- whl/: the wheels the device's image lacks (KINDS.md's package list): gguf and diskcache;
- model/: the target GGUF in parts (draft_training/parts.py), each small enough to travel
  in one call beside the repository (the tracked tree alone is ~38 MB, the shipped draft
  most of it), the first beside the sdist and the wheels;
- calls.json: the device calls, in order, with their carry lists and measured bytes.

`--dry-run` writes nothing: it lists what would be carried and the byte counts of each call.
`--configure` also runs CMake's configure step (no compile) on the trimmed tree with CUDA on,
here, with this machine's nvcc: it proves the trimming kept every file CMake asks for.

What it is not: the device side (draft_training/gpu_run.py, gpu_machine.py) or the sdist's patching itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]
import llama_source  # noqa: E402

from draft_training.parts import MANIFEST_SUFFIX, MAX_PARTS, part_sizes, split  # noqa: E402

PACK = ROOT / ".gpu"
EXCLUDE = ("/.gpu/", "/.gpu-keep/")  # .git/info/exclude lines: the pack here, the device's keep folder
CARRY_LIMIT = 64 << 20  # what one call may carry, the repository included
MARGIN = 2 << 20  # room for files others add to the tree before the call
DEFAULT_TARGET = Path.home() / ".cache/flashdesk-tests/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEELS = ("gguf", "diskcache")  # imported by flashdesk / llama_cpp, missing from the device image
PIP_PLATFORM = ["--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
LLAMA = "vendor/llama.cpp"
GGML_KEEP = {"ggml-cpu", "ggml-cuda", "ggml-blas"}  # backends a CUDA build compiles (BLAS: tiny, kept for CMake)
# What a CUDA + CPU build of the sdist never reads (CMake adds tests, tools, examples and the other
# backends only when asked; LLAMA_BUILD_COMMON and mtmd are built, so common/, tools/mtmd and
# vendor/ stay). Paths relative to the sdist's root; `*` means every entry of that folder but KEEP.
DROP = ("docs", "examples", "tests", "docker", ".github", ".git", "mkdocs.yml", f"{LLAMA}/.git",
        f"{LLAMA}/docs", f"{LLAMA}/models", f"{LLAMA}/tests", f"{LLAMA}/examples", f"{LLAMA}/pocs", f"{LLAMA}/app",
        f"{LLAMA}/benches", f"{LLAMA}/gguf-py", f"{LLAMA}/conversion", f"{LLAMA}/media", f"{LLAMA}/ci",
        f"{LLAMA}/skills", f"{LLAMA}/grammars", f"{LLAMA}/requirements", f"{LLAMA}/.github", f"{LLAMA}/.devops",
        f"{LLAMA}/tools/*", f"{LLAMA}/ggml/src/ggml-*")
KEEP = {f"{LLAMA}/tools/mtmd", f"{LLAMA}/tools/CMakeLists.txt"} | {f"{LLAMA}/ggml/src/{b}" for b in GGML_KEEP}


def dropped(root: Path) -> list[Path]:
    """The paths under an unpacked sdist `root` that trimming removes (a rule with `*` drops the
    folders it matches, KEEP excepted)."""
    out = []
    for rule in DROP:
        if "*" in rule:
            out += [p for p in sorted(root.glob(rule)) if p.is_dir() and p.relative_to(root).as_posix() not in KEEP]
        elif (root / rule).exists():
            out.append(root / rule)
    return out


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def trim(root: Path) -> int:
    """Remove `dropped(root)`; returns the bytes removed."""
    n = 0
    for p in dropped(root):
        n += tree_bytes(p)
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return n


def repo_bytes() -> int:
    """What every call carries before its carry list: tracked files and untracked, unignored ones."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return sum((ROOT / n).stat().st_size for n in out.decode().split("\0") if n and (ROOT / n).is_file())


def model_parts(size: int, room: int, room_first: int) -> list[int]:
    """Part sizes of a `size`-byte model: the first fits beside call 1's other carry, each
    other one a call of its own."""
    sizes = part_sizes(size, room, room_first)
    if len(sizes) > MAX_PARTS:
        raise SystemExit(f"a {size}-byte model needs {len(sizes)} calls of {room} bytes: carry less beside it")
    return sizes


def calls(parts: list[str], manifest: str, first_extra: list[str]) -> list[dict]:
    """The device calls in order: prepare (sdist, wheels, part 1), stash (middle parts), run (last part)."""
    model = [f".gpu/model/{p}" for p in parts]
    out = [{"command": "python3 draft_training/gpu_run.py prepare", "timeout_s": 300,
            "carry": first_extra + [f".gpu/model/{manifest}", model[0]]}]
    for m in model[1:-1]:
        out.append({"command": "python3 draft_training/gpu_run.py stash", "timeout_s": 120, "carry": [m]})
    out.append({"command": "PYTHONUNBUFFERED=1 python3 draft_training/gpu_run.py run --out $OUT --minutes 8",
                "timeout_s": 560, "carry": [model[-1]] if len(model) > 1 else []})
    return out


def exclude() -> None:
    path = ROOT / ".git" / "info" / "exclude"
    path.parent.mkdir(parents=True, exist_ok=True)
    have = path.read_text().splitlines() if path.exists() else []
    with open(path, "a") as f:
        for line in EXCLUDE:
            if line not in have:
                f.write(line + "\n")


def download_wheels(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    pins = [f"{w}=={importlib.metadata.version(w)}" for w in WHEELS]  # the versions flashdesk is tested with
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary=:all:", *PIP_PLATFORM, "-d", str(dest), *pins], check=True)
    return sorted(dest.glob("*.whl"))


def configure(src: Path) -> None:
    """CMake's configure step with the device's flags, nothing compiled: every file CMake reads is
    there. This machine has nvcc but no cuBLAS, so generation fails on `CUDA::cublas` alone; any
    other error (a source file or folder trimming removed) fails the check."""
    from draft_training import gpu_machine

    with tempfile.TemporaryDirectory() as b:
        cmd = (f"cmake -S {src} -B {b} -DCMAKE_BUILD_TYPE=Release -DSKBUILD_PLATLIB_DIR={b}/site "
               f"{gpu_machine.LLAMA_FLAGS}")
        r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    errors = [e for e in r.stderr.split("CMake Error")[1:] if "CUDA::cublas" not in e]
    if errors or (r.returncode and "CUDA::cublas" not in r.stderr):
        raise SystemExit("CMake configure of the trimmed tree failed:\n" + r.stderr[-4000:])
    print(f"configure with CUDA: ok ({src.name}{', cuBLAS not installed here' if r.returncode else ''})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, default=DEFAULT_TARGET, help="the target GGUF the device trains for")
    ap.add_argument("--dry-run", action="store_true", help="list what would be carried; write nothing")
    ap.add_argument("--configure", action="store_true", help="also run CMake's configure on the trimmed tree")
    a = ap.parse_args(argv)
    version = llama_source.pinned_version()
    with tempfile.TemporaryDirectory() as tmp:
        src = llama_source.unpack(Path(tmp))
        full = tree_bytes(src)
        gone = trim(src) if not a.dry_run else sum(tree_bytes(p) for p in dropped(src))
        print(f"sdist {version}, patched: {full} bytes; trimming drops {gone}, keeps {full - gone}")
        if a.dry_run:
            for p in dropped(src):
                print(f"  drop {p.relative_to(src)}  {tree_bytes(p)}")
            tar_bytes = (full - gone) // 4  # what gzip made of the kept sources when it was measured
        else:
            if a.configure:
                configure(src)
            exclude()
            shutil.rmtree(PACK, ignore_errors=True)
            PACK.mkdir()
            tar = PACK / f"llama_cpp_python-{version}.tar.gz"
            with tarfile.open(tar, "w:gz") as t:
                t.add(src, arcname=src.name)
            tar_bytes = tar.stat().st_size
    wheels = [] if a.dry_run else download_wheels(PACK / "whl")
    whl_bytes = sum(w.stat().st_size for w in wheels) if wheels else 170_000
    base = repo_bytes()
    room = CARRY_LIMIT - base - MARGIN
    size = a.target.stat().st_size
    sizes = model_parts(size, room, room - tar_bytes - whl_bytes)
    n = len(sizes)
    names = [f"{a.target.name}.part-{i}-of-{n}" for i in range(1, n + 1)]
    if not a.dry_run:
        split(a.target, PACK / "model", max_bytes=room, first_bytes=room - tar_bytes - whl_bytes)
    plan = calls(names, a.target.name + MANIFEST_SUFFIX, [f".gpu/llama_cpp_python-{version}.tar.gz", ".gpu/whl"])
    for i, c in enumerate(plan):
        c["bytes"] = base + sizes[i] + (tar_bytes + whl_bytes if i == 0 else 0)
        c["bytes_limit"] = CARRY_LIMIT
    print(f"repository: {base} bytes per call; model {size} bytes in {n} parts {sizes}; "
          f"sdist {tar_bytes}, wheels {whl_bytes} ({', '.join(w.name for w in wheels) or 'not downloaded'})")
    for i, c in enumerate(plan, 1):
        print(f"call {i}: {c['bytes']} bytes ({c['bytes'] / (1 << 20):.1f} MiB): {c['command']}  carry={c['carry']}")
    if not a.dry_run:
        (PACK / "calls.json").write_text(json.dumps(plan, indent=1))
        print(f"wrote {PACK}; the calls: {PACK / 'calls.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
