"""Measure this computer for the speed prediction (speed.py): how fast its threads read memory, a
decode of a throw-away file of wide Q4_K layers (probe_model.py), and a few decodes of the model in
use. A few seconds with SmolLM2.

It runs in a child process (`python -m engine.models.measure MODEL THREADS`, one JSON line out), so
the serving engine's context and threads are never touched and a crash costs nothing. The result is
kept in a small JSON file per model file, thread count and llama.cpp build (`cached`), so a page
asks for it once per computer, not once per visit.

Not the prediction (speed.py) nor the learned verify costs (engine/speculative/costs.py), which
price speculation for the model in use only.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from ..llama import ggml
from . import probe_model
from .catalog import DEFAULT_MODEL
from .speed import WORK_ORDER_PROMPT_TOKENS, Rates
from .store import InstalledModel, ModelStore

log = logging.getLogger("flashdesk.engine")

PROMPT = WORK_ORDER_PROMPT_TOKENS  # tokens read in one batch, as a work order's message is
DECODES = 16  # single-token decodes after it; their median is one token's time
READ_BYTES = 1 << 30  # the memory probe's array: past any processor's caches (server L3 reaches hundreds of MB)
READS = 5  # passes over it; the median counts (a shared machine's neighbours push single passes both ways)
TIMEOUT_S = 120.0
VERSION = 3  # of the cached JSON (3: the probe file's weight rate)
CACHE_NAME = "speed.json"  # in the store's home
_measuring = threading.Lock()  # held while one runs: two at once would each see half the machine
_done: dict[tuple, Rates | None] = {}  # (cache file, model path, threads, build) -> what was measured (None: failed)


def memory_rate(threads: int) -> float:
    """Bytes a second `threads` threads read from RAM: each takes a slice of an array bigger than
    any cache and reduces it (NumPy's reductions release the GIL, so the threads run together)."""
    a = np.ones(READ_BYTES // 8, dtype=np.int64)
    parts = np.array_split(a, threads)
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(READS):
            t0 = time.perf_counter()
            list(pool.map(np.max, parts))
            rates.append(a.nbytes / (time.perf_counter() - t0))
    return statistics.median(rates)


def _decode_times(path: str, threads: int) -> tuple[float, float]:
    """(decode, prefill) seconds: one token's decode, and one prompt token's share of a PROMPT batch."""
    from ..llama.context import Context, ContextConfig
    from ..llama.model import Model

    model = Model(path, n_gpu_layers=0)
    ctx = Context(model, ContextConfig(n_ctx_seq=PROMPT + DECODES + 8, n_seq=1, n_batch=PROMPT, n_threads=threads))
    toks = [(31 * i + 7) % model.n_vocab for i in range(PROMPT + DECODES + 1)]
    try:
        b = ctx.batch

        def decode(start: int, n: int) -> float:
            b.clear()
            for j in range(n):
                b.add(toks[start + j], start + j, 0, logits=j == n - 1)
            t0 = time.perf_counter()
            ctx.decode(b)
            return time.perf_counter() - t0

        decode(0, 1)  # the first decode pays for allocations and page faults: not counted
        ctx.forget(0, 0)
        prefill = decode(0, PROMPT) / PROMPT
        one = statistics.median(decode(PROMPT + i, 1) for i in range(DECODES))
    finally:
        ctx.close()
        model.close()
    return one, prefill


def measure(model_path: str, threads: int, timeout: float = TIMEOUT_S) -> Rates:
    """This computer's Rates with the GGUF at `model_path`, measured in a child process."""
    try:
        out = subprocess.run([sys.executable, "-m", "engine.models.measure", model_path, str(threads)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ModelLoadError(f"measuring this computer with {model_path} took over {timeout:.0f} s") from None
    if out.returncode != 0:
        lines = [ln for ln in (out.stderr or "").splitlines() if ln.strip()]
        raise ModelLoadError(f"could not measure this computer with {model_path}: "
                             f"{lines[-1] if lines else f'exit status {out.returncode}'}")
    return Rates(**json.loads(out.stdout.strip().splitlines()[-1]))


def _cache_key(model_path: str, threads: int, build: str) -> str:
    st = os.stat(model_path)
    return f"{VERSION}|{os.path.abspath(model_path)}|{st.st_size}|{st.st_mtime_ns}|{threads}|{build}"


def kept(cache_file: Path, model_path: str, threads: int, build: str) -> Rates | None:
    """The earlier measurement for the same model file, threads and llama.cpp build, if there is one."""
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
        return Rates(**data["rates"]) if data.get("key") == _cache_key(model_path, threads, build) else None
    except (OSError, ValueError, TypeError, KeyError):
        return None  # none yet, or unreadable: measure again


def cached(cache_file: Path, model_path: str, threads: int, build: str) -> Rates:
    """`kept`, or a new `measure` written beside the store for next time."""
    rates = kept(cache_file, model_path, threads, build)
    if rates is not None:
        return rates
    key = _cache_key(model_path, threads, build)
    rates = measure(model_path, threads)
    tmp = cache_file.with_name(cache_file.name + ".tmp")
    try:
        tmp.write_text(json.dumps({"key": key, "rates": rates.__dict__}), encoding="utf-8")
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only home: measured again next time, still right
    return rates


def this_computer(store: ModelStore, in_use: InstalledModel | None, threads: int,
                  wait: bool = False) -> Rates | None:
    """This computer's Rates, measured with the model in use (or, when a backend answers or nothing
    is served, the installed default), once per model, thread count and build. What was measured
    before comes back at once; otherwise the measurement starts in the background and this returns
    None (the page asks again: `measuring`), or with `wait` (the CLI) it returns when done. None too
    when there is no local model to measure with, or the measurement failed (logged): the page then
    says nothing about speed."""
    model = in_use
    if model is None or model.source.startswith("backend:"):
        model = next((m for m in store.list() if m.name == DEFAULT_MODEL), None)
    if model is None:
        return None
    cache = store.home / CACHE_NAME
    key = (str(cache), model.path, threads, ggml.build_id())
    if key in _done:
        return _done[key]
    before = kept(cache, model.path, threads, key[3]) if os.path.exists(model.path) else None
    if before is not None:
        _done[key] = before
        return before
    if _measuring.acquire(blocking=wait):  # one at a time; a second caller finds it running
        if wait:
            _measure_into(key)
            return _done[key]
        threading.Thread(target=_measure_into, args=(key,), name="flashdesk-measure", daemon=True).start()
    return None


def measuring() -> bool:
    """Whether a measurement runs now (the page then asks again in a moment)."""
    return _measuring.locked()


def _measure_into(key: tuple) -> None:
    cache, path, threads, build = key
    try:
        _done[key] = cached(Path(cache), path, threads, build)
    except (ModelLoadError, OSError) as e:
        log.warning("could not measure this computer's speed: %s", e)
        _done[key] = None
    finally:
        _measuring.release()


def _main(path: str, threads: int) -> int:
    try:
        decode, prefill = _decode_times(path, threads)
    except ModelLoadError as e:
        print(f"\n{e.message}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="flashdesk-probe-") as tmp:
        probe = probe_model.write(Path(tmp) / "probe.gguf")
        weights = os.path.getsize(probe) / _decode_times(str(probe), threads)[0]
    rates = Rates(memory_rate(threads), weights, os.path.getsize(path), decode, prefill, threads)
    print(json.dumps(rates.__dict__))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], int(sys.argv[2])))
