"""Captured data on disk: the shard files and manifest capture.py writes, and `Shards`, which
reads one data folder or several back for training.

What a shard holds per token i of a sequence:

- the token id;
- the tapped features, fp16 `[n_taps * n_embd]`: the *input* of each tapped layer at
  position i, exactly what the engine injects into the draft at run time (the last
  token's row is zero: it was never decoded);
- `argmax`: the target's greedy next token after position i (-1 where the target gave no
  logits: prompt rows before the last, and the last row);
- with `top_logprobs` = KT > 0: the target's KT most likely next tokens after position i
  and their full-vocabulary log-softmax, sorted by descending probability (ids -1 and
  log-probs 0 on rows without logits). A trainer uses them as soft labels (KL).

Files (folder = `out`, no absolute paths anywhere, so a folder copied to another machine
resumes there): `manifest.json` lists shards (with what each holds: "topk" = KT or 0,
"n_sampled"), token counts, disk use and the keys already answered (prompt key, or
"<prompt key>.s<j>" for sample j), so a killed run resumes where it stopped (a shard's
files are written whole, then the manifest). Shard i is `shard-0000i.feats.npy`
`[N, n_enc]` fp16, `.index.npz` (tokens, offsets, n_prompt, keys, splits, argmax,
sampled) and, with top-k, `.topk-ids.npy` `[N, KT]` int32 and `.topk-lp.npy` `[N, KT]`
fp16 (plain .npy, so training memory-maps them). FORMAT 1 folders (greedy answers only,
none of the extra arrays) stay readable: `argmax` is derived from the tokens (topk.py's
`add_topk()` backfills their top-k).

What it is not: running the target (capture.py, topk.py) or the batches a trainer draws
(batches.py). References: docs/training.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from dataclasses import dataclass, field

import numpy as np


MANIFEST = "manifest.json"
FORMAT = 2
FORMATS_READ = (1, 2)
TOPK_IDS, TOPK_LP = ".topk-ids.npy", ".topk-lp.npy"  # shard name + suffix


@dataclass
class CapturedSeq:
    """One sequence as capture decodes it: its tokens, and per row its features, argmax and top-k."""

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
class ShardBuffer:
    """The sequences captured since the last shard: what `write_shard` writes next."""

    seqs: list[CapturedSeq] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.seqs)

    @property
    def n_answer(self) -> int:
        return sum(len(s.tokens) - s.n_prompt for s in self.seqs)


def derived_argmax(tokens: np.ndarray, n_prompt: int) -> np.ndarray:
    """[n] int32 argmax of a greedy sequence: tokens[i + 1] from the prompt's last row on, else -1."""
    g = np.full(len(tokens), -1, np.int32)
    g[n_prompt - 1:-1] = tokens[n_prompt:]
    return g


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no {MANIFEST} in {folder}: capture data first")
    man = json.loads(path.read_text())
    if man.get("format") not in FORMATS_READ:
        raise ValueError(f"{folder} holds data of format {man.get('format')}; this flashdesk reads {FORMATS_READ}")
    return man


def upgrade_manifest(man: dict) -> dict:
    """A format-1 manifest as format 2: its shards hold greedy answers and no top-k."""
    for sh in man["shards"]:
        sh.setdefault("topk", 0)
        sh.setdefault("n_sampled", 0)
    man.setdefault("topk", 0)
    man.setdefault("n_sampled", 0)
    man["format"] = FORMAT
    return man


def save_atomic(path: Path, save) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        save(f)
    os.replace(tmp, path)


def write_shard(out: Path, man: dict, buf: ShardBuffer, kt: int) -> None:
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
        save_atomic(out / (name + suffix), save)
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
        self.manifests = [read_manifest(p) for p in self.paths]
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
