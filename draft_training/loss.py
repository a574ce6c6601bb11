"""The DFlash 2 training objective and the offline acceptance measure.

Loss (docs/training.md; NeMo AutoModel and vLLM speculators
document the same objective):
- position-weighted block cross-entropy: slot k of a block (k = 1..B-1 after the anchor)
  predicts the target's token at anchor + k. Weights (`position_weights`): "decay" is
  w_k = exp(-(k-1)/decay), because a wrong early slot makes every later one worthless;
  "dpace" (D-PACE, arXiv 2605.18810) is w_j = sum_{m>=j} prod_{i<=m} q_i with
  q_i = (1-alpha) exp(-CE_i) + alpha from the block's own current CE (no gradient): each
  slot weighs what it adds to the expected accepted length, so weight moves outward as the
  draft gets confident. A slot without a label ends the product.
- optionally (`kl_weight` > 0, batches with teacher data) a soft cross-entropy against
  the target's top-KT next-token distribution, on the buckets the draft can tell apart:
  each teacher id inside the draft vocabulary, and one "rest" bucket holding every other
  bit of mass (teacher ids outside the reduced vocabulary, and mass outside the top-KT);
  the draft's rest is 1 - its probability of those in-vocabulary teacher ids. Reported as
  the KL (the soft CE minus the teacher's bucket entropy: same gradient, 0 at a match).
- the selector's K-way cross-entropy with the *true* predecessor: among the slot's top-K
  candidates (the draft's own), the true token's score unary(b) + transition(pred, b)
  must win; rows whose true token is not among the candidates are dropped. Same weights.
A reduced vocabulary (`d2t`) drops slots whose true token is outside it from the block
term (the draft cannot name it) but keeps them as predecessors.

`accepted_lengths` measures what the engine would accept at each anchor for each path
selector, from the same lattice llama.cpp builds, through the engine's native selectors.
What it is not: the model (model.py) or the schedule (train.py).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from engine.speculative.params import SELECTORS
from engine.speculative.select import select

from .model import DFlashDraft

POSITION_WEIGHTS = ("decay", "dpace")


def slot_weights(n_slots: int, decay: float, device=None) -> torch.Tensor:
    """[n_slots] w_k = exp(-(k-1)/decay) for k = 1..n_slots."""
    return torch.exp(-torch.arange(n_slots, dtype=torch.float32, device=device) / decay)


@torch.no_grad()
def dpace_weights(ce: torch.Tensor, real: torch.Tensor, alpha: float) -> torch.Tensor:
    """D-PACE weights [..., T] from per-slot CE [..., T] (inf where the draft cannot name the
    label) and real [..., T] (slot has a label): w_j = sum_{m>=j} prod_{i<=m} q_i,
    q_i = (1-alpha) exp(-CE_i) + alpha, q_i = 0 on a slot without label."""
    q = torch.where(real, (1 - alpha) * torch.exp(-ce.float()) + alpha, torch.zeros_like(ce, dtype=torch.float32))
    run = torch.cumprod(q, dim=-1)  # prod_{i<=m} q_i
    return run.flip(-1).cumsum(-1).flip(-1)  # sum over m >= j


def topk_kl(lg: torch.Tensor, teacher_ids: torch.Tensor, teacher_lp: torch.Tensor, t2d: torch.Tensor) -> torch.Tensor:
    """Per-slot KL [...] between the teacher's and the draft's bucket distributions.

    lg [..., V'] draft logits; teacher_ids [..., KT] target ids (-1: none); teacher_lp
    [..., KT] their full-vocabulary log-probs; t2d [V] draft row of each target id (-1: none).
    Buckets: the teacher ids inside the draft vocabulary, and one rest bucket."""
    logq = F.log_softmax(lg.float(), dim=-1)  # [..., V']
    rows = torch.where(teacher_ids >= 0, t2d[teacher_ids.clamp(min=0)], torch.full_like(teacher_ids, -1))
    inside = rows >= 0  # [..., KT]
    lq = logq.gather(-1, rows.clamp(min=0))  # [..., KT]
    p = torch.where(inside, teacher_lp.float().exp(), torch.zeros_like(lq))
    p_rest = (1 - p.sum(-1)).clamp(min=0)  # mass the draft cannot name one by one
    q_in = torch.where(inside, lq.exp(), torch.zeros_like(lq)).sum(-1)
    lq_rest = torch.log1p(-q_in.clamp(max=1 - 1e-6))
    lp = torch.where(inside, teacher_lp.float(), torch.zeros_like(lq))
    kl = (p * (lp - torch.where(inside, lq, torch.zeros_like(lq)))).sum(-1)
    return kl + p_rest * (torch.log(p_rest.clamp(min=1e-12)) - lq_rest)


def draft_loss(model: DFlashDraft, h: torch.Tensor, anchor: torch.Tensor, labels: torch.Tensor,
               t2d: torch.Tensor, decay: float = 4.0, selector_weight: float = 1.0, *,
               position_weights: str = "decay", dpace_alpha: float = 0.5, kl_weight: float = 0.0,
               teacher_ids: torch.Tensor | None = None, teacher_lp: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, dict]:
    """h [S, N, B, E] block hidden states; anchor [S, N] ids; labels [S, N, B-1] the target's
    tokens at slots 1..B-1 (-1: no label); t2d [V] draft-vocabulary row of each target id
    (-1: not in it); teacher_ids / teacher_lp [S, N, B-1, KT] the target's top-KT (None: no
    teacher data, the KL term is off). Returns (loss, metrics)."""
    if position_weights not in POSITION_WEIGHTS:
        raise ValueError(f"position_weights {position_weights!r}: use one of {', '.join(POSITION_WEIGHTS)}")
    K = model.cfg.selector_top_k
    lg = model.logits(h[..., 1:, :])  # [S, N, B-1, V']
    real = labels >= 0
    lab_d = torch.where(real, t2d[labels.clamp(min=0)], torch.full_like(labels, -1))  # [S, N, B-1]
    ok = lab_d >= 0
    ce = F.cross_entropy(lg.flatten(0, -2), lab_d.clamp(min=0).flatten(), reduction="none").view_as(labels)
    if position_weights == "dpace":  # a label the draft cannot name is a certain rejection: exp(-CE) = 0
        w = dpace_weights(torch.where(ok, ce.detach(), torch.full_like(ce, math.inf)), real, dpace_alpha)
    else:
        w = slot_weights(labels.shape[-1], decay, h.device).expand_as(labels)  # [S, N, B-1]
    wb = w * ok
    block = (ce * wb).sum() / wb.sum().clamp(min=1e-6)
    loss = block
    metrics = {"block_ce": block.item()}
    if kl_weight > 0 and teacher_ids is not None and teacher_lp is not None:
        has = real & (teacher_ids >= 0).any(-1)
        wk = w * has
        kl = (topk_kl(lg, teacher_ids, teacher_lp, t2d) * wk).sum() / wk.sum().clamp(min=1e-6)
        loss = loss + kl_weight * kl
        metrics["kl"] = kl.item()

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
        metrics.update({"selector_ce": float(sel), "top1_acc": float(top1_ok.sum() / real.sum().clamp(min=1)),
                        "in_top_k": float(found.sum() / real.sum().clamp(min=1))})
    return loss + selector_weight * sel, metrics


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
