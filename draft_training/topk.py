"""The target's top-k next-token log-probs: computed from a decode's logits (capture.py calls
`top_logprobs()` on the logits it already has), and backfilled into format-1 data folders,
which hold greedy answers and no top-k, by one prefill per sequence (`add_topk()`).

What it is not: the capture loop (capture.py) or the shard format (shards.py, which says
where top-k is stored). References: docs/training.md.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import llama_cpp
import numpy as np

from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model

from .shards import (FORMAT, TOPK_IDS, TOPK_LP, derived_argmax, read_manifest, save_atomic, save_manifest,
                     upgrade_manifest)


TOPK_CHUNK = 64  # top-k searches the k best chunks of this many logits, not the whole row


def top_logprobs(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """logits [n, V] float32 -> (ids [n, k] int32, full-vocabulary log-softmax [n, k] float16),
    by descending probability, ties by the smaller id (so column 0 equals numpy's argmax; of
    logits tied at the k-th value, any may be kept).

    The k largest logits lie in the k chunks with the largest maxima (a chunk outside them
    has k chunk maxima above its own), so only k * TOPK_CHUNK candidates are partitioned:
    a full-row argpartition costs ~1 ms a row, as much as the decode's share."""
    n, V = logits.shape
    w = TOPK_CHUNK
    x = logits if V % w == 0 else np.pad(logits, ((0, 0), (0, -V % w)), constant_values=-np.inf)
    n_chunk = x.shape[1] // w
    if n_chunk <= k:  # a tiny vocabulary: the whole row
        cand = np.broadcast_to(np.arange(x.shape[1]), (n, x.shape[1]))
    else:
        chunk_max = x.reshape(n * n_chunk, w).max(1).reshape(n, n_chunk)  # [n, V / w]
        best = np.argpartition(chunk_max, -k, axis=1)[:, -k:]  # [n, k] chunk ids
        cand = (best[:, :, None] * w + np.arange(w)).reshape(n, k * w)  # [n, k * w] vocab ids
    cand_val = np.take_along_axis(x, cand, 1)  # [n, k * w]
    part = np.argpartition(cand_val, -k, axis=1)[:, -k:]  # [n, k] the k largest, unordered
    ids, vals = np.take_along_axis(cand, part, 1), np.take_along_axis(cand_val, part, 1)
    order = np.lexsort((ids, -vals), axis=1)
    ids, vals = np.take_along_axis(ids, order, 1), np.take_along_axis(vals, order, 1)
    top = vals[:, :1]  # [n, 1] the row max
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(1))  # [n]
    return ids.astype(np.int32), (vals - lse[:, None]).astype(np.float16)


