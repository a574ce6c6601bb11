"""Measure this computer for the speed prediction (speed.py): how fast its threads read memory, a
decode of a throw-away file of wide Q4_K layers (timing_file.py), and a few decodes of the model in
use. A few seconds with SmolLM2.

It runs in a child process (`python -m engine.advisor.measure MODEL THREADS`, one JSON line out), so
the serving engine's context and threads are never touched and a crash costs nothing. The results
are kept in a small JSON file per model file, thread count and llama.cpp build, so a page does not
wait for one on each visit. One measurement taken while the computer was busy (a test suite, a
build) reads several times too slow and would steer the recommendation for good, so the file keeps
the last few (when, and whether flashdesk was idle), the figure used is the best recent idle one
(`best`), and another is taken in the background while fewer than WANT recent idle ones exist
(`due`): only while flashdesk serves no request, and abandoned the moment one arrives.

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelLoadError
from ..llama import ggml
from . import timing_file
from ..models.catalog import DEFAULT_MODEL
from .speed import WORK_ORDER_PROMPT_TOKENS, Rates
from ..models.store import InstalledModel, ModelStore

log = logging.getLogger("flashdesk.engine")

PROMPT = WORK_ORDER_PROMPT_TOKENS  # tokens read in one batch, as a work order's message is
DECODES = 16  # single-token decodes after it; their median is one token's time
READ_BYTES = 1 << 30  # the memory probe's array: past any processor's caches (server L3 reaches hundreds of MB)
READS = 5  # passes over it; the median counts (a shared machine's neighbours push single passes both ways)
TIMEOUT_S = 120.0
VERSION = 3  # of the cached JSON (3: the timing file's weight rate)
CACHE_NAME = "speed.json"  # in the store's home
KEEP = 5  # measurements kept in the file, newest first: older ones age out, so the figure follows the computer
WANT = 3  # idle measurements younger than FRESH_S wanted: with fewer, another is taken
FRESH_S = 7 * 86400.0
GAP_S = 600.0  # between two tries: a neighbour's load that slowed one has usually moved on by the next
QUIET_S = 5.0  # flashdesk idle this long before a measurement starts (not between two requests of a burst)
IDLE_WAIT_S = 600.0  # a background refresh waits this long for a quiet moment, then gives up until asked again
POLL_S = 0.1  # how soon a request stops a measurement under way
_measuring = threading.Lock()  # held while one runs: two at once would each see half the machine
_tried: dict[tuple, float] = {}  # (cache file, model path, threads, build) -> monotonic time of the last try


@dataclass(frozen=True)
class Measured:
    """One measurement as kept in speed.json."""

    rates: Rates
    at: float  # when it was taken, seconds since the epoch
    idle: bool | None  # flashdesk served no request throughout; None: a file from before this was recorded


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


def measure(model_path: str, threads: int, timeout: float = TIMEOUT_S,
            busy: Callable[[], bool] | None = None) -> Rates | None:
    """This computer's Rates with the GGUF at `model_path`, measured in a child process. With `busy`,
    the child is killed as soon as it says True and None comes back: a request must not share the
    processor with a measurement, and a figure taken while it did would read too slow."""
    child = subprocess.Popen([sys.executable, "-m", "engine.advisor.measure", model_path, str(threads)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = child.communicate(timeout=POLL_S)  # drains the pipes while it waits
            break
        except subprocess.TimeoutExpired:
            stop = busy is not None and busy()
            if stop or time.monotonic() > deadline:
                child.kill()
                child.communicate()
                if stop:
                    return None
                raise ModelLoadError(f"measuring this computer with {model_path} took over {timeout:.0f} s") from None
    if child.returncode != 0:
        lines = [ln for ln in (err or "").splitlines() if ln.strip()]
        raise ModelLoadError(f"could not measure this computer with {model_path}: "
                             f"{lines[-1] if lines else f'exit status {child.returncode}'}")
    return Rates(**json.loads(out.strip().splitlines()[-1]))


def _cache_key(model_path: str, threads: int, build: str) -> str:
    st = os.stat(model_path)
    return f"{VERSION}|{os.path.abspath(model_path)}|{st.st_size}|{st.st_mtime_ns}|{threads}|{build}"


def history(cache_file: Path, model_path: str, threads: int, build: str) -> list[Measured]:
    """The measurements kept for the same model file, threads and llama.cpp build, oldest first. A file
    written before the history was kept holds one figure: it counts as one measurement of unknown
    idleness, taken when the file was written."""
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
        if data.get("key") != _cache_key(model_path, threads, build):
            return []
        if "history" not in data:
            return [Measured(Rates(**data["rates"]), cache_file.stat().st_mtime, None)]
        return [Measured(Rates(**h["rates"]), float(h["at"]), h.get("idle")) for h in data["history"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []  # none yet, or unreadable: measure again


def _fresh_idle(m: Measured, now: float) -> bool:
    return m.idle is True and now - m.at < FRESH_S


def best(kept: list[Measured], now: float | None = None) -> Measured | None:
    """The measurement the figures come from: the fastest (shortest decode of the model in use) of the
    recent idle ones; without any, of the idle ones; without any, of all. A busy computer only ever
    makes a measurement slower, so the fastest is the closest to what the computer does."""
    now = time.time() if now is None else now
    return max(kept, key=lambda m: (_fresh_idle(m, now), m.idle is True, -m.rates.decode_s), default=None)


def due(kept: list[Measured], now: float | None = None) -> bool:
    """Whether another measurement is wanted: fewer than WANT recent idle ones, and none in the last GAP_S."""
    now = time.time() if now is None else now
    if sum(_fresh_idle(m, now) for m in kept) >= WANT:
        return False
    return not kept or now - max(m.at for m in kept) >= GAP_S


def take(cache_file: Path, model_path: str, threads: int, build: str,
         idle: Callable[[], bool] | None = None) -> Measured | None:
    """One measurement now, added to the file (the newest KEEP stay); None when a request came (`idle`
    turned False) and it was abandoned. Without `idle` (the CLI, which serves nothing) it counts as idle."""
    at = time.time()
    rates = measure(model_path, threads, busy=None if idle is None else (lambda: not idle()))
    if rates is None:
        return None
    m = Measured(rates, at, True)
    kept = (history(cache_file, model_path, threads, build) + [m])[-KEEP:]
    chosen = best(kept)
    assert chosen is not None  # kept holds m at least
    data = {"key": _cache_key(model_path, threads, build),
            "rates": asdict(chosen.rates),  # the figure in use, where a file of one figure had it
            "history": [asdict(k) for k in kept]}
    tmp = cache_file.with_name(cache_file.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, cache_file)
    except OSError:
        pass  # a read-only home: measured again next time, still right
    return m


def this_computer(store: ModelStore, in_use: InstalledModel | None, threads: int, wait: bool = False,
                  idle: Callable[[], bool] | None = None) -> Measured | None:
    """The measurement this computer's figures come from, with the model in use (or, when a backend
    answers or nothing is served, the installed default). What was measured before comes back at
    once; when another is `due`, it is taken in the background once flashdesk has been idle for
    QUIET_S (`idle`), or with `wait` (the CLI) right now. None while there is nothing yet (the page
    asks again: `measuring`), when there is no local model to measure with, or when the measurement
    failed (logged): the page then says nothing about speed."""
    model = in_use
    if model is None or model.source.startswith("backend:"):
        model = next((m for m in store.list() if m.name == DEFAULT_MODEL), None)
    if model is None or not os.path.exists(model.path):
        return None
    cache = store.home / CACHE_NAME
    key = (str(cache), model.path, threads, ggml.build_id())
    kept = history(cache, model.path, threads, key[3])
    tried = _tried.get(key)
    if due(kept) and (tried is None or time.monotonic() - tried >= GAP_S) and _measuring.acquire(blocking=wait):
        _tried[key] = time.monotonic()  # a failed or abandoned try waits GAP_S too, not one per page visit
        if wait:
            _refresh(key, None)
            kept = history(cache, model.path, threads, key[3])
        else:
            threading.Thread(target=_refresh, args=(key, idle), name="flashdesk-measure", daemon=True).start()
    return best(kept)


def measuring() -> bool:
    """Whether a measurement runs or waits for a quiet moment now (the page then asks again in a moment)."""
    return _measuring.locked()


def _refresh(key: tuple, idle: Callable[[], bool] | None) -> None:
    """Take one measurement once flashdesk has been idle QUIET_S; a request stops it, and it tries again
    at the next quiet moment, until IDLE_WAIT_S have passed."""
    cache, path, threads, build = key
    try:
        give_up = time.monotonic() + IDLE_WAIT_S
        while time.monotonic() < give_up:
            if idle is not None:
                quiet_since = time.monotonic()
                while time.monotonic() - quiet_since < QUIET_S and time.monotonic() < give_up:
                    time.sleep(POLL_S)
                    if not idle():
                        quiet_since = time.monotonic()
                if time.monotonic() >= give_up:
                    break
            if take(Path(cache), path, threads, build, idle) is not None:
                break
    except (ModelLoadError, OSError) as e:
        log.warning("could not measure this computer's speed: %s", e)
    finally:
        _measuring.release()


def _main(path: str, threads: int) -> int:
    try:
        decode, prefill = _decode_times(path, threads)
    except ModelLoadError as e:
        print(f"\n{e.message}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="flashdesk-timing-") as tmp:
        weights_file = timing_file.write(Path(tmp) / "timing.gguf")
        weights = os.path.getsize(weights_file) / _decode_times(str(weights_file), threads)[0]
    rates = Rates(memory_rate(threads), weights, os.path.getsize(path), decode, prefill, threads)
    print(json.dumps(rates.__dict__))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], int(sys.argv[2])))
