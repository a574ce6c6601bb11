"""Training batches from captured shards: several sequences, many blocks each.

A batch takes S sequences and N anchors in each. An anchor is a position a of the
target's answer (the first generated token or later, as in the engine: the prompt's last
token is never an anchor, the prefill already gave the first answer token). Its block is
`[token a, mask, ..., mask]` at positions a..a+B-1, its labels the target's tokens at
a+1..a+B-1 (-1 past the end), and it sees the injected features of positions < a. The
features of a sequence are loaded once, up to its last anchor, and shared by its blocks.

What it is not: the model or the loss. Shapes: S sequences, L context rows (padded),
N anchors, B block width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .data import Shards


@dataclass
class Batch:
    feats: torch.Tensor  # [S, L, n_enc] float32, rows past a sequence's context are zero
    ctx_pos: torch.Tensor  # [S, L] positions 0..L-1
    ctx_ok: torch.Tensor  # [S, L] bool: a real row
    tokens: torch.Tensor  # [S, N, B] blocks [anchor, mask, ...]
    anchor_pos: torch.Tensor  # [S, N]
    labels: torch.Tensor  # [S, N, B-1] target ids, -1 past the end

    @property
    def anchor(self) -> torch.Tensor:
        return self.tokens[..., 0]


def anchors_of(n_tokens: int, n_prompt: int) -> np.ndarray:
    """Anchor positions of a sequence: the answer's tokens that have a successor."""
    return np.arange(n_prompt, n_tokens - 1)


def make_batch(shards: Shards, seqs: list[tuple[int, int]], anchors: list[np.ndarray], block: int,
               mask_id: int) -> Batch:
    """seqs: (shard, seq) pairs; anchors: positions per sequence (equal counts)."""
    S, N = len(seqs), len(anchors[0])
    L = max(int(a.max()) for a in anchors)
    feats = torch.zeros(S, L, shards.n_enc)
    ctx_ok = torch.zeros(S, L, dtype=torch.bool)
    tokens = torch.full((S, N, block), mask_id, dtype=torch.long)
    labels = torch.full((S, N, block - 1), -1, dtype=torch.long)
    for i, ((sh, q), anc) in enumerate(zip(seqs, anchors)):
        toks, f, _ = shards.get(sh, q)
        n_ctx = int(anc.max())
        feats[i, :n_ctx] = torch.from_numpy(np.asarray(f[:n_ctx], np.float32))
        ctx_ok[i, :n_ctx] = True
        t = torch.from_numpy(np.asarray(toks, np.int64))
        tokens[i, :, 0] = t[anc]
        for k in range(1, block):
            pos = torch.from_numpy(anc + k)
            inside = pos < len(t)
            labels[i, :, k - 1] = torch.where(inside, t[pos.clamp(max=len(t) - 1)], torch.tensor(-1))
    ctx_pos = torch.arange(L).expand(S, L)
    return Batch(feats, ctx_pos, ctx_ok, tokens, torch.from_numpy(np.stack(anchors)).long(), labels)


def sample_batch(shards: Shards, rng: np.random.Generator, split: str, n_seqs: int, n_anchors: int, block: int,
                 mask_id: int) -> Batch:
    """A random batch: sequences uniformly, anchors uniformly within each (with replacement
    when a sequence has fewer than n_anchors)."""
    pool = shards.seqs[split]
    seqs, anchors = [], []
    while len(seqs) < n_seqs:
        sh, q = pool[int(rng.integers(len(pool)))]
        n, n_prompt = shards.length(sh, q)
        cand = anchors_of(n, n_prompt)
        if len(cand) == 0:
            continue
        seqs.append((sh, q))
        anchors.append(np.sort(rng.choice(cand, n_anchors, replace=len(cand) < n_anchors)))
    return make_batch(shards, seqs, anchors, block, mask_id)
