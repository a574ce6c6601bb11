"""Stock `llama-server`, built once per machine from the pinned llama.cpp source: the anchor's side.

    .venv/bin/python -m bench llama_server [--portable]   # builds (minutes on 2 cores) or finds it; prints its path

The source is llama-cpp-python's pinned sdist (scripts/llama_source.py: the very one flashdesk's
wheel is built from), of which only vendor/llama.cpp is unpacked. Stock on purpose: none of
flashdesk's patches (native/llama-patches) and llamafile's sgemm left on (llama.cpp's default),
so the anchor is llama.cpp as its own users get it. Not flashdesk's build and not a wheel.

The binary is cached like the wheel: FLASHDESK_WHEELHOUSE or ~/.cache/flashdesk-wheels, in
llama-server-<12 hex of sha256 of (version, flags)>/llama-server, beside a build.json saying what
it is. It is built in a temporary folder and moved in with one rename, only once the build
succeeded: a killed build leaves no binary there, and the next call builds again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import llama_source  # noqa: E402  (scripts/ is no package)

# The pinned llama.cpp crashes in its AMX kernels under -march=native on an AMX Xeon (this
# project's own 2-core machine; scripts/setup.sh says more). Explicit -mno-* win over native.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


def build_flags(native: bool, machine: str | None = None) -> list[str]:
    """CMake flags for a stock Release llama-server alone: no tests, examples, UI download or
    HTTPS (nothing here reaches the network), static so the binary stands alone in the cache."""
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
             "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
             "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"]
    if not native:
        flags.append("-DGGML_NATIVE=OFF")
    elif (machine or platform.machine()) in ("x86_64", "AMD64"):
        flags += [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
    return flags


def cache_key(version: str, flags: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps([version, list(flags)]).encode()).hexdigest()[:12]


def house() -> Path:
    return Path(os.environ.get("FLASHDESK_WHEELHOUSE") or Path.home() / ".cache" / "flashdesk-wheels")


def binary_path(version: str, flags: Sequence[str]) -> Path:
    return house() / f"llama-server-{cache_key(version, flags)}" / "llama-server"


def llama_cpp_commit(sdist: Path) -> str:
    """The vendored llama.cpp's commit, from the submodule HEAD the sdist carries (cmake's own
    build-info finds no git in an unpacked tarball and says "unknown")."""
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".git/modules/vendor/llama.cpp/HEAD"):
                return tar.extractfile(m).read().decode().strip()
    return "unknown"


def unpack_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Only the sdist's vendor/llama.cpp tree (not its bindings, not its .git), under dest."""
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        tar.extractall(dest, members=members, **safe)
    [src] = dest.glob("*/vendor/llama.cpp")
    return src


def build(src: Path, work: Path, flags: Sequence[str], out: Path, cmake: Sequence[str] = ("cmake",),
          jobs: int = 2, log=None) -> Path:
    """Configure and build llama-server from `src` in `work`; only on success move it to `out`."""
    # git must not find the checkout around a temp folder and stamp flashdesk's commit in
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(work.parent.resolve()))
    bdir = work / "build"
    run = {"check": True, "env": env, "stdout": log, "stderr": subprocess.STDOUT if log else None}
    subprocess.run([*cmake, "-S", str(src), "-B", str(bdir), *flags], **run)
    subprocess.run([*cmake, "--build", str(bdir), "--config", "Release", "--target", "llama-server",
                    "-j", str(jobs)], **run)
    built = bdir / "bin" / "llama-server"
    if not built.is_file():
        raise RuntimeError(f"cmake succeeded but left no {built}")
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f".{out.name}.{os.getpid()}.part")  # same folder: the rename is atomic
    shutil.copy2(built, part)
    os.replace(part, out)
    return out


def ensure_llama_server(native: bool, cmake: Sequence[str] = ("cmake",), log=None) -> Path:
    """The cached stock llama-server for this build kind, built first if missing."""
    version = llama_source.pinned_version()
    flags = build_flags(native)
    out = binary_path(version, flags)
    if out.is_file():
        return out
    sdist = llama_source.sdist(version)
    with tempfile.TemporaryDirectory(prefix="llama-server-build-") as tmp:
        src = unpack_llama_cpp(sdist, Path(tmp))
        build(src, Path(tmp), flags, out, cmake=cmake, log=log)
    info = {"llama_cpp_python": version, "llama_cpp_commit": llama_cpp_commit(sdist), "flags": flags,
            "native": native, "patches": "none (stock)", "machine": platform.machine()}
    (out.parent / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    return out


def build_info(binary: Path) -> dict:
    p = binary.parent / "build.json"
    return json.loads(p.read_text()) if p.exists() else {}


def add_arguments(ap) -> None:
    ap.add_argument("--portable", action="store_true", help="GGML_NATIVE=OFF (default: native)")


def run(args) -> int:
    """A tool, not a benchmark: it prints the binary's path and writes no record."""
    print(ensure_llama_server(native=not args.portable))
    return 0
