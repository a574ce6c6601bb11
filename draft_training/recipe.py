"""What a training run is given and what it fixes from its data before the first step.

What it is: `TrainConfig`, one field per choice of the recipe, and `V1`; a config saved by
another trainer read back (`config_from_dict`); and the numbers a run derives from the train
split once: its answer anchors (what one pass covers) and the steps for a number of passes,
the features' per-channel scale, and the kept output vocabulary.

Recipes: `V1` is the first recipe (docs/training.md: decay-weighted CE + selector CE, free
codebooks, cosine over the budget). Recipe v2 (docs/training.md) adds one field per change:
KL on the target's top-32, D-PACE weights, factorised codebooks, a warm start, a schedule of
2 passes with best.pt and a plateau stop. `TrainConfig()` keeps the changes an A/B showed to
help: so far the schedule (see the comment on the defaults).

What it is not: the training loop, its schedule and checkpoints (`train.py`), the batches
(`batches.py`) or the loss (`loss.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from .batches import anchors_of
from .shards import Shards


WARM_STARTS = ("none", "target")
RUNTIME_FIELDS = ("threads", "device")  # where a run executes: a resumed run takes these from the caller


@dataclass(frozen=True)
class TrainConfig:
    n_layer: int = 2
    block: int = 8  # anchor + 7 slots, the block length the draft is trained (and shipped) for
    n_keep: int | None = 8192  # reduced output vocabulary (most frequent answer tokens); None = full
    selector_rank: int = 32
    lr: float = 1e-3
    codebook_lr_mult: float = 3.0
    warmup_steps: int = 40
    min_lr_frac: float = 0.1
    weight_decay: float = 0.01
    clip: float = 1.0
    # defaults from the A/B of 2026-12-02 (engine/drafts/smollm2-dflash2.md): continuing the shipped draft,
    # neither the KL nor D-PACE with factorised codebooks beat decay with free tables; each stays a field to A/B
    position_weights: str = "decay"  # "decay": exp(-(k-1)/decay); "dpace": D-PACE (loss.py)
    decay: float = 4.0  # slot weights exp(-(k-1)/decay) with position_weights "decay"
    dpace_alpha: float = 0.5  # D-PACE floor: q_i = (1 - alpha) exp(-CE_i) + alpha
    kl_weight: float = 0.0  # weight of the KL to the target's top-k (batches with teacher data); 0 = off
    selector_weight: float = 1.0
    codebooks: str = "free"  # selector codebooks: "free" [V, R] tables, "factorised" emb @ P
    warm_start: str = "none"  # "target": draft layers from the target's deepest layers (warm_start.py)
    init_from: str | None = None  # a DFlash 2 draft GGUF to continue (its shape, vocabulary and weights)
    feature_noise: float = 0.0  # sigma of Gaussian noise on the scaled features in training; 0 = off
    passes: float | None = 2.0  # schedule sized to this many passes over the train anchors; None = the budget
    patience: int = 3  # stop after this many evaluations without a gain of min_delta; 0 = never
    min_delta: float = 0.01  # held-out tau gain (best selector) that counts as progress
    keep_best: bool = True  # write best.pt at each best evaluation; export it by default
    n_seqs: int = 8  # sequences per batch
    n_anchors: int = 24  # blocks per sequence
    seed: int = 0
    threads: int = 2
    device: str = "cpu"  # "cuda" puts model, batches and loss on the GPU
    checkpoint_every_s: float = 300.0
    eval_every_s: float = 600.0  # 0 = not by time
    eval_every_steps: int = 0  # 0 = not by steps
    eval_seqs: int = 24


# the first recipe (docs/training.md), reproducible: every v2 switch off
V1 = TrainConfig(position_weights="decay", kl_weight=0.0, codebooks="free", passes=None, patience=0,
                 keep_best=False, eval_every_s=900.0)


def config_from_dict(d: dict, runtime: TrainConfig | None = None) -> TrainConfig:
    """A TrainConfig saved by an older or newer trainer: fields it lacks read as V1 (what that
    trainer did), fields this one does not know are dropped; RUNTIME_FIELDS from `runtime`."""
    names = {f.name for f in fields(TrainConfig)}
    cfg = replace(V1, **{k: v for k, v in d.items() if k in names})
    if runtime is not None:
        cfg = replace(cfg, **{k: getattr(runtime, k) for k in RUNTIME_FIELDS})
    return cfg


def train_anchor_count(shards: Shards) -> int:
    """Answer anchors of the train split (what one pass covers)."""
    return int(sum(len(anchors_of(*shards.length(sh, q))) for sh, q in shards.seqs["train"]))


def steps_for_passes(passes: float, n_anchors_total: int, n_seqs: int, n_anchors: int) -> int:
    """Steps that visit passes x n_anchors_total anchors at n_seqs x n_anchors per step."""
    return max(1, math.ceil(passes * n_anchors_total / (n_seqs * n_anchors)))


def feature_scale(shards: Shards, n_seqs: int = 64) -> np.ndarray:
    """[n_enc] 1 / per-channel RMS over train sequences, position 0 (the attention sink,
    RMS ~1000 in deep taps) left out; export folds it into fc."""
    acc, n = np.zeros(shards.n_enc), 0
    for sh, q in shards.seqs["train"][:n_seqs]:
        _, f, _ = shards.get(sh, q)
        x = np.asarray(f[1:-1], np.float64)  # the last row was never decoded (zeros)
        acc += (x * x).sum(0)
        n += len(x)
    return (1.0 / np.sqrt(acc / max(n, 1) + 1e-6)).astype(np.float32)


def frequent_ids(shards: Shards, n_keep: int, n_vocab: int) -> np.ndarray:
    """The n_keep target ids seen most often in train answers (ties by id), sorted."""
    counts = np.zeros(n_vocab, np.int64)
    for sh, q in shards.seqs["train"]:
        toks, _, n_prompt = shards.get(sh, q)
        np.add.at(counts, np.asarray(toks[n_prompt:], np.int64), 1)
    order = np.lexsort((np.arange(n_vocab), -counts))
    return np.sort(order[:n_keep]).astype(np.int64)
