"""A free span (grammar-forced or copied tokens) merged into a DFlash 2 lattice as one more
candidate per position, so that the select stage's DP chooses, position by position, between
following the span and the draft's 16 (issue 24, part 2).

Layout as in docs/llama-cpp.md, The lattice: row t >= 1 holds K candidate ids, then K x K scores, predecessor-major;
the DP reads p_t(b|a) = softmax(scores_t[a])[b] as the chance that b is accepted after a. The merged
lattice has K + 1 candidates, the last being the span's token at that position (its "span slot").
Its scores are log-probabilities, so the selectors' softmax gives back exactly:
  - after the span slot (or the anchor, at t = 1): the span token with p (the source's measured
    acceptance where the draft's best guess is, or is not, the same token), the draft's candidates
    with (1 - p) times the draft's own distribution;
  - after a draft candidate: the draft's distribution, the span token with 0 (the span continues
    its own tokens, not another candidate's path);
  - a span token that is also one of the draft's candidates takes that candidate's mass too, and
    the candidate itself gets none, so no id is offered twice with weight;
  - past the span's end the span slot is dead (weight 0), and what follows the span's last token is
    the draft's row for it, or for the draft's best candidate when the span left the draft's list.
At T > 0 the sampling walk draws from these same weights and reports the q it drew from, so
acceptance stays lossless whatever the weights are; they only decide what is worth verifying.
"""

from __future__ import annotations

import numpy as np

from .base import Lattice

NEG = -1.0e4  # a finite "never": exp(NEG - max) is 0.0 in double, and the selectors refuse infinities
P_MIN, P_MAX = 1e-4, 1.0 - 1e-4  # keep log(p) and log(1 - p) finite


def _log_softmax(s: np.ndarray) -> np.ndarray:
    s = s.astype(np.float64)
    m = s.max(axis=-1, keepdims=True)
    return s - m - np.log(np.exp(s - m).sum(axis=-1, keepdims=True))


def merge_span(lat: Lattice, span: list[int], rate) -> tuple[Lattice, list[bool]]:
    """`lat` (K candidates) with span[i] as candidate K at position i + 1, weighted
    rate(i, agrees) = P(accepted | the span accepted so far), where `agrees` says whether the
    draft's own best guess there is the same token. Returns the new Lattice of K + 1 candidates
    and, per span position, `agrees`."""
    K, B = lat.top_k, lat.rows.shape[0]
    K1 = K + 1
    L = min(len(span), B - 1)
    out = np.zeros((B, K1 + K1 * K1), np.float32)
    agrees: list[bool] = []
    follow = 0  # the draft row that continues after the span slot: its duplicate's, else the best candidate's
    for t in range(1, B):
        i = t - 1
        ids = lat.rows[t, :K]
        logp = _log_softmax(lat.rows[t, K:K + K * K].reshape(K, K))  # [K pred, K cand]
        s = np.full((K1, K1), NEG)
        s[:K, :K] = logp
        if i < L:
            dup = np.flatnonzero(ids == span[i])
            agrees.append(bool(dup.size) and int(dup[0]) == int(np.argmax(logp[follow])))
            pi = min(max(rate(i, agrees[-1]), P_MIN), P_MAX)
            span_row = np.full(K1, NEG)
            span_row[:K] = np.log1p(-pi) + logp[follow]
            if dup.size:
                j = int(dup[0])
                s[:K, K] = logp[:, j]  # the span token after a draft candidate: the draft's own mass
                s[:K, j] = NEG
                span_row[K] = np.log(pi + (1 - pi) * np.exp(logp[follow, j]))
                span_row[j] = NEG
            else:
                span_row[K] = np.log(pi)
            s[K] = span_row
            if t == 1:
                s[:] = span_row  # every row of slot 1 stands for the anchor, which the span follows
            out[t, K] = span[i]
            next_follow = int(dup[0]) if dup.size else 0
        else:
            s[K, :K] = logp[follow]  # past the span: the draft goes on from the row that follows it
            out[t, K] = ids[0]  # a dead slot (weight 0 everywhere); any valid id
            next_follow = 0
        out[t, :K] = ids
        out[t, K1:] = s.reshape(-1)
        follow = next_follow
    return Lattice(out, K1, unary=_unary(lat, span[:L])), agrees


def _unary(lat: Lattice, span: list[int]) -> np.ndarray | None:
    """For top1 (which reads no transitions): the span token first where there is one."""
    if lat.unary is None:
        return None
    K = lat.top_k
    u = np.full((lat.unary.shape[0], K + 1), NEG, np.float32)
    u[:, :K] = lat.unary
    for i, tok in enumerate(span):
        u[i, K] = lat.unary[i].max() + 1.0
        u[i, :K][lat.rows[i + 1, :K] == tok] = NEG
    return u
