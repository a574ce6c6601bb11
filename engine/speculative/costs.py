"""What a target decode costs on this machine, learned from the decodes themselves.

Every step the engine decodes is a sample: its rows and sequences against the milliseconds the
decode and the reading of its rows took. llama.cpp computes a decode in ubatches (`ubatches`),
and a decode is priced as the sum of its ubatches; a decode of one ubatch is a sample of it.
Samples go into cells keyed by (rows, sequence bucket); a cell's estimate is the median of its
last WINDOW samples, so a noisy neighbour process moves it little and a lasting change (another
load, a hotter chip, a longer context) replaces it within WINDOW decodes. Cells traffic has not
visited are priced from the ones it has: between two known row counts linearly, past them with
the shape of the one-sequence curve, and where that is unknown too with a prior slope that errs
towards trying (a tried path is a sample, and an over-optimistic guess costs one step).

The idle measurement (`FillIn`) decodes on a free sequence only for the one-sequence cells
that lack samples, so a request never waits for it and the chooser never depends on it.
The model is kept as JSON beside the model file, per thread count and llama.cpp build.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Callable, Mapping

from ..llama.context import Context

CURVE_ROWS = 16  # the one-sequence curve the fill-in completes: c(1..CURVE_ROWS)
SEQ_BUCKETS = (1, 2, 4, 8, 16)  # sequences in a decode, rounded up to one of these (more: the last)
WINDOW = 16  # samples per cell: the median of the last WINDOW decodes
MIN_SAMPLES = 3  # a cell prices on its own median from this many samples (fewer: from its neighbours)
STALE_S = 900.0  # a one-sequence cell no decode has visited for this long is measured again when idle
PRIOR_SLOPE = 0.25  # an unvisited row's cost, as a share of c(1), where nothing measured says more
VERSION = 3  # 3: a cell holds whole ubatches only (2 mixed in split decodes)


def seq_bucket(seqs: int) -> int:
    return next((b for b in SEQ_BUCKETS if seqs <= b), SEQ_BUCKETS[-1])


def ubatches(rows_by_seq: Mapping[int, int], n_ubatch: int) -> list[tuple[int, int]]:
    """(rows, seqs) of each ubatch llama.cpp computes a decode in, given its rows per sequence id
    (the batch in sequence id order, as the stepper fills it). Over a KV cache that is not unified
    it splits equally and sequentially (`llama_batch_allocr::split_equal`): a ubatch takes a run of
    consecutive sequence ids and as many rows from each as the one with fewest has left. So a
    sequence's path rows beside other streams' single rows are a ubatch of their own, and a gap in
    the ids of busy sequences splits even a plain step (measured on this 2-core CPU at 8 streams:
    one probe row more cost 20 ms on a 39 ms step, not the 3 ms a row of the step costs)."""
    left = {s: n for s, n in rows_by_seq.items() if n > 0}
    out = []
    while left:
        run: list[int] = []
        for s in sorted(left):
            if (run and s != run[-1] + 1) or len(run) == n_ubatch:
                break
            run.append(s)
        k = min(min(left[s] for s in run), max(1, n_ubatch // len(run)))
        out.append((k * len(run), len(run)))
        for s in run:
            left[s] -= k
            if not left[s]:
                del left[s]
    return out


class CostModel:
    """Milliseconds for one target decode of `rows` rows over `seqs` sequences (`cost`), learned
    from `observe`. Not thread-safe: the engine's worker thread alone observes and prices."""

    def __init__(self, n_threads: int, build: str = "", clock: Callable[[], float] = time.monotonic):
        self.n_threads, self.build, self.clock = n_threads, build, clock
        self.cells: dict[tuple[int, int], deque[float]] = {}  # (rows, seq bucket) -> the last WINDOW ms
        self.seen: dict[tuple[int, int], float] = {}  # (rows, seq bucket) -> clock() of its last sample
        self._medians: dict[tuple[int, int], float] = {}  # the cells' medians, computed when asked
        self._known: dict[int, list[tuple[int, float]]] = {}  # per bucket: (rows, median), rising; built when asked

    def observe(self, rows: int, seqs: int, ms: float) -> None:
        if rows < 1 or not ms > 0.0:
            return
        key = (rows, seq_bucket(seqs))
        self.cells.setdefault(key, deque(maxlen=WINDOW)).append(float(ms))
        self.seen[key] = self.clock()
        self._medians.pop(key, None)
        self._known.pop(key[1], None)  # a decode per step: only its cell and bucket are priced anew

    def observe_decode(self, rows_by_seq: Mapping[int, int], n_ubatch: int, ms: float) -> None:
        """A decode's time, rows per sequence id: a sample of its one ubatch. A decode llama.cpp
        split is not one: its ubatches were not timed apart, and its sum is priced from theirs."""
        parts = ubatches(rows_by_seq, n_ubatch)
        if len(parts) == 1:
            self.observe(*parts[0], ms)

    @property
    def ready(self) -> bool:
        """c(1) is known: the chooser can price a path (before, every step decodes plainly)."""
        return len(self.cells.get((1, 1), ())) >= MIN_SAMPLES

    def missing(self) -> list[int]:
        """One-sequence row counts 1..CURVE_ROWS the idle fill-in should measure: too few samples,
        or none for STALE_S."""
        now = self.clock()
        return [r for r in range(1, CURVE_ROWS + 1)
                if len(self.cells.get((r, 1), ())) < MIN_SAMPLES or now - self.seen.get((r, 1), now) > STALE_S]

    def cost(self, rows: int, seqs: int = 1) -> float:
        """The estimated milliseconds of one decode (needs `ready`)."""
        return self._estimate(max(rows, 1), seq_bucket(seqs))

    def decode_cost(self, rows_by_seq: Mapping[int, int], n_ubatch: int) -> float:
        """The estimated milliseconds of a decode of these rows per sequence id: its ubatches'."""
        return sum(self.cost(rows, seqs) for rows, seqs in ubatches(rows_by_seq, n_ubatch))

    def curve(self, seqs: int = 1) -> list[float]:
        """c(1..CURVE_ROWS) as priced now (reports and benches)."""
        return [self.cost(k, seqs) for k in range(1, CURVE_ROWS + 1)]

    def _points(self, bucket: int) -> list[tuple[int, float]]:
        """The bucket's cells with MIN_SAMPLES, in rows order, made rising: more rows never cost less."""
        pts = self._known.get(bucket)
        if pts is None:
            pts = sorted((key[0], self._median(key)) for key, ms in self.cells.items()
                         if key[1] == bucket and len(ms) >= MIN_SAMPLES)
            for i in range(1, len(pts)):
                pts[i] = (pts[i][0], max(pts[i][1], pts[i - 1][1]))
            self._known[bucket] = pts
        return pts

    def _median(self, key: tuple[int, int]) -> float:
        if key not in self._medians:
            self._medians[key] = statistics.median(self.cells[key])
        return self._medians[key]

    def _estimate(self, rows: int, bucket: int) -> float:
        pts = self._points(bucket)
        below = next((p for p in reversed(pts) if p[0] <= rows), None)
        above = next((p for p in pts if p[0] >= rows), None)
        if below and above:
            if above[0] == below[0]:
                return below[1]
            return below[1] + (above[1] - below[1]) * (rows - below[0]) / (above[0] - below[0])
        if bucket > 1:  # no cell on this side: the one-sequence curve's shape from the nearest cell
            if not pts:
                return self._estimate(rows, 1)
            nearest = below or above
            assert nearest is not None  # pts is not empty
            r0, ms0 = nearest  # and never less than one sequence's decode of as many rows
            alone = self._estimate(rows, 1)
            return max(ms0 + alone - self._estimate(r0, 1), alone)
        if not pts:
            raise LookupError("no decode has been timed yet")
        if above:  # fewer rows than any cell: the first cell (rising from c(1) down is not possible)
            return above[1]
        slope = PRIOR_SLOPE * pts[0][1]
        if len(pts) >= 2:  # past the last cell: its segment's slope goes on (flat: a guess that gets tried)
            (r1, m1), (r2, m2) = pts[-2], pts[-1]
            slope = (m2 - m1) / (r2 - r1)
        assert below is not None  # pts is not empty, and no cell is above
        return below[1] + slope * (rows - below[0])

    # -- kept beside the model --------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike | None, n_threads: int, build: str = "",
             clock: Callable[[], float] = time.monotonic) -> "CostModel":
        """The model learned earlier for this thread count and build, else an empty one (a file from
        another thread count, another build, or an older format teaches nothing here)."""
        model = cls(n_threads, build, clock)
        if path is None:
            return model
        try:
            data = json.loads(Path(path).read_text("utf-8"))
            if data.get("version") == VERSION and data.get("n_threads") == n_threads and data.get("build") == build:
                now = clock()
                for rows, bucket, ms in data["cells"]:
                    if int(rows) >= 1 and int(bucket) in SEQ_BUCKETS:
                        key = (int(rows), int(bucket))
                        model.cells[key] = deque((float(x) for x in ms if float(x) > 0.0), maxlen=WINDOW)
                        model.seen[key] = now
        except (OSError, ValueError, TypeError, KeyError):
            model.cells.clear()
            model.seen.clear()
        return model

    def save(self, path: str | os.PathLike) -> None:
        data = {"version": VERSION, "n_threads": self.n_threads, "build": self.build,
                "cells": [[r, b, [round(x, 4) for x in ms]] for (r, b), ms in sorted(self.cells.items())
                          if len(ms) >= MIN_SAMPLES]}
        try:
            tmp = Path(f"{path}.tmp")
            tmp.write_text(json.dumps(data), "utf-8")
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only store: learned again next time


