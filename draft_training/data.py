"""Self-distillation data: the target answers the prompt mix, and the same decodes capture
the layer features the draft reads and the target's next-token distribution (no second pass).

What it is: `capture()` runs the target with llama.cpp, many sequences per decode
(continuous batching: prompt chunks and single generated tokens share a batch), with
layer-input capture on for the draft's taps. Every finished sequence (prompt + answer) is
written to shards on disk. Per token i of a sequence a shard holds:

- the token id;
- the tapped features, fp16 `[n_taps * n_embd]`: the *input* of each tapped layer at
  position i, exactly what the engine injects into the draft at run time (the last
  token's row is zero: it was never decoded);
- `argmax`: the target's greedy next token after position i (-1 where the target gave no
  logits: prompt rows before the last, and the last row);
- with `top_logprobs` = KT > 0: the target's KT most likely next tokens after position i
  and their full-vocabulary log-softmax, sorted by descending probability (ids -1 and
  log-probs 0 on rows without logits). A trainer uses them as soft labels (KL).

Answers: one greedy answer per prompt (the engine decodes at temperature 0), and for train
prompts `samples` more answers sampled at a mild `temperature` (seeded per prompt and
sample, so the same on every machine). A sampled trajectory is still good for greedy
drafting because `argmax` is stored at every position (research/draft-recipe.md §1.2
item 4): batches.py keeps a slot's label only where the trajectory agrees with the argmax.
Validation prompts get only the greedy answer (trajectory tau needs greedy labels).

Loop cut: SmolLM2 loops in about a third of long answers, and a loop teaches one trivial
pattern at full capture cost. An answer stops when its last `loop_reps` x p tokens (and at
least `loop_min` tokens) repeat with a period p <= `loop_span`, checked after every token,
at most `loop_span` slice compares per token. The answer keeps that first stretch of the
loop (a few repetitions), so the draft still learns to continue loops; `loop_min` keeps
runs like the digits of 1000000 from counting as loops. `max_new` caps the rest.

Files (folder = `out`, no absolute paths anywhere, so a folder copied to another machine
resumes there): `manifest.json` lists shards (with what each holds: "topk" = KT or 0,
"n_sampled"), token counts, disk use and the keys already answered (prompt key, or
"<prompt key>.s<j>" for sample j), so a killed run resumes where it stopped (a shard's
files are written whole, then the manifest). Shard i is `shard-0000i.feats.npy`
`[N, n_enc]` fp16, `.index.npz` (tokens, offsets, n_prompt, keys, splits, argmax,
sampled) and, with top-k, `.topk-ids.npy` `[N, KT]` int32 and `.topk-lp.npy` `[N, KT]`
fp16 (plain .npy, so training memory-maps them). FORMAT 1 folders (greedy answers only,
none of the extra arrays) stay readable: `argmax` is derived from the tokens, and
`add_topk()` backfills their top-k by one prefill per sequence. `capture()` into a format-1
folder upgrades its manifest to FORMAT 2 and appends.

What it is not: the prompt generator (`prompts.py`, `self_prompts.py`) or the trainer.
Features are fp16 (no fp8 or projection here).
References: DESIGN.md §2 (layer capture), §9 (what a probe measured: ~170 tok/s, ~5.8 GB
of fp16 features per million tokens for 5 taps of 576); research/draft-recipe.md §1.2-1.3.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import llama_cpp
import numpy as np

from engine import native
from engine.llama.chat_template import ChatTemplate
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.llama import ext
from gguf_tools.dflash import capture_refusal

MANIFEST = "manifest.json"
FORMAT = 2
FORMATS_READ = (1, 2)
TOPK_IDS, TOPK_LP = ".topk-ids.npy", ".topk-lp.npy"  # shard name + suffix


class CaptureRefused(ValueError):
    """The target cannot give DFlash training data (architecture, taps, or a foreign data dir)."""


@dataclass(frozen=True)
class CaptureConfig:
    target_layers: tuple[int, ...]  # llama.cpp capture ids (HF layer id + 1)
    n_seq: int = 16  # sequences decoded together
    max_new: int = 288  # answer cap (SmolLM2 loops in about a third of long answers)
    max_prompt: int = 640  # longer prompts are skipped
    n_batch: int = 512
    n_threads: int = 2
    shard_tokens: int = 1 << 16  # a shard is written when it holds this many tokens
    val_every: int = 20  # one prompt in val_every (by hash) is held out for validation
    top_logprobs: int = 32  # KT: top-k next-token ids + log-probs stored per row with logits (0: none)
    samples: int = 0  # extra sampled answers per train prompt (the recipe: 1-2)
    temperature: float = 0.6  # of the sampled answers (mild: most tokens still equal the argmax)
    sample_seed: int = 0
    loop_span: int = 16  # loop cut (module docstring): a span of at most this many tokens ...
    loop_reps: int = 3  # ... repeated this many times in a row ...
    loop_min: int = 24  # ... over at least this many tokens ends the answer
    # the catalog's chat-template variables for this target (Qwen3's enable_thinking=false): the
    # draft learns from the prompts the server will render
    chat_template_vars: dict = field(default_factory=dict)


def prompt_key(prompt: dict) -> str:
    """Stable id of a prompt's content (resume and the train/val split use it)."""
    return hashlib.sha256(json.dumps(prompt["messages"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def sample_key(pkey: str, j: int) -> str:
    """Resume key of sampled answer j to the prompt with key `pkey`."""
    return f"{pkey}.s{j}"


def is_val(key: str, val_every: int) -> bool:
    return int(key, 16) % val_every == 0


def looping(gen: list[int], span: int = 16, reps: int = 3, min_tokens: int = 24) -> bool:
    """True when the last max(reps * p, min_tokens) tokens repeat with a period p <= span."""
    n = len(gen)
    for p in range(1, span + 1):
        w = max(reps * p, min_tokens)
        if w > n:
            continue
        if gen[n - w + p:] == gen[n - w:n - p]:
            return True
    return False


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


def sample_token(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """One token drawn from softmax(logits / temperature), logits [V]."""
    z = logits.astype(np.float64) / temperature
    c = np.cumsum(np.exp(z - z.max()))  # [V]
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(c) - 1)


def derived_argmax(tokens: np.ndarray, n_prompt: int) -> np.ndarray:
    """[n] int32 argmax of a greedy sequence: tokens[i + 1] from the prompt's last row on, else -1."""
    g = np.full(len(tokens), -1, np.int32)
    g[n_prompt - 1:-1] = tokens[n_prompt:]
    return g


@dataclass
class _Seq:
    key: str
    split: str
    tokens: list[int]
    n_prompt: int
    feats: np.ndarray  # [n_prompt + max_new, n_enc] float16, row i = features of token i
    argmax: np.ndarray  # [n_prompt + max_new] int32, -1 = no logits at that row
    top_ids: np.ndarray | None  # [n_prompt + max_new, KT] int32 (-1) or None without top-k
    top_lp: np.ndarray | None  # [n_prompt + max_new, KT] float16
    rng: np.random.Generator | None  # None: greedy
    n_done: int = 0  # tokens decoded so far (their features are in feats)

    @property
    def prefilling(self) -> bool:
        return self.n_done < self.n_prompt


@dataclass
class _ShardBuf:
    seqs: list[_Seq] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.seqs)

    @property
    def n_answer(self) -> int:
        return sum(len(s.tokens) - s.n_prompt for s in self.seqs)


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no {MANIFEST} in {folder}: capture data first")
    man = json.loads(path.read_text())
    if man.get("format") not in FORMATS_READ:
        raise ValueError(f"{folder} holds data of format {man.get('format')}; this flashdesk reads {FORMATS_READ}")
    return man


def _upgrade(man: dict) -> dict:
    """A format-1 manifest as format 2: its shards hold greedy answers and no top-k."""
    for sh in man["shards"]:
        sh.setdefault("topk", 0)
        sh.setdefault("n_sampled", 0)
    man.setdefault("topk", 0)
    man.setdefault("n_sampled", 0)
    man["format"] = FORMAT
    return man


def _load_manifest(out: Path, target: Model, cfg: CaptureConfig) -> dict:
    path = out / MANIFEST
    want = {"target": os.path.basename(target.path), "target_size": target.info.size_bytes,
            "n_embd": target.info.n_embd, "target_layers": list(cfg.target_layers), "val_every": cfg.val_every}
    if not path.exists():
        return {"format": FORMAT, **want, "shards": [], "done": [], "n_tokens": 0, "n_answer_tokens": 0,
                "n_sampled": 0, "topk": 0, "bytes": 0, "seconds": 0.0, "capture": asdict(cfg)}
    man = json.loads(path.read_text())
    diff = [k for k, v in want.items() if man.get(k) != v]
    if man.get("format") not in FORMATS_READ:
        diff.insert(0, "format")
    if diff:
        raise CaptureRefused(f"{out} holds data captured with other settings ({', '.join(diff)} differ). "
                             "HINT: pass another --data folder, or delete this one.")
    if man["format"] != FORMAT:
        save_manifest(out, _upgrade(man))
    if cfg.top_logprobs and man["topk"] not in (0, cfg.top_logprobs):
        raise CaptureRefused(f"{out} holds top-{man['topk']} log-probs; this run asks for top-{cfg.top_logprobs}")
    return man


def _save_atomic(path: Path, save) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        save(f)
    os.replace(tmp, path)


def _write_shard(out: Path, man: dict, buf: _ShardBuf, kt: int) -> None:
    """Write one shard's files atomically, then the manifest."""
    name = f"shard-{len(man['shards']):05d}"
    seqs = buf.seqs
    lens = [len(s.tokens) for s in seqs]
    feats = np.concatenate([s.feats[:n] for s, n in zip(seqs, lens)])  # [N, n_enc] float16
    tokens = np.concatenate([np.asarray(s.tokens, np.int32) for s in seqs])  # [N]
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # [S + 1]
    index = {"tokens": tokens, "offsets": offsets, "n_prompt": np.asarray([s.n_prompt for s in seqs], np.int32),
             "keys": np.asarray([s.key for s in seqs]), "splits": np.asarray([s.split for s in seqs]),
             "argmax": np.concatenate([s.argmax[:n] for s, n in zip(seqs, lens)]),
             "sampled": np.asarray([s.rng is not None for s in seqs])}
    files = [(".feats.npy", lambda f: np.save(f, feats)), (".index.npz", lambda f: np.savez(f, **index))]
    if kt:
        ids = np.concatenate([s.top_ids[:n] for s, n in zip(seqs, lens)])  # [N, KT]
        lp = np.concatenate([s.top_lp[:n] for s, n in zip(seqs, lens)])  # [N, KT]
        files += [(TOPK_IDS, lambda f: np.save(f, ids)), (TOPK_LP, lambda f: np.save(f, lp))]
    nbytes = 0
    for suffix, save in files:
        _save_atomic(out / (name + suffix), save)
        nbytes += (out / (name + suffix)).stat().st_size
    n_answer, n_sampled = buf.n_answer, sum(s.rng is not None for s in seqs)
    man["shards"].append({"name": name, "n_seqs": len(seqs), "n_tokens": int(len(tokens)),
                          "n_answer_tokens": n_answer, "bytes": int(nbytes), "topk": kt, "n_sampled": n_sampled})
    man["done"] += [s.key for s in seqs]
    man["n_tokens"] += int(len(tokens))
    man["n_answer_tokens"] += n_answer
    man["n_sampled"] += n_sampled
    man["bytes"] += int(nbytes)
    if kt:
        man["topk"] = kt
    save_manifest(out, man)
    buf.seqs = []


def save_manifest(out: Path, man: dict) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(man, indent=1))
    os.replace(tmp, out / MANIFEST)


def capture(target_path: str | os.PathLike, prompts: list[dict], out: str | os.PathLike, cfg: CaptureConfig, *,
            max_answer_tokens: int | None = None, progress=None) -> dict:
    """Answer `prompts` with the target and shard tokens + features under `out`; returns the manifest.

    Answers already in the manifest are skipped (resume). Stops taking new answers once
    the manifest holds `max_answer_tokens` answer tokens. `progress(n_answer_tokens)` is
    called after every decode with the tokens generated in this run so far.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = Model(target_path)
    try:
        why = capture_refusal(target.info.architecture)
        if why:
            raise CaptureRefused(f"{why}; none can be trained for it.")
        bad = [t for t in cfg.target_layers if not 0 <= t < target.info.n_layer]
        if bad:
            raise CaptureRefused(f"tap ids {bad} are outside the target's {target.info.n_layer} layers")
        man = _load_manifest(out, target, cfg)
        return _run(target, _jobs(prompts, set(man["done"]), cfg), out, man, cfg, max_answer_tokens, progress)
    finally:
        target.close()


def _jobs(prompts: list[dict], done: set[str], cfg: CaptureConfig):
    """(prompt, key, split, sample index or None) of every answer still to write, in prompt order."""
    seen = set()
    for p in prompts:
        pk = prompt_key(p)
        if pk in seen:
            continue
        seen.add(pk)
        split = "val" if is_val(pk, cfg.val_every) else "train"
        if pk not in done:
            yield p, pk, split, None
        for j in range(cfg.samples if split == "train" else 0):
            if sample_key(pk, j) not in done:
                yield p, sample_key(pk, j), split, j


def _run(target: Model, jobs, out: Path, man: dict, cfg: CaptureConfig, max_answer_tokens, progress):
    template = ChatTemplate(target, cfg.chat_template_vars)
    n_embd, taps, kt = target.info.n_embd, cfg.target_layers, cfg.top_logprobs
    n_enc = len(taps) * n_embd
    n_ctx = cfg.max_prompt + cfg.max_new + 1
    ctx = Context(target, ContextConfig(n_ctx_seq=n_ctx, n_seq=cfg.n_seq, n_batch=cfg.n_batch, n_threads=cfg.n_threads))
    for lid in taps:  # before the first decode (DESIGN.md §2)
        ext.llama_set_embeddings_layer_inp(ctx.ptr, lid, True)
    layers = (ctypes.c_void_p * len(taps))()
    slots: list[_Seq | None] = [None] * cfg.n_seq
    buf = _ShardBuf()
    t0, generated = time.perf_counter(), 0
    scratch = np.empty((cfg.n_batch, n_enc), np.float32)  # [n_batch, n_enc] this decode's features
    rendered: dict[str, list[int] | None] = {}  # prompt key -> tokens (None: skipped), for its samples

    def budget_left() -> bool:
        live = sum(len(s.tokens) - s.n_prompt for s in slots if s is not None)
        return max_answer_tokens is None or man["n_answer_tokens"] + buf.n_answer + live < max_answer_tokens

    def tokens_of(p: dict) -> list[int] | None:
        pk = prompt_key(p)
        if pk not in rendered:
            rendered.clear()  # a prompt's samples follow it: keep one
            try:
                toks = target.tokenize(_render(template, p))
            except Exception:  # a user file line the template rejects: skip it, keep going
                toks = None
            rendered[pk] = toks if toks is not None and 2 <= len(toks) <= cfg.max_prompt else None
        return rendered[pk]

    def next_seq() -> _Seq | None:
        for p, key, split, j in jobs:
            toks = tokens_of(p)
            if toks is None:
                continue
            cap = len(toks) + cfg.max_new
            rng = None if j is None else np.random.default_rng([cfg.sample_seed, int(prompt_key(p), 16), j])
            return _Seq(key, split, list(toks), len(toks), np.zeros((cap, n_enc), np.float16),
                        np.full(cap, -1, np.int32), np.full((cap, kt), -1, np.int32) if kt else None,
                        np.zeros((cap, kt), np.float16) if kt else None, rng)
        return None

    try:
        while True:
            for i, s in enumerate(slots):
                if s is None and budget_left():
                    slots[i] = next_seq()
            if all(s is None for s in slots):
                break
            ctx.batch.clear()
            plan: list[tuple[int, int, int, bool]] = []  # (slot, first row, n rows, wants logits)
            for i, s in enumerate(slots):  # generating sequences first: one token each
                if s is not None and not s.prefilling:
                    row = ctx.batch.add(s.tokens[s.n_done], s.n_done, i, True)
                    plan.append((i, row, 1, True))
            for i, s in enumerate(slots):  # then prompt chunks in the room that is left
                if s is None or not s.prefilling or ctx.batch.room == 0:
                    continue
                n = min(ctx.batch.room, s.n_prompt - s.n_done)
                last = s.n_done + n == s.n_prompt
                row = ctx.batch.n
                for j in range(n):
                    ctx.batch.add(s.tokens[s.n_done + j], s.n_done + j, i, last and j == n - 1)
                plan.append((i, row, n, last))
            ctx.decode(ctx.batch)
            for k, lid in enumerate(taps):
                layers[k] = ext.llama_get_embeddings_layer_inp(ctx.ptr, lid)  # [n_batch, n_embd] each
            n_rows = ctx.batch.n
            native.gather_features(layers, n_embd, ctx.n_batch, np.arange(n_rows, dtype=np.int32), scratch[:n_rows])
            n_out = sum(1 for p in plan if p[3])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx.ptr), shape=(n_out, target.n_vocab))
            next_ids = native.argmax_rows(logits)  # [n_out] in batch order of the rows with logits
            top = top_logprobs(logits, kt) if kt else None  # the same logits: no second pass
            o = 0
            for i, row, n, wants in plan:
                s = slots[i]
                s.feats[s.n_done:s.n_done + n] = scratch[row:row + n]
                s.n_done += n
                if not wants:
                    continue
                r = s.n_done - 1  # the row these logits belong to
                s.argmax[r] = next_ids[o]
                if top is not None:
                    s.top_ids[r], s.top_lp[r] = top[0][o], top[1][o]
                tok = int(next_ids[o]) if s.rng is None else sample_token(logits[o], cfg.temperature, s.rng)
                o += 1
                s.tokens.append(tok)
                generated += 1
                gen = s.tokens[s.n_prompt:]
                if (target.is_eog(tok) or len(gen) >= cfg.max_new
                        or looping(gen, cfg.loop_span, cfg.loop_reps, cfg.loop_min)):
                    buf.seqs.append(s)  # its last token was never decoded: its feature row stays zero
                    ctx.forget(i)
                    slots[i] = None
            if buf.n_tokens >= cfg.shard_tokens:
                _flush(out, man, buf, t0, kt)
                t0 = time.perf_counter()
            if progress is not None:
                progress(generated)
    except KeyboardInterrupt:
        if buf.seqs:  # Ctrl-C keeps every finished answer; only those still being written are lost
            _flush(out, man, buf, t0, kt)
        raise
    finally:
        ctx.close()
    if buf.seqs:
        _flush(out, man, buf, t0, kt)
    return man


def _flush(out: Path, man: dict, buf: _ShardBuf, t0: float, kt: int) -> None:
    man["seconds"] = round(man["seconds"] + time.perf_counter() - t0, 1)
    _write_shard(out, man, buf, kt)


def _render(template: ChatTemplate, prompt: dict) -> str:
    return template.render(prompt["messages"])


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
    man = _read_manifest(out)
    if man.get("topk", 0) not in (0, k):
        raise ValueError(f"{out} holds top-{man['topk']} log-probs already; asked for top-{k}")
    if man["format"] != FORMAT:
        save_manifest(out, _upgrade(man))
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
                    _save_atomic(out / (sh["name"] + suffix), lambda f, a=arr: np.save(f, a))
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


class Shards:
    """Captured data read back, from one data folder or several (their sequences
    concatenated): every sequence as (tokens [n] int32, features [n, n_enc] fp16
    memory-mapped, n_prompt), with the target's argmax per row and, where captured, its
    top-k; split into "train" and "val" by prompt ("val" holds greedy answers only)."""

    def __init__(self, path_or_paths: str | os.PathLike | list):
        many = not isinstance(path_or_paths, (str, os.PathLike))
        self.paths = [Path(p) for p in (path_or_paths if many else [path_or_paths])]
        if not self.paths:
            raise ValueError("Shards needs at least one data folder")
        self.path = self.paths[0]
        self.manifests = [_read_manifest(p) for p in self.paths]
        self.manifest = _merged(self.paths, self.manifests)
        self.seqs: dict[str, list[tuple[int, int]]] = {"train": [], "val": []}  # split -> (shard, seq)
        self._feats, self._index, self._topk = [], [], []
        for folder, man in zip(self.paths, self.manifests):
            for sh in man["shards"]:
                si = len(self._index)
                self._feats.append(np.load(folder / (sh["name"] + ".feats.npy"), mmap_mode="r"))
                idx = dict(np.load(folder / (sh["name"] + ".index.npz")))
                if "argmax" not in idx:  # format 1: greedy answers, argmax = the next token
                    idx["argmax"] = np.concatenate(
                        [derived_argmax(idx["tokens"][a:b], int(p)) for a, b, p in
                         zip(idx["offsets"][:-1], idx["offsets"][1:], idx["n_prompt"])]).astype(np.int32)
                    idx["sampled"] = np.zeros(len(idx["n_prompt"]), bool)
                self._index.append(idx)
                self._topk.append((np.load(folder / (sh["name"] + TOPK_IDS), mmap_mode="r"),
                                   np.load(folder / (sh["name"] + TOPK_LP), mmap_mode="r")) if sh.get("topk") else None)
                for qi, (split, sampled) in enumerate(zip(idx["splits"], idx["sampled"])):
                    if str(split) == "val" and sampled:
                        continue  # trajectory tau needs greedy labels (capture never writes these)
                    self.seqs[str(split)].append((si, qi))

    @property
    def n_enc(self) -> int:
        return len(self.manifest["target_layers"]) * self.manifest["n_embd"]

    @property
    def topk_k(self) -> int:
        """KT of the shards that have top-k (0: none has)."""
        return int(self.manifest.get("topk", 0))

    def _span(self, shard: int, seq: int) -> tuple[int, int]:
        off = self._index[shard]["offsets"]
        return int(off[seq]), int(off[seq + 1])

    def get(self, shard: int, seq: int) -> tuple[np.ndarray, np.ndarray, int]:
        idx = self._index[shard]
        a, b = self._span(shard, seq)
        return idx["tokens"][a:b], self._feats[shard][a:b], int(idx["n_prompt"][seq])

    def argmax(self, shard: int, seq: int) -> np.ndarray:
        """[n] int32: the target's greedy next token after each position, -1 where unknown."""
        a, b = self._span(shard, seq)
        return self._index[shard]["argmax"][a:b]

    def sampled(self, shard: int, seq: int) -> bool:
        return bool(self._index[shard]["sampled"][seq])

    def topk(self, shard: int, seq: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(ids [n, KT] int32, log-probs [n, KT] fp16) memory-mapped, or None: no top-k in that shard."""
        top = self._topk[shard]
        if top is None:
            return None
        a, b = self._span(shard, seq)
        return top[0][a:b], top[1][a:b]

    def length(self, shard: int, seq: int) -> tuple[int, int]:
        """(n_tokens, n_prompt) of one sequence."""
        a, b = self._span(shard, seq)
        return b - a, int(self._index[shard]["n_prompt"][seq])


def _merged(paths: list[Path], mans: list[dict]) -> dict:
    """One manifest for several folders: they must come from the same target and taps."""
    first = mans[0]
    for path, man in zip(paths[1:], mans[1:]):
        diff = [k for k in ("target", "n_embd", "target_layers") if man.get(k) != first.get(k)]
        if diff:
            raise ValueError(f"{path} and {paths[0]} hold data of different {', '.join(diff)}: "
                             "they cannot train one draft")
    ks = {m.get("topk", 0) for m in mans} - {0}
    if len(ks) > 1:
        raise ValueError(f"the data folders hold top-k of different k ({sorted(ks)}): backfill them alike")
    out = {**first, "format": FORMAT, "topk": ks.pop() if ks else 0, "shards": [sh for m in mans for sh in m["shards"]],
           "done": [k for m in mans for k in m["done"]]}
    for key in ("n_tokens", "n_answer_tokens", "n_sampled", "bytes", "seconds"):
        out[key] = sum(m.get(key, 0) for m in mans)
    return out
