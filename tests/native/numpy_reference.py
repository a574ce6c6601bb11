"""Pure NumPy reference of every entry point of the native library (native/).

What it is: the specification the C code is tested against (tests/native/). Each function has
the signature and return values of its wrapper in engine/native.py, so a test can call
both with the same arguments. Written to be obviously correct, not fast; the
arithmetic follows the C's order (float64, sums in index order via cumsum) so that
results agree to the last bit wherever exp() does.
What it is not: used at run time, or a validator (the C checks its inputs; the tests
check the C's refusals directly).

Words and lattice layout: docs/architecture.md, docs/llama-cpp.md and native/include/flashdesk.h.
"""

from __future__ import annotations

import numpy as np


def lattice_arrays(lattice: np.ndarray, T: int, K: int) -> tuple[np.ndarray, np.ndarray]:
    """lattice [B, stride] (row 0 = anchor slot) -> candidate ids [T, K] int64 and scores
    [T, K, K] float64 with scores[t, a, b] = score of candidate b at position t after a."""
    rows = lattice[1:T + 1].astype(np.float64)  # [T, stride]
    ids = rows[:, :K].astype(np.int64)  # [T, K]
    scores = rows[:, K:K + K * K].reshape(T, K, K)  # [T, K(a), K(b)]
    return ids, scores


