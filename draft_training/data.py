"""Self-distillation data: the target answers the prompt mix, and the same decodes capture
the layer features the draft reads (no second pass).

What it is: `capture()` runs the target greedily with llama.cpp, many sequences per
decode (continuous batching: prompt chunks and single generated tokens share a batch),
with layer-input capture on for the draft's taps. Every finished sequence (prompt +
answer) is written to shards on disk: token ids, and per token the tapped features as
fp16 `[n_tokens, n_taps * n_embd]` (the row of token i is the *input* of each tapped
layer at position i, exactly what the engine injects into the draft at run time). A
`manifest.json` lists shards, token counts, disk use and the prompts already answered,
so a killed run resumes where it stopped (a shard is written whole, then the manifest).
`Shards` reads them back (memory-mapped) for training.

What it is not: the prompt generator (`prompts.py`) or the trainer. Answers are greedy,
as the engine decodes at temperature 0; SmolLM2 sometimes loops, so an answer stops at
`max_new` tokens or when its last 64 tokens repeat with a period of at most 32.
References: DESIGN.md §2 (layer capture), §9 (what a probe measured: ~170 tok/s, ~5.8 GB
of fp16 features per million tokens for 5 taps of 576).
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
FORMAT = 1


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
    # the catalog's chat-template variables for this target (Qwen3's enable_thinking=false): the
    # draft learns from the prompts the server will render
    chat_template_vars: dict = field(default_factory=dict)


def prompt_key(prompt: dict) -> str:
    """Stable id of a prompt's content (resume and the train/val split use it)."""
    return hashlib.sha256(json.dumps(prompt["messages"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def is_val(key: str, val_every: int) -> bool:
    return int(key, 16) % val_every == 0


def looping(gen: list[int], window: int = 64, max_period: int = 32) -> bool:
    """True when the last `window` tokens repeat with a period of at most `max_period`."""
    if len(gen) < window:
        return False
    tail = gen[-window:]
    return any(tail[p:] == tail[:-p] for p in range(1, max_period + 1))


@dataclass
class _Seq:
    key: str
    split: str
    tokens: list[int]
    n_prompt: int
    feats: np.ndarray  # [n_prompt + max_new, n_enc] float16, row i = features of token i
    n_done: int = 0  # tokens decoded so far (their features are in feats)

    @property
    def prefilling(self) -> bool:
        return self.n_done < self.n_prompt


@dataclass
class _ShardBuf:
    tokens: list[np.ndarray] = field(default_factory=list)
    feats: list[np.ndarray] = field(default_factory=list)
    n_prompt: list[int] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


def _load_manifest(out: Path, target: Model, cfg: CaptureConfig) -> dict:
    path = out / MANIFEST
    want = {"format": FORMAT, "target": os.path.basename(target.path), "target_size": target.info.size_bytes,
            "n_embd": target.info.n_embd, "target_layers": list(cfg.target_layers), "val_every": cfg.val_every}
    if not path.exists():
        return {**want, "shards": [], "done": [], "n_tokens": 0, "n_answer_tokens": 0, "bytes": 0,
                "seconds": 0.0, "capture": asdict(cfg)}
    man = json.loads(path.read_text())
    diff = [k for k, v in want.items() if man.get(k) != v]
    if diff:
        raise CaptureRefused(f"{out} holds data captured with other settings ({', '.join(diff)} differ). "
                             "HINT: pass another --data folder, or delete this one.")
    return man


def _write_shard(out: Path, man: dict, buf: _ShardBuf) -> None:
    """Write one shard (features .npy + index .npz) atomically, then the manifest."""
    i = len(man["shards"])
    name = f"shard-{i:05d}"
    feats = np.concatenate(buf.feats)  # [N, n_enc] float16
    tokens = np.concatenate(buf.tokens).astype(np.int32)  # [N]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in buf.tokens])]).astype(np.int64)  # [S + 1]
    for suffix, save in ((".feats.npy", lambda f: np.save(f, feats)),
                         (".index.npz", lambda f: np.savez(f, tokens=tokens, offsets=offsets,
                                                            n_prompt=np.asarray(buf.n_prompt, np.int32),
                                                            keys=np.asarray(buf.keys), splits=np.asarray(buf.splits)))):
        tmp = out / (name + suffix + ".tmp")
        with open(tmp, "wb") as f:
            save(f)
        os.replace(tmp, out / (name + suffix))
    n_answer = int(sum(len(t) - p for t, p in zip(buf.tokens, buf.n_prompt)))
    nbytes = feats.nbytes + (out / (name + ".index.npz")).stat().st_size
    man["shards"].append({"name": name, "n_seqs": len(buf.tokens), "n_tokens": int(len(tokens)),
                          "n_answer_tokens": n_answer, "bytes": int(nbytes)})
    man["done"] += buf.keys
    man["n_tokens"] += int(len(tokens))
    man["n_answer_tokens"] += n_answer
    man["bytes"] += int(nbytes)
    save_manifest(out, man)
    buf.__init__()


def save_manifest(out: Path, man: dict) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(man, indent=1))
    os.replace(tmp, out / MANIFEST)


def capture(target_path: str | os.PathLike, prompts: list[dict], out: str | os.PathLike, cfg: CaptureConfig, *,
            max_answer_tokens: int | None = None, progress=None) -> dict:
    """Answer `prompts` with the target and shard tokens + features under `out`; returns the manifest.

    Prompts already in the manifest are skipped (resume). Stops taking new prompts once
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
        done = set(man["done"])
        todo = [p for p in prompts if prompt_key(p) not in done]
        return _run(target, todo, out, man, cfg, max_answer_tokens, progress)
    finally:
        target.close()


def _run(target: Model, todo: list[dict], out: Path, man: dict, cfg: CaptureConfig, max_answer_tokens, progress):
    template = ChatTemplate(target, cfg.chat_template_vars)
    n_embd, taps = target.info.n_embd, cfg.target_layers
    n_enc = len(taps) * n_embd
    n_ctx = cfg.max_prompt + cfg.max_new + 1
    ctx = Context(target, ContextConfig(n_ctx_seq=n_ctx, n_seq=cfg.n_seq, n_batch=cfg.n_batch, n_threads=cfg.n_threads))
    for lid in taps:  # before the first decode (DESIGN.md §2)
        ext.llama_set_embeddings_layer_inp(ctx.ptr, lid, True)
    layers = (ctypes.c_void_p * len(taps))()
    slots: list[_Seq | None] = [None] * cfg.n_seq
    buf, queue = _ShardBuf(), iter(todo)
    seen = set()
    t0, generated = time.perf_counter(), 0
    scratch = np.empty((cfg.n_batch, n_enc), np.float32)  # [n_batch, n_enc] this decode's features

    def budget_left() -> bool:
        return max_answer_tokens is None or man["n_answer_tokens"] + buf_answer() + generated_live() < max_answer_tokens

    def buf_answer() -> int:
        return sum(len(t) - p for t, p in zip(buf.tokens, buf.n_prompt))

    def generated_live() -> int:
        return sum(len(s.tokens) - s.n_prompt for s in slots if s is not None)

    def next_seq() -> _Seq | None:
        for p in queue:
            key = prompt_key(p)
            if key in seen:
                continue
            seen.add(key)
            try:
                toks = target.tokenize(_render(template, p))
            except Exception:  # a user file line the template rejects: skip it, keep going
                continue
            if not 2 <= len(toks) <= cfg.max_prompt:
                continue
            split = "val" if is_val(key, cfg.val_every) else "train"
            return _Seq(key, split, toks, len(toks), np.zeros((len(toks) + cfg.max_new, n_enc), np.float16))
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
            o = 0
            for i, row, n, wants in plan:
                s = slots[i]
                s.feats[s.n_done:s.n_done + n] = scratch[row:row + n]
                s.n_done += n
                if not wants:
                    continue
                tok = int(next_ids[o])
                o += 1
                s.tokens.append(tok)
                generated += 1
                gen = s.tokens[s.n_prompt:]
                if target.is_eog(tok) or len(gen) >= cfg.max_new or (len(gen) % 16 == 0 and looping(gen)):
                    _finish(s, buf)
                    ctx.forget(i)
                    slots[i] = None
            if buf.n_tokens >= cfg.shard_tokens:
                _flush(out, man, buf, t0)
                t0 = time.perf_counter()
            if progress is not None:
                progress(generated)
    except KeyboardInterrupt:
        if buf.tokens:  # Ctrl-C keeps every finished answer; only those still being written are lost
            _flush(out, man, buf, t0)
        raise
    finally:
        ctx.close()
    if buf.tokens:
        _flush(out, man, buf, t0)
    return man


def _flush(out: Path, man: dict, buf: _ShardBuf, t0: float) -> None:
    man["seconds"] = round(man["seconds"] + time.perf_counter() - t0, 1)
    _write_shard(out, man, buf)


def _render(template: ChatTemplate, prompt: dict) -> str:
    return template.render(prompt["messages"])


def _finish(s: _Seq, buf: _ShardBuf) -> None:
    """Move a finished sequence into the shard buffer. Its last token was never decoded, so
    its feature row stays zero: a block anchored there has nothing to predict."""
    n = len(s.tokens)
    buf.tokens.append(np.asarray(s.tokens, np.int32))
    buf.feats.append(s.feats[:n])
    buf.n_prompt.append(s.n_prompt)
    buf.keys.append(s.key)
    buf.splits.append(s.split)


class Shards:
    """Captured data read back: every sequence as (tokens [n] int32, features [n, n_enc] fp16
    memory-mapped, n_prompt), split into "train" and "val" by prompt."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        man_path = self.path / MANIFEST
        if not man_path.exists():
            raise FileNotFoundError(f"no {MANIFEST} in {self.path}: capture data first")
        self.manifest = json.loads(man_path.read_text())
        self.seqs: dict[str, list[tuple[int, int]]] = {"train": [], "val": []}  # split -> (shard, seq)
        self._feats, self._index = [], []
        for si, sh in enumerate(self.manifest["shards"]):
            self._feats.append(np.load(self.path / (sh["name"] + ".feats.npy"), mmap_mode="r"))
            idx = dict(np.load(self.path / (sh["name"] + ".index.npz")))
            self._index.append(idx)
            for qi, split in enumerate(idx["splits"]):
                self.seqs[str(split)].append((si, qi))

    @property
    def n_enc(self) -> int:
        return len(self.manifest["target_layers"]) * self.manifest["n_embd"]

    def get(self, shard: int, seq: int) -> tuple[np.ndarray, np.ndarray, int]:
        idx = self._index[shard]
        a, b = int(idx["offsets"][seq]), int(idx["offsets"][seq + 1])
        return idx["tokens"][a:b], self._feats[shard][a:b], int(idx["n_prompt"][seq])

    def length(self, shard: int, seq: int) -> tuple[int, int]:
        """(n_tokens, n_prompt) of one sequence."""
        idx = self._index[shard]
        return int(idx["offsets"][seq + 1] - idx["offsets"][seq]), int(idx["n_prompt"][seq])
