"""Training batches from captured shards: several sequences, many blocks each.

A batch takes S sequences and N anchors in each. An anchor is a position a of the
target's answer (the first generated token or later, as in the engine: the prompt's last
token is never an anchor, the prefill already gave the first answer token). Its block is
`[token a, mask, ..., mask]` at positions a..a+B-1 and it sees the injected features of
positions < a. The features of a sequence are loaded once, up to its last anchor, and
shared by its blocks.

Labels are the target's *greedy* continuation, which is what the engine accepts: slot k
(1..B-1) is labelled argmax[a+k-1] (the target's argmax after position a+k-1) when the
trajectory's tokens a+1..a+k-1 equal the argmax chain argmax[a..a+k-2], else -1, and -1
past the end. For a greedy answer argmax[i] = token[i+1], so every slot is labelled with
the next token, as before; a sampled answer keeps slot 1 always and later slots up to its
first sampled deviation (docs/training.md). Teacher top-k (soft labels)
are the rows of the same argmax positions, -1 / 0 wherever the label is -1.

What it is not: the model or the loss. Shapes: S sequences, L context rows (padded),
N anchors, B block width.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .shards import Shards


@dataclass
class Batch:
    feats: torch.Tensor  # [S, L, n_enc] float32, rows past a sequence's context are zero
    ctx_pos: torch.Tensor  # [S, L] positions 0..L-1
    ctx_ok: torch.Tensor  # [S, L] bool: a real row
    tokens: torch.Tensor  # [S, N, B] blocks [anchor, mask, ...]
    anchor_pos: torch.Tensor  # [S, N]
    labels: torch.Tensor  # [S, N, B-1] the target's greedy ids, -1 = none (past the end, off the argmax chain)
    teacher_ids: torch.Tensor | None = None  # [S, N, B-1, KT] long: the target's top-KT ids, -1 = none
    teacher_lp: torch.Tensor | None = None  # [S, N, B-1, KT] float32 their full-vocabulary log-probs (0 = none)

    @property
    def anchor(self) -> torch.Tensor:
        return self.tokens[..., 0]


def anchors_of(n_tokens: int, n_prompt: int) -> np.ndarray:
    """Anchor positions of a sequence: the answer's tokens that have a successor."""
    return np.arange(n_prompt, n_tokens - 1)


def block_labels(tokens: np.ndarray, argmax: np.ndarray, anchors: np.ndarray, block: int) -> np.ndarray:
    """[N, B-1] labels (module docstring) and, implied, the argmax rows they come from: row
    anchors + k - 1 for slot k wherever the label is not -1."""
    n = len(tokens)
    g = np.append(np.asarray(argmax, np.int64), -1)  # [n + 1]: a sentinel row past the end
    on_chain = np.append(np.asarray(tokens[1:], np.int64) == g[:n - 1], False)  # [n] token i+1 == argmax i
    rows = anchors[:, None] + np.arange(block - 1)  # [N, B-1] argmax row of slot k = a + k - 1
    inside = rows < n
    rows_c = np.minimum(rows, n)
    # slot k needs the trajectory on the chain at rows a .. a+k-2: a running AND along the block
    ok = np.ones_like(rows, bool)
    ok[:, 1:] = np.logical_and.accumulate(on_chain[np.minimum(rows[:, :-1], n - 1)], axis=1)
    return np.where(inside & ok, g[rows_c], -1)


def make_batch(shards: Shards, seqs: list[tuple[int, int]], anchors: list[np.ndarray], block: int,
               mask_id: int) -> Batch:
    """seqs: (shard, seq) pairs; anchors: positions per sequence (equal counts)."""
    S, N = len(seqs), len(anchors[0])
    L = max(int(a.max()) for a in anchors)
    feats = torch.zeros(S, L, shards.n_enc)
    ctx_ok = torch.zeros(S, L, dtype=torch.bool)
    tokens = torch.full((S, N, block), mask_id, dtype=torch.long)
    labels = np.full((S, N, block - 1), -1, np.int64)
    tops = [shards.topk(sh, q) for sh, q in seqs]
    kt = next((t[0].shape[1] for t in tops if t is not None), 0)
    t_ids = np.full((S, N, block - 1, kt), -1, np.int64) if kt else None
    t_lp = np.zeros((S, N, block - 1, kt), np.float32) if kt else None
    for i, ((sh, q), anc, top) in enumerate(zip(seqs, anchors, tops)):
        toks, f, _ = shards.get(sh, q)
        n_ctx = int(anc.max())
        feats[i, :n_ctx] = torch.from_numpy(np.asarray(f[:n_ctx], np.float32))
        ctx_ok[i, :n_ctx] = True
        tokens[i, :, 0] = torch.from_numpy(np.asarray(toks, np.int64)[anc])
        labels[i] = block_labels(toks, shards.argmax(sh, q), anc, block)
        if top is not None:
            has = labels[i] >= 0  # [N, B-1]
            rows = np.minimum(anc[:, None] + np.arange(block - 1), len(toks) - 1)  # [N, B-1]
            t_ids[i] = np.where(has[..., None], np.asarray(top[0])[rows], -1)
            t_lp[i] = np.where(has[..., None], np.asarray(top[1], np.float32)[rows], 0.0)
    ctx_pos = torch.arange(L).expand(S, L)
    teacher = (torch.from_numpy(t_ids), torch.from_numpy(t_lp)) if kt else (None, None)
    return Batch(feats, ctx_pos, ctx_ok, tokens, torch.from_numpy(np.stack(anchors)).long(),
                 torch.from_numpy(labels), *teacher)


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
