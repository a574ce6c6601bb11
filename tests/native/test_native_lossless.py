"""Rejection sampling is lossless: the tokens a speculative step emits are distributed as
the target's own sampler would draw them, whatever the draft proposes.

A toy target over V = 6 tokens (a Markov chain P) is decoded speculatively with blocks
of T = 2 (the native select-sample walk or a deterministic path, then the native
accept_sample), restarting from each step's last token until two tokens are out. Over
20000 seeded runs the first token must follow P[anchor] and the first two the joint
P[anchor, x1] * P[x1, x2] (chi-square, fixed seeds, so the test cannot flake). A lossy
variant (replacement drawn from p instead of the residual) must fail the same test,
which shows the test can see a bias.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.speculative import accept
import numpy_reference as ref
from engine.speculative.select import select

V, T, ANCHOR, N = 6, 2, 0, 20000
P = np.array([  # [V, V] the target: P[a, b] = probability of b after a (every cell >= 0.04)
    [0.30, 0.25, 0.20, 0.05, 0.05, 0.15],
    [0.10, 0.40, 0.10, 0.20, 0.10, 0.10],
    [0.25, 0.05, 0.30, 0.04, 0.06, 0.30],
    [0.15, 0.15, 0.15, 0.15, 0.15, 0.25],
    [0.05, 0.05, 0.50, 0.10, 0.20, 0.10],
    [0.20, 0.30, 0.10, 0.05, 0.05, 0.30],
])


def chi2_critical(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at one-sided normal z
    (4.75: p ~ 1e-6; generous, and the seeds are fixed anyway)."""
    c = 2.0 / (9.0 * df)
    return df * (1.0 - c + z * math.sqrt(c)) ** 3


def chi2(observed: np.ndarray, expected: np.ndarray) -> float:
    return float(((observed - expected) ** 2 / expected).sum())


def lattice_for(cands: list[list[int]], scores: list[np.ndarray]) -> np.ndarray:
    """[T+1, stride] lattice from per-position candidate ids [K] and scores [K, K]."""
    K = len(cands[0])
    L = np.zeros((T + 1, K + K * K + 3), np.float32)
    for t in range(T):
        L[t + 1, :K] = cands[t]
        L[t + 1, K:K + K * K] = np.asarray(scores[t]).reshape(-1)
    return L


def far_proposal():
    """A draft that disagrees with the target: K = 3 of the 6 tokens, mass on unlikely ones."""
    L = lattice_for([[3, 4, 5], [4, 3, 1]],
                    [np.tile([2.5, 1.0, -1.0], (3, 1)), np.array([[2.0, 0.0, 0.0], [0.0, 3.0, -2.0], [1.0, 1.0, 1.0]])])

    def propose(anchor, u):
        s = select(L, T, 3, "walk", temperature=1.0, uniforms=u)
        return s.ids, s.cand_ids, s.q
    return propose


def near_proposal():
    """A draft close to the target: all 6 tokens (scrambled), scores log P plus noise."""
    rng = np.random.default_rng(5)
    order1, order2 = rng.permutation(V), rng.permutation(V)
    lattices = []
    for anchor in range(V):
        s1 = np.tile(np.log(P[anchor, order1]), (V, 1))  # [K, K] slot 1: the anchor is the predecessor
        s2 = np.log(P[order1][:, order2])  # [K(a), K(b)] slot 2 after candidate a of slot 1
        noise = rng.normal(scale=0.3, size=(2, V, V))
        lattices.append(lattice_for([order1, order2], [s1 + noise[0][:1], s2 + noise[1]]))

    def propose(anchor, u):
        s = select(lattices[anchor], T, V, "walk", temperature=1.0, uniforms=u)
        return s.ids, s.cand_ids, s.q
    return propose


def point_mass_proposal():
    """A deterministic draft (greedy-style path, not drawn from anything): q is a point mass."""
    guess = np.array([1, 3, 5, 0, 2, 4])  # [V] the draft's next token after each token

    def propose(anchor, u):
        x1 = guess[anchor]
        return np.array([x1, guess[x1]], np.int32), None, None
    return propose


def lossy_accept(p, path, cand_ids, cand_q, uniforms):
    """Wrong on purpose: a rejected token is replaced by a draw from p, not from max(0, p - q)."""
    n, _ = ref.accept_sample(p, path, cand_ids, cand_q, uniforms)
    return n, ref._draw(p[n].astype(np.float64), uniforms[2 * n + 1])


def first_two_tokens(propose, accept_fn, n_runs: int, seed: int) -> np.ndarray:
    """counts [V, V] of (first, second) emitted token over n_runs speculative decodes."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((V, V), np.int64)
    for _ in range(n_runs):
        out, anchor = [], ANCHOR
        while len(out) < 2:
            u = rng.random(T + 2 * (T + 1), dtype=np.float32)  # [T] to draw the path, [2(T+1)] to accept
            path, cand_ids, cand_q = propose(anchor, u[:T])
            p = P[[anchor, path[0], path[1]]].astype(np.float32)  # [T+1, V] the target at each verify position
            if cand_ids is None:
                cand_ids, cand_q = np.asarray(path).reshape(T, 1), np.ones((T, 1), np.float32)
            n, token = accept_fn(p, path, cand_ids, cand_q, u[T:])
            out += [int(x) for x in path[:n]] + [token]
            anchor = out[-1]
        counts[out[0], out[1]] += 1
    return counts


def statistics(counts: np.ndarray) -> tuple[float, float]:
    n = counts.sum()
    first = chi2(counts.sum(axis=1), n * P[ANCHOR])
    pair = chi2(counts.reshape(-1), n * (P[ANCHOR][:, None] * P).reshape(-1))
    return first, pair


@pytest.mark.parametrize("proposal,seed", [(far_proposal, 1), (near_proposal, 2), (point_mass_proposal, 3)])
def test_rejection_sampling_is_lossless(proposal, seed):
    counts = first_two_tokens(proposal(), accept.accept_sample, N, seed)
    first, pair = statistics(counts)
    assert first < chi2_critical(V - 1), (first, counts.sum(axis=1))
    assert pair < chi2_critical(V * V - 1), pair


def test_the_statistics_can_see_a_lossy_sampler():
    counts = first_two_tokens(far_proposal(), lossy_accept, 4000, 4)
    first, pair = statistics(counts)
    assert first > chi2_critical(V - 1) and pair > chi2_critical(V * V - 1), (first, pair)