class FillIn:
    """The idle measurement: one-sequence decodes of the row counts the model lacks, one decode
    per `step()`, on the engine's last sequence (which the worker frees first), after
    `context_tokens` of filler history. A request that arrives waits at most one decode: the
    worker calls `pause()`, which removes the filler, and the fill-in resumes when it is idle
    again. It never decodes into another slot's sequence."""

    def __init__(self, ctx: Context, model: CostModel, seq_id: int, context_tokens: int = 256):
        self.ctx, self.model, self.seq_id = ctx, model, seq_id
        self.context_tokens = max(1, min(context_tokens, ctx.n_ctx_seq - CURVE_ROWS))
        self.filler = ctx.model.bos_id if ctx.model.bos_id >= 0 else 0
        self.history = 0  # filler tokens in the sequence's cache so far

    @property
    def primed(self) -> bool:
        return self.history > 0

    def step(self) -> bool:
        """One decode; True once no one-sequence row count is missing."""
        todo = self.model.missing()
        if not todo:
            self.pause()
            return True
        ctx, batch, n, q = self.ctx, self.ctx.batch, self.context_tokens, self.seq_id
        try:
            batch.clear()
            if self.history < n:  # the history first, CURVE_ROWS tokens per step
                for i in range(self.history, min(self.history + CURVE_ROWS, n)):
                    batch.add(self.filler, i, q, logits=False)
                ctx.decode(batch)
                self.history = min(self.history + CURVE_ROWS, n)
                return False
            rows = todo[0]
            for j in range(rows):
                batch.add(self.filler, n + j, q, logits=True)
            t0 = time.perf_counter()
            ctx.decode(batch)
            self.model.observe(rows, 1, (time.perf_counter() - t0) * 1000.0)
            if not ctx.forget(q, n):  # recurrent memory rolls back only inside a decode
                self.pause()  # the history is decoded again next step
        except BaseException:
            self.pause()
            raise
        finally:
            batch.clear()
        return False

    def pause(self) -> None:
        if self.history:
            self.ctx.forget(self.seq_id)
            self.history = 0