def add_topk(target_path: str | os.PathLike, data: str | os.PathLike, k: int = 32, n_threads: int = 2,
             progress=None, *, n_batch: int = 512, n_seq: int = 8) -> dict:
    """Backfill the top-k of every shard under `data` that has none (format-1 greedy data):
    one prefill per sequence, many sequences per decode, logits on the rows that had them at
    capture (the prompt's last row to the one before the last token). Resumable per shard (a
    shard's files, then the manifest). Do not run it on a folder a capture is still writing.

    Returns {"shards", "sequences", "tokens" (prefilled), "rows" (with top-k), "argmax_mismatch"
    (rows whose prefill argmax differs from the stored next token: ~0, near-ties aside),
    "seconds"}; `progress(tokens prefilled so far)` after every decode."""
    out = Path(data)
    man = read_manifest(out)
    if man.get("topk", 0) not in (0, k):
        raise ValueError(f"{out} holds top-{man['topk']} log-probs already; asked for top-{k}")
    if man["format"] != FORMAT:
        save_manifest(out, upgrade_manifest(man))
    todo = [sh for sh in man["shards"] if not sh.get("topk")]
    stats = {"shards": 0, "sequences": 0, "tokens": 0, "rows": 0, "argmax_mismatch": 0, "seconds": 0.0}
    if not todo:
        return stats
    target = Model(target_path)
    try:
        if (os.path.basename(target.path), target.info.size_bytes) != (man["target"], man["target_size"]):
            raise ValueError(f"{out} was captured with {man['target']}, not {os.path.basename(target.path)}")
        longest = max(int(np.diff(np.load(out / (sh["name"] + ".index.npz"))["offsets"]).max()) for sh in todo)
        ctx = Context(target, ContextConfig(n_ctx_seq=longest, n_seq=n_seq, n_batch=n_batch, n_threads=n_threads))
        try:
            t0 = time.perf_counter()
            for sh in todo:
                idx = dict(np.load(out / (sh["name"] + ".index.npz")))
                ids, lp, st = _prefill_topk(ctx, idx, k, progress, stats["tokens"])
                for suffix, arr in ((TOPK_IDS, ids), (TOPK_LP, lp)):
                    save_atomic(out / (sh["name"] + suffix), lambda f, a=arr: np.save(f, a))
                    nbytes = (out / (sh["name"] + suffix)).stat().st_size
                    sh["bytes"] += nbytes
                    man["bytes"] += nbytes
                sh["topk"] = man["topk"] = k
                save_manifest(out, man)
                stats["shards"] += 1
                for key in ("sequences", "tokens", "rows", "argmax_mismatch"):
                    stats[key] += st[key]
            stats["seconds"] = round(time.perf_counter() - t0, 1)
        finally:
            ctx.close()
    finally:
        target.close()
    return stats


def _prefill_topk(ctx: Context, idx: dict, k: int, progress, done_before: int):
    """Top-k of one shard's sequences by prefill: (ids [N, k] int32, lp [N, k] fp16, counts)."""
    tokens, offsets, n_prompt = idx["tokens"], idx["offsets"], idx["n_prompt"]
    N, S = len(tokens), len(n_prompt)
    want = idx["argmax"] if "argmax" in idx else np.concatenate(
        [derived_argmax(tokens[offsets[q]:offsets[q + 1]], int(n_prompt[q])) for q in range(S)])  # [N]
    ids, lp = np.full((N, k), -1, np.int32), np.zeros((N, k), np.float16)
    slots: list[list[int] | None] = [None] * ctx.n_seq  # [seq, positions decoded] per KV stream
    queue = iter(range(S))
    st = {"sequences": S, "tokens": 0, "rows": 0, "argmax_mismatch": 0}
    while True:
        for i in range(ctx.n_seq):
            if slots[i] is None:
                q = next(queue, None)
                slots[i] = None if q is None else [q, 0]
        if all(s is None for s in slots):
            break
        ctx.batch.clear()
        out_rows = []  # shard rows whose logits come back, in batch order
        for i, s in enumerate(slots):
            if s is None or ctx.batch.room == 0:
                continue
            q, done = s
            a, n, p = int(offsets[q]), int(offsets[q + 1] - offsets[q]), int(n_prompt[q])
            m = min(ctx.batch.room, n - 1 - done)  # the last token is never decoded (no logits needed)
            for j in range(done, done + m):
                wants = j >= p - 1
                ctx.batch.add(int(tokens[a + j]), j, i, wants)
                if wants:
                    out_rows.append(a + j)
            s[1] += m
        ctx.decode(ctx.batch)
        st["tokens"] += ctx.batch.n
        if out_rows:
            shape = (len(out_rows), ctx.model.n_vocab)
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx.ptr), shape=shape)  # [n_out, V]
            rows = np.asarray(out_rows)
            ids[rows], lp[rows] = top_logprobs(logits, k)
            st["rows"] += len(rows)
            st["argmax_mismatch"] += int((ids[rows, 0] != want[rows]).sum())
        for i, s in enumerate(slots):
            if s is not None and s[1] >= int(offsets[s[0] + 1] - offsets[s[0]]) - 1:
                ctx.forget(i)
                slots[i] = None
        if progress is not None:
            progress(done_before + st["tokens"])
    return ids, lp, st
