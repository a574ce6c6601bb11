"""Measure this computer for the speed prediction (speed.py): how fast its threads read memory, and a
few decodes of the model in use. About a second for SmolLM2.

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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from ..llama import ggml
from .catalog import DEFAULT_MODEL
from .speed import WORK_ORDER_PROMPT_TOKENS, Rates
from .store import InstalledModel, ModelStore

log = logging.getLogger("flashdesk.engine")

PROMPT = WORK_ORDER_PROMPT_TOKENS  # tokens read in one batch, as a work order's message is
DECODES = 16  # single-token decodes after it; their median is one token's time
READ_BYTES = 1 << 30  # the memory probe's array: past any processor's caches (server L3 reaches hundreds of MB)
READS = 5  # passes over it; the median counts (a shared machine's neighbours push single passes both ways)
TIMEOUT_S = 120.0
VERSION = 2  # of the cached JSON (2: times of the model in use, not rates)
CACHE_NAME = "speed.json"  # in the store's home
_measuring = threading.Lock()  # one measurement at a time: two at once would each see half the machine


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


def cached(cache_file: Path, model_path: str, threads: int, build: str) -> Rates:
    """`measure`, or its earlier result for the same model file, threads and llama.cpp build."""
    st = os.stat(model_path)
    key = f"{VERSION}|{os.path.abspath(model_path)}|{st.st_size}|{st.st_mtime_ns}|{threads}|{build}"
    try:
        kept = json.loads(cache_file.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return Rates(**kept["rates"])
    except (OSError, ValueError, TypeError, KeyError):
        pass  # none yet, or unreadable: measure again
    rates = measure(model_path, threads)
    tmp = cache_file.with_name(cache_file.name + ".tmp")
    try:
        tmp.write_text(json.dumps({"key": key, "rates": rates.__dict__}), encoding="utf-8")
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only home: measured again next time, still right
    return rates


def this_computer(store: ModelStore, in_use: InstalledModel | None, threads: int) -> Rates | None:
    """This computer's Rates, measured with the model in use (or, when a backend answers or nothing
    is served, the installed default), once per model, thread count and build; None when there is
    no local model to measure with or the measurement failed (logged): the page then says nothing
    about speed rather than guess."""
    model = in_use
    if model is None or model.source.startswith("backend:"):
        model = next((m for m in store.list() if m.name == DEFAULT_MODEL), None)
    if model is None:
        return None
    with _measuring:
        try:
            return cached(store.home / CACHE_NAME, model.path, threads, ggml.build_id())
        except (ModelLoadError, OSError) as e:
            log.warning("could not measure this computer's speed: %s", e)
            return None


def _main(path: str, threads: int) -> int:
    try:
        decode, prefill = _decode_times(path, threads)
    except ModelLoadError as e:
        print(f"\n{e.message}", file=sys.stderr)
        return 1
    rates = Rates(memory_rate(threads), os.path.getsize(path), decode, prefill, threads)
    print(json.dumps(rates.__dict__))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], int(sys.argv[2])))