def softmax(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Softmax over the last axis of x [..., K]: exp((x - max) / temperature) / sum."""
    e = np.exp((x - x.max(axis=-1, keepdims=True)) / temperature)  # [..., K]
    return e / np.cumsum(e, axis=-1)[..., -1:]


def logsumexp(x: np.ndarray) -> np.ndarray:
    """log(sum(exp(x))) over the last axis of x [..., K] -> [...]."""
    m = x.max(axis=-1)  # [...]
    return m + np.log(np.cumsum(np.exp(x - m[..., None]), axis=-1)[..., -1])


def path_q(scores: np.ndarray, idx: np.ndarray, temperature: float) -> np.ndarray:
    """Proposal along a path: q[t] = softmax(scores[t, idx[t-1]] / temperature), idx[-1] = 0."""
    pred = np.concatenate([[0], idx[:-1]])  # [T] the predecessor row each position reads
    return softmax(scores[np.arange(len(idx)), pred], temperature).astype(np.float32)  # [T, K]


def _finish(lattice, T, K, idx, temperature, want_q):
    ids, scores = lattice_arrays(lattice, T, K)
    idx = np.asarray(idx, dtype=np.int32)  # [T]
    path = ids[np.arange(T), idx].astype(np.int32)  # [T]
    return idx, path, (path_q(scores, idx, temperature) if want_q else None)


def select_walk(lattice, T, K, temperature=1.0, want_q=False):
    """Upstream's greedy walk: from the anchor (row 0), argmax of the predecessor's row."""
    _, scores = lattice_arrays(lattice, T, K)
    idx, pred = [], 0
    for t in range(T):
        pred = int(np.argmax(scores[t, pred]))
        idx.append(pred)
    return _finish(lattice, T, K, idx, temperature, want_q)


def select_viterbi(lattice, T, K, temperature=1.0, want_q=False):
    """argmax over paths of sum_t log p_t(x_t | x_{t-1}), p_t(.|a) = softmax(scores[t, a])."""
    _, scores = lattice_arrays(lattice, T, K)
    logp = scores - logsumexp(scores)[..., None]  # [T, K(a), K(b)]
    delta = logp[0, 0]  # [K] best log-prob of a path ending in b; position 0 follows the anchor
    back = np.zeros((T, K), dtype=np.int64)  # [T, K] best predecessor of b at t
    for t in range(1, T):
        cand = delta[:, None] + logp[t]  # [K(a), K(b)]
        back[t] = np.argmax(cand, axis=0)
        delta = cand[back[t], np.arange(K)]
    idx = [int(np.argmax(delta))]
    for t in range(T - 1, 0, -1):
        idx.append(int(back[t, idx[-1]]))
    return _finish(lattice, T, K, idx[::-1], temperature, want_q)


def select_dp(lattice, T, K, temperature=1.0, want_q=False):
    """Most expected accepted tokens: V_T = 0, V_t(a) = max_b p_t(b|a) (1 + V_{t+1}(b)).
    Returns idx, ids, q like the others, plus V_0 (from the anchor)."""
    _, scores = lattice_arrays(lattice, T, K)
    p = softmax(scores)  # [T, K(a), K(b)]
    value = np.zeros(K)  # [K] V_{t+1}
    choice = np.zeros((T, K), dtype=np.int64)  # [T, K(a)] best b after a
    for t in range(T - 1, -1, -1):
        gain = p[t] * (1.0 + value)[None, :]  # [K(a), K(b)]
        choice[t] = np.argmax(gain, axis=1)
        value = gain[np.arange(K), choice[t]]
    idx, a = [], 0
    for t in range(T):
        a = int(choice[t, a])
        idx.append(a)
    return (*_finish(lattice, T, K, idx, temperature, want_q), float(np.float32(value[0])))


def select_top1(lattice, T, K, unary, temperature=1.0, want_q=False):
    """DFlash v1: argmax of each position's unary logits [T, K], ignoring transitions."""
    idx = np.argmax(np.asarray(unary, dtype=np.float32).reshape(T, K), axis=1)  # [T]
    return _finish(lattice, T, K, idx, temperature, want_q)


def _draw(w: np.ndarray, u: float) -> int:
    """Inverse CDF in index order: the first i whose running sum of w passes u * sum(w)."""
    cum = np.cumsum(w)  # [n]
    hits = np.flatnonzero(cum > np.float64(u) * cum[-1])
    return int(hits[0]) if hits.size else int(np.flatnonzero(w > 0)[-1])


def select_sample(lattice, T, K, temperature, uniforms):
    """Walk from the anchor drawing b ~ softmax(scores[t, pred] / temperature) with uniforms [T]."""
    _, scores = lattice_arrays(lattice, T, K)
    idx, pred = [], 0
    for t in range(T):
        pred = _draw(np.exp((scores[t, pred] - scores[t, pred].max()) / temperature), uniforms[t])
        idx.append(pred)
    return _finish(lattice, T, K, idx, temperature, True)


def accept_greedy(path, target_argmax) -> tuple[int, int]:
    """Longest prefix of path [T] equal to target_argmax [T+1]; bonus = the target's next token."""
    n = 0
    while n < len(path) and path[n] == target_argmax[n]:
        n += 1
    return n, int(target_argmax[n])


def argmax_rows(logits: np.ndarray) -> np.ndarray:
    """[n_rows, n_vocab] -> [n_rows] int32, first maximum."""
    return np.argmax(logits, axis=-1).astype(np.int32)


def accept_sample(p, path, cand_ids, cand_q, uniforms) -> tuple[int, int]:
    """Rejection sampling: accept path[t] if u[2t] < p_t(x)/q_t(x); else draw from
    normalize(max(0, p_t - q_t)) with u[2t+1] (p_t itself if that is all zero) and stop;
    all accepted: draw the bonus from p_T with u[2T+1]. p [T+1, V], cand_* [T, K]."""
    T, V = p.shape[0] - 1, p.shape[1]
    for t in range(T):
        q = np.zeros(V)  # [V] q_t over the vocabulary; duplicate candidate ids add up
        np.add.at(q, np.asarray(cand_ids[t], dtype=np.int64), np.asarray(cand_q[t], dtype=np.float32))
        x = int(path[t])
        if np.float64(uniforms[2 * t]) < np.float64(p[t, x]) / q[x]:
            continue
        residual = np.maximum(p[t].astype(np.float64) - q, 0.0)  # [V]
        if not residual.any():
            residual = p[t].astype(np.float64)
        return t, _draw(residual, uniforms[2 * t + 1])
    return T, _draw(p[T].astype(np.float64), uniforms[2 * T + 1])
