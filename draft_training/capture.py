"""Self-distillation data: the target answers the prompt mix, and the same decodes capture
the layer features the draft reads and the target's next-token distribution (no second pass).

What it is: `capture()` runs the target with llama.cpp, many sequences per decode
(continuous batching: prompt chunks and single generated tokens share a batch), with
layer-input capture on for the draft's taps. Every finished sequence (prompt + answer) is
written to shards on disk (shards.py says what a shard holds: per token the id, the tapped
features, the target's argmax and, with `top_logprobs` = KT > 0, its top-KT log-probs from
topk.py, computed from the same logits).

Answers: one greedy answer per prompt (the engine decodes at temperature 0), and for train
prompts `samples` more answers sampled at a mild `temperature` (seeded per prompt and
sample, so the same on every machine). A sampled trajectory is still good for greedy
drafting because `argmax` is stored at every position (docs/training.md
item 4): batches.py keeps a slot's label only where the trajectory agrees with the argmax.
Validation prompts get only the greedy answer (trajectory tau needs greedy labels).

Loop cut: SmolLM2 loops in about a third of long answers, and a loop teaches one trivial
pattern at full capture cost. An answer stops when its last `loop_reps` x p tokens (and at
least `loop_min` tokens) repeat with a period p <= `loop_span`, checked after every token,
at most `loop_span` slice compares per token. The answer keeps that first stretch of the
loop (a few repetitions), so the draft still learns to continue loops; `loop_min` keeps
runs like the digits of 1000000 from counting as loops. `max_new` caps the rest.

Resume: the manifest lists the keys already answered (prompt key, or "<prompt key>.s<j>" for
sample j), so a killed run resumes where it stopped; a folder captured with other settings
is refused, and `capture()` into a format-1 folder upgrades its manifest to FORMAT 2 and
appends.

What it is not: the prompt generator (`prompts.py`, `self_prompts.py`), the shard files and
their reading back (`shards.py`), the top-k backfill of old folders (`topk.py`) or the trainer.
Features are fp16 (no fp8 or projection here).
References: docs/llama-cpp.md (layer capture), docs/training.md (the data: what a probe measured,
~170 tok/s and ~5.8 GB of fp16 features per million tokens for 5 taps of 576).
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

from .shards import (FORMAT, FORMATS_READ, MANIFEST, CapturedSeq, ShardBuffer, save_manifest, upgrade_manifest,
                     write_shard)
from .topk import top_logprobs


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


def sample_token(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """One token drawn from softmax(logits / temperature), logits [V]."""
    z = logits.astype(np.float64) / temperature
    c = np.cumsum(np.exp(z - z.max()))  # [V]
    return min(int(np.searchsorted(c, rng.random() * c[-1], side="right")), len(c) - 1)


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
        save_manifest(out, upgrade_manifest(man))
    if cfg.top_logprobs and man["topk"] not in (0, cfg.top_logprobs):
        raise CaptureRefused(f"{out} holds top-{man['topk']} log-probs; this run asks for top-{cfg.top_logprobs}")
    return man


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
    for lid in taps:  # before the first decode (docs/llama-cpp.md)
        ext.llama_set_embeddings_layer_inp(ctx.ptr, lid, True)
    layers = (ctypes.c_void_p * len(taps))()
    slots: list[CapturedSeq | None] = [None] * cfg.n_seq
    buf = ShardBuffer()
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

    def next_seq() -> CapturedSeq | None:
        for p, key, split, j in jobs:
            toks = tokens_of(p)
            if toks is None:
                continue
            cap = len(toks) + cfg.max_new
            rng = None if j is None else np.random.default_rng([cfg.sample_seed, int(prompt_key(p), 16), j])
            return CapturedSeq(key, split, list(toks), len(toks), np.zeros((cap, n_enc), np.float16),
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


def _flush(out: Path, man: dict, buf: ShardBuffer, t0: float, kt: int) -> None:
    man["seconds"] = round(man["seconds"] + time.perf_counter() - t0, 1)
    write_shard(out, man, buf, kt)


def _render(template: ChatTemplate, prompt: dict) -> str:
    return template.render(prompt["messages"])
