"""The DFlash 2 training objective and the offline acceptance measure.

Loss (DESIGN.md §9; NeMo AutoModel and vLLM speculators document the same objective):
- decay-weighted block cross-entropy: slot k of a block (k = 1..B-1 after the anchor)
  predicts the target's token at anchor + k with weight w_k = exp(-(k-1)/decay), because a
  wrong early slot makes every later one worthless;
- the selector's K-way cross-entropy with the *true* predecessor: among the slot's top-K
  candidates (the draft's own), the true token's score unary(b) + transition(pred, b)
  must win; rows whose true token is not among the candidates are dropped.
A reduced vocabulary (`d2t`) drops slots whose true token is outside it from the block
term (the draft cannot name it) but keeps them as predecessors.

`accepted_lengths` measures what the engine would accept at each anchor for each path
selector, from the same lattice llama.cpp builds, through the engine's native selectors.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from engine.speculative.params import SELECTORS
from engine.speculative.select import select

from .model import DFlashDraft


def slot_weights(n_slots: int, decay: float, device=None) -> torch.Tensor:
    """[n_slots] w_k = exp(-(k-1)/decay) for k = 1..n_slots."""
    return torch.exp(-torch.arange(n_slots, dtype=torch.float32, device=device) / decay)


def draft_loss(model: DFlashDraft, h: torch.Tensor, anchor: torch.Tensor, labels: torch.Tensor,
               t2d: torch.Tensor, decay: float = 4.0, selector_weight: float = 1.0) -> tuple[torch.Tensor, dict]:
    """h [S, N, B, E] block hidden states; anchor [S, N] ids; labels [S, N, B-1] the target's
    tokens at slots 1..B-1 (-1 past the end); t2d [V] draft-vocabulary row of each target id
    (-1: not in it). Returns (loss, metrics)."""
    K = model.cfg.selector_top_k
    lg = model.logits(h[..., 1:, :])  # [S, N, B-1, V']
    w = slot_weights(labels.shape[-1], decay, h.device).expand_as(labels)  # [S, N, B-1]
    real = labels >= 0
    lab_d = torch.where(real, t2d[labels.clamp(min=0)], torch.full_like(labels, -1))  # [S, N, B-1]
    ok = lab_d >= 0
    ce = F.cross_entropy(lg.flatten(0, -2), lab_d.clamp(min=0).flatten(), reduction="none").view_as(labels)
    wb = w * ok
    block = (ce * wb).sum() / wb.sum().clamp(min=1e-6)

    unary, top = lg.topk(K, dim=-1)  # [S, N, B-1, K]
    cand = model.d2t[top]  # [S, N, B-1, K] target ids
    pred = torch.cat([anchor[..., None], labels[..., :-1]], dim=-1).clamp(min=0)  # [S, N, B-1] true predecessor
    score = unary + model.transition(h[..., 1:, :], pred[..., None], cand)[..., 0, :]  # [S, N, B-1, K]
    hit = cand == labels[..., None]  # [S, N, B-1, K]
    found = hit.any(-1) & real
    target = hit.float().argmax(-1)  # [S, N, B-1]
    sce = F.cross_entropy(score.flatten(0, -2), target.flatten(), reduction="none").view_as(labels)
    ws = w * found
    sel = (sce * ws).sum() / ws.sum().clamp(min=1e-6)
    with torch.no_grad():
        top1_ok = (cand[..., 0] == labels) & real
        metrics = {"block_ce": float(block), "selector_ce": float(sel),
                   "top1_acc": float(top1_ok.sum() / real.sum().clamp(min=1)),
                   "in_top_k": float(found.sum() / real.sum().clamp(min=1))}
    return block + selector_weight * sel, metrics




def pack_lattice(cand: np.ndarray, scores: np.ndarray, stride: int) -> np.ndarray:
    """cand [T, K], scores [T, K, K] -> lattice rows [T+1, stride] float32 as llama.cpp packs them."""
    T, K = cand.shape
    lat = np.zeros((T + 1, stride), np.float32)
    lat[1:, :K] = cand
    lat[1:, K:K + K * K] = scores.reshape(T, K * K)
    return lat


def accepted_lengths(cand: np.ndarray, scores: np.ndarray, unary: np.ndarray, labels: np.ndarray,
                     stride: int, selectors=SELECTORS) -> dict[str, np.ndarray]:
    """Tokens accepted at each anchor under greedy verification, per path selector.

    cand [A, T, K], scores [A, T, K, K], unary [A, T, K] (the candidates' draft logits),
    labels [A, T] the target's tokens (-1 past the end) -> {selector: [A] int}."""
    A, T, K = cand.shape
    out = {s: np.zeros(A, np.int64) for s in selectors}
    for a in range(A):
        lat = pack_lattice(cand[a], scores[a], stride)
        for s in selectors:
            path = select(lat, T, K, s, unary=unary[a] if s == "top1" else None).ids
            n = 0
            while n < T and labels[a, n] >= 0 and path[n] == labels[a, n]:
                n += 1
            out[s][a] = n
    return out


def trajectory_tau(accepted: np.ndarray, first: int, last: int) -> float:
    """Mean tokens per target verify along the engine's trajectory: start at anchor `first`,
    accept accepted[a] tokens plus the target's bonus token, jump; accepted [n] indexed by
    anchor position, anchors first..last inclusive."""
    a, steps, tokens = first, 0, 0
    while a <= last:
        n = int(accepted[a]) + 1
        steps += 1
        tokens += n
        a += n
    return tokens / steps if steps else math.nan
