"""A free span merged into a DFlash 2 lattice (engine/speculative/drafters/span_lattice.py): the
weights the selectors read are exactly the ones the module promises, duplicates are offered
once, the DP follows the span when its source is reliable and the draft when it is not, and
the sampling walk's q stays a distribution over what it can draw."""

from __future__ import annotations

import numpy as np
import pytest

from engine.speculative.drafters.base import Lattice
from engine.speculative.drafters.span_lattice import merge_span
from engine.speculative.select import path_from, select

K, B = 4, 6


def softmax(row):
    e = np.exp(row.astype(np.float64) - row.max())
    return e / e.sum()


def lattice(seed: int = 0, unary: bool = False) -> Lattice:
    """K candidates per slot (ids 100 * t + k), random transition scores; slot 1's rows equal."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((B, K + K * K), np.float32)
    for t in range(1, B):
        rows[t, :K] = [100 * t + k for k in range(K)]
        scores = rng.normal(0, 2, (K, K)).astype(np.float32)
        if t == 1:
            scores[:] = scores[0]
        rows[t, K:] = scores.reshape(-1)
    u = rng.normal(0, 1, (B - 1, K)).astype(np.float32) if unary else None
    return Lattice(rows, K, unary=u)


def weights(lat: Lattice, t: int, pred: int) -> np.ndarray:
    k = lat.top_k
    return softmax(lat.rows[t, k:k + k * k].reshape(k, k)[pred])


def test_weights_are_the_promised_mixture():
    lat = lattice()
    span = [101, 999, 301]  # position 1: the draft's candidate 1; position 2: not a candidate; 3: candidate 1
    merged, agrees = merge_span(lat, span, lambda i, agree: 0.8)
    assert merged.top_k == K + 1 and len(agrees) == 3
    assert merged.rows[1:4, K].tolist() == span
    q1 = weights(lat, 1, 0)
    w = weights(merged, 1, 2)  # slot 1: every predecessor row is the anchor's
    assert w[K] == pytest.approx(0.8 + 0.2 * q1[1]) and w[1] == pytest.approx(0, abs=1e-12)
    assert w[[0, 2, 3]] == pytest.approx(0.2 * q1[[0, 2, 3]])
    # slot 2, after the span's token (the draft's candidate 1): span 0.8, the draft's row 1 for the rest
    w = weights(merged, 2, K)
    assert w[K] == pytest.approx(0.8) and w[:K] == pytest.approx(0.2 * weights(lat, 2, 1))
    # slot 2 after a draft candidate: the draft's own row, and 999 (not its candidate) never
    w = weights(merged, 2, 3)
    assert w[K] == pytest.approx(0, abs=1e-12) and w[:K] == pytest.approx(weights(lat, 2, 3))
    # slot 3 after a draft candidate: the span token carries that candidate's mass, the duplicate none
    w = weights(merged, 3, 0)
    q = weights(lat, 3, 0)
    assert w[K] == pytest.approx(q[1]) and w[1] == pytest.approx(0, abs=1e-12)
    # slot 4, past the span: the span slot is dead; after the span's last token, the draft's row 1
    assert weights(merged, 4, K)[:K] == pytest.approx(weights(lat, 4, 1))
    assert all(weights(merged, 4, a)[K] == pytest.approx(0, abs=1e-12) for a in range(K + 1))
    assert [merged.rows[t, :K].tolist() for t in range(1, B)] == [lat.rows[t, :K].tolist() for t in range(1, B)]


def test_agreement_is_the_drafts_best_guess():
    lat = lattice(1)
    best = int(np.argmax(weights(lat, 1, 0)))
    other = (best + 1) % K
    _, agrees = merge_span(lat, [100 + best], lambda i, a: 0.5)
    assert agrees == [True]
    seen = []
    _, agrees = merge_span(lat, [100 + other, 12345], lambda i, a: seen.append((i, a)) or 0.5)
    assert agrees == [False, False] and seen == [(0, False), (1, False)]


def test_dp_follows_a_reliable_span_and_the_draft_otherwise():
    lat = lattice(2)
    span = [777, 778, 779]
    T = B - 1
    sure, _ = merge_span(lat, span, lambda i, a: 0.99)
    assert path_from(sure, T, "dp").sources is None  # no origin: the drafter's own tokens
    sure.origin = ["grammar", "grammar", "lookup"]
    path = path_from(sure, T, "dp")
    assert path.tokens[:3] == span and path.sources == ["grammar", "grammar", "lookup", None, None]
    doubtful, _ = merge_span(lat, span, lambda i, a: 1e-6)
    alone = select(lat.rows, T, K, "dp")
    assert path_from(doubtful, T, "dp").tokens == alone.ids.tolist()
    assert path_from(doubtful, T, "walk").tokens == select(lat.rows, T, K, "walk").ids.tolist()


def test_top1_takes_the_span_first():
    lat = lattice(3, unary=True)
    merged, _ = merge_span(lat, [555, 556], lambda i, a: 0.7)
    assert merged.unary.shape == (B - 1, K + 1)
    tokens = path_from(merged, B - 1, "top1").tokens
    assert tokens[:2] == [555, 556]
    assert tokens[2:] == [100 * t + int(np.argmax(lat.unary[t - 1])) for t in range(3, B)]


def test_sampling_draws_from_the_merged_weights():
    lat = lattice(4)
    merged, _ = merge_span(lat, [101, 202], lambda i, a: 0.6)  # both duplicates of draft candidates
    rng = np.random.default_rng(0)
    firsts = []
    for _ in range(400):
        p = path_from(merged, 3, "walk", temperature=1.0, uniforms=rng.random(3, dtype=np.float32))
        assert p.cand_q.sum(axis=1) == pytest.approx(np.ones(3), abs=1e-5)
        assert p.cand_q[0, 1] == 0.0 and p.cand_q[1, 2] == 0.0  # the duplicates are never drawn
        firsts.append(p.tokens[0])
    share = firsts.count(101) / len(firsts)
    assert share == pytest.approx(0.6 + 0.4 * weights(lat, 1, 0)[1], abs=0.08)
