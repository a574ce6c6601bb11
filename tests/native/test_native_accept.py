"""Native acceptance (native/src/fd_accept.c): greedy acceptance, the row argmax, and
rejection sampling, against the NumPy reference (tests/native/numpy_reference.py) and on bad
input; losslessness of rejection sampling is tested statistically in
test_native_lossless.py."""

from __future__ import annotations

import numpy as np
import pytest

from engine import native
from engine.native import NativeCallError
from engine.speculative import accept
import numpy_reference as ref

FD_OK, FD_ERR_ARG, FD_ERR_VALUE = 0, -1, -2


# --- greedy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path,target,want", [
    ([5, 6, 7], [5, 6, 7, 8], (3, 8)),  # all accepted: the bonus follows the path
    ([5, 6, 7], [1, 6, 7, 8], (0, 1)),  # none: the target's own token replaces the first
    ([5, 6, 7], [5, 6, 9, 8], (2, 9)),  # agreement after a mismatch does not count
    ([5, 6, 7], [5, 2, 7, 8], (1, 2)),
    ([], [4], (0, 4)),  # no path: only the bonus
])
def test_accept_greedy(path, target, want):
    assert accept.accept_greedy(path, target) == want
    assert ref.accept_greedy(path, target) == want


def test_accept_greedy_matches_reference():
    rng = np.random.default_rng(0)
    for _ in range(300):
        T = int(rng.integers(0, 16))
        target = rng.integers(0, 3, size=T + 1)  # [T+1] small vocabulary: long agreements happen
        path = np.where(rng.random(T) < 0.8, target[:T], rng.integers(0, 3, size=T))  # [T]
        assert native.accept_greedy(path, target) == ref.accept_greedy(path, target)


def test_accept_greedy_bad_input():
    path, target, out = np.zeros(3, np.int32), np.zeros(4, np.int32), np.zeros(2, np.int32)
    lib, p, t, n, b = native.lib, path.ctypes.data, target.ctypes.data, out.ctypes.data, out.ctypes.data + 4
    assert lib.fd_accept_greedy(p, 3, t, n, b) == FD_OK and out.tolist() == [3, 0]
    assert lib.fd_accept_greedy(None, 0, t, n, b) == FD_OK  # T = 0 needs no path
    for args in ((None, 3, t, n, b), (p, 3, None, n, b), (p, 3, t, None, b), (p, 3, t, n, None), (p, -1, t, n, b)):
        assert lib.fd_accept_greedy(*args) == FD_ERR_ARG
    with pytest.raises(NativeCallError):
        native.accept_greedy([1, 2], [1, 2])  # target_argmax must have T+1 entries


# --- argmax ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_argmax_rows_equals_numpy(seed):
    rng = np.random.default_rng(seed)
    n_vocab = int(rng.integers(1, 3000))
    logits = rng.normal(size=(9, n_vocab)).astype(np.float32)  # [9, V]
    logits[1] = rng.integers(0, 3, size=n_vocab)  # ties: the first maximum wins
    logits[2] = -np.inf  # a fully masked row (grammar): numpy says 0
    logits[3, rng.integers(0, n_vocab, size=3)] = np.inf  # several +inf: the first
    logits[4] = 7.0
    logits[5, -1] = 1e30  # the maximum in the last column
    logits[6, 0] = 1e30  # ... and in the first
    np.testing.assert_array_equal(native.argmax_rows(logits), np.argmax(logits, axis=1))
    np.testing.assert_array_equal(native.argmax_rows(logits), ref.argmax_rows(logits))


def test_argmax_rows_every_length_and_lane():
    """The C runs 16 floats at a time in SIMD lanes and finishes the tail in order: ties
    across lanes and blocks, every short length, NaN at every position."""
    rng = np.random.default_rng(8)
    for n_vocab in list(range(1, 70)) + [255, 256, 257, 49152]:
        logits = rng.integers(0, 4, size=(8, n_vocab)).astype(np.float32)  # [8, V] many ties
        logits[0] = -np.inf
        logits[1, rng.integers(0, n_vocab, size=2)] = np.inf
        np.testing.assert_array_equal(native.argmax_rows(logits), np.argmax(logits, axis=1))
    row = np.zeros((1, 37), np.float32)
    for col in range(37):
        row[0, col] = np.nan
        with pytest.raises(NativeCallError, match="FD_ERR_VALUE"):
            native.argmax_rows(row)
        row[0, col] = 0.0


def test_argmax_rows_strided_and_empty():
    rng = np.random.default_rng(9)
    buf = rng.normal(size=(6, 1000)).astype(np.float32)  # [6, 1000] a llama.cpp logits buffer
    view = buf[1::2, :700]  # [3, 700] every other row, a prefix of each
    np.testing.assert_array_equal(native.argmax_rows(view), np.argmax(view, axis=1))
    assert native.argmax_rows(buf[:0]).shape == (0,)
    assert native.argmax_rows(buf[2:3]).tolist() == [int(np.argmax(buf[2]))]


def test_argmax_rows_bad_input():
    logits = np.zeros((2, 5), np.float32)
    out = np.zeros(2, np.int32)
    lib, L, o = native.lib, logits.ctypes.data, out.ctypes.data
    assert lib.fd_argmax_rows(L, 2, 5, 5, o) == FD_OK
    for args in ((None, 2, 5, 5, o), (L, 2, 5, 5, None), (L, -1, 5, 5, o), (L, 2, 0, 5, o), (L, 2, 5, 4, o)):
        assert lib.fd_argmax_rows(*args) == FD_ERR_ARG, args
    assert lib.fd_argmax_rows(None, 0, 5, 5, None) == FD_OK  # nothing to do
    for col in (0, 3):
        logits[1, col] = np.nan
        assert lib.fd_argmax_rows(L, 2, 5, 5, o) == FD_ERR_VALUE
        logits[1, col] = 0.0
    for bad in (logits.astype(np.float64), logits[:, ::2], logits.T, logits[0]):
        with pytest.raises(NativeCallError):
            native.argmax_rows(bad)


# --- rejection sampling against the reference -------------------------------------------------

def random_case(rng: np.random.Generator, T: int, K: int, V: int, *, duplicates: bool = False):
    """A target p [T+1, V], a proposal over K candidates per position and a path drawn from it.
    p mixes the proposal with noise in a random ratio, so acceptance runs of every length happen."""
    cand_ids = np.array([rng.choice(V, size=K, replace=duplicates) for _ in range(T)], np.int32).reshape(T, K)
    cand_q = rng.dirichlet(np.ones(K), size=T).astype(np.float32).reshape(T, K)  # [T, K]
    path = np.array([rng.choice(cand_ids[t], p=cand_q[t] / cand_q[t].sum()) for t in range(T)], np.int32)  # [T]
    p = rng.dirichlet(np.full(V, 0.3), size=T + 1)  # [T+1, V] spiky, like a sampler's
    for t in range(T):
        q_full = np.zeros(V)  # [V]
        np.add.at(q_full, cand_ids[t], cand_q[t])
        p[t] += rng.random() * 4 * q_full
    p[:, rng.integers(0, V, size=V // 4)] = 0.0  # tokens top-k/top-p cut away
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    return p, path, cand_ids, cand_q


@pytest.mark.parametrize("K", (1, 3, 16))
@pytest.mark.parametrize("T", (0, 1, 3, 7))
def test_accept_sample_matches_reference(T, K):
    rng = np.random.default_rng([T, K])
    outcomes = set()
    for i in range(60):
        p, path, cand_ids, cand_q = random_case(rng, T, K, V=40, duplicates=i % 3 == 0)
        u = rng.random(2 * (T + 1), dtype=np.float32)  # [2(T+1)]
        got = accept.accept_sample(p, path, cand_ids, cand_q, u)
        assert got == ref.accept_sample(p, path, cand_ids, cand_q, u)
        assert 0 <= got[0] <= T and p[got[0], got[1]] > 0  # never a token the target rules out
        outcomes.add(got[0])
    assert len(outcomes) >= min(T + 1, 3)  # both rejections and acceptances were exercised


def test_accept_sample_point_mass():
    """A deterministic path (cand_ids/q None): accepted with probability p(x), else the
    replacement comes from p without x."""
    p = np.array([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25]], np.float32)  # [T+1=2, V=3]
    assert accept.accept_sample(p, [1], None, None, [0.59, 0.0, 0.0, 0.4]) == (1, 0)  # accepted, bonus 0
    assert accept.accept_sample(p, [1], None, None, [0.61, 0.2, 0.0, 0.4]) == (0, 0)  # rejected: 0.2*0.4 -> 0
    assert accept.accept_sample(p, [1], None, None, [0.61, 0.3, 0.0, 0.4]) == (0, 2)
    assert accept.accept_sample(p, [1], [[1]], [[1.0]], [0.61, 0.3, 0.0, 0.4]) == (0, 2)


def test_accept_sample_zero_residual_falls_back_to_p():
    """q > p at x and p <= q elsewhere (a proposal summing over 1): rejection is possible,
    the residual is empty, the replacement is drawn from p."""
    p = np.array([[0.5, 0.5], [0.5, 0.5]], np.float32)  # [2, 2]
    args = (p, [0], [[0, 1]], [[0.6, 0.5]])
    assert accept.accept_sample(*args, [0.9, 0.7, 0.0, 0.0]) == (0, 1)
    assert accept.accept_sample(*args, [0.9, 0.2, 0.0, 0.0]) == (0, 0)
    assert ref.accept_sample(*[np.asarray(a) for a in args], [0.9, 0.7, 0.0, 0.0]) == (0, 1)


def test_accept_sample_bad_input():
    T, K, V = 2, 3, 5
    p = np.full((T + 1, V), 0.2, np.float32)
    path, ids = np.array([0, 1], np.int32), np.array([[0, 1, 2], [1, 2, 3]], np.int32)
    q, u = np.full((T, K), 1 / 3, np.float32), np.full(2 * (T + 1), 0.5, np.float32)
    out = np.zeros(2, np.int32)

    def call(p=p, V=V, path=path, T=T, ids=ids, q=q, K=K, u=u, null=()):
        ptr = lambda key, a: None if key in null else a.ctypes.data  # noqa: E731
        return native.lib.fd_accept_sample(ptr("p", p), V, ptr("path", path), T, ptr("ids", ids), ptr("q", q), K,
                                           ptr("u", u), ptr("n", out), out.ctypes.data + 4)

    assert call() == FD_OK
    for null in ("p", "path", "ids", "q", "u", "n"):
        assert call(null=(null,)) == FD_ERR_ARG, null
    assert call(T=0, null=("path", "ids", "q")) == FD_OK  # no path: only the bonus
    for kw in ({"T": -1}, {"K": 0}, {"K": 65}, {"V": 0}):
        assert call(**kw) == FD_ERR_ARG, kw

    def bad(name, fix):
        arrays = {"p": p.copy(), "path": path.copy(), "ids": ids.copy(), "q": q.copy(), "u": u.copy()}
        fix(arrays[name])
        return call(**arrays)

    for name, fix in (("path", lambda a: a.__setitem__(1, V)), ("path", lambda a: a.__setitem__(0, -1)),
                      ("path", lambda a: a.__setitem__(0, 4)),  # q(4) = 0: q could not have proposed it
                      ("ids", lambda a: a.__setitem__((1, 2), V)), ("ids", lambda a: a.__setitem__((0, 0), -2)),
                      ("q", lambda a: a.__setitem__((0, 1), np.nan)), ("q", lambda a: a.__setitem__((1, 0), -0.1)),
                      ("q", lambda a: a.__setitem__((0, 0), 0.0)),  # path[0] = 0 has no mass left
                      ("p", lambda a: a.__setitem__((0, 0), np.nan)), ("p", lambda a: a.__setitem__((1, 1), -1.0)),
                      ("u", lambda a: a.__setitem__(0, 1.0)), ("u", lambda a: a.__setitem__(5, np.nan)),
                      ("u", lambda a: a.__setitem__(1, -0.5))):
        assert bad(name, fix) == FD_ERR_VALUE, name
    assert bad("u", lambda a: a.__setitem__(4, 7.0)) == FD_OK  # uniforms[2T] is documented as unread
    zero_bonus = p.copy()
    zero_bonus[T] = 0.0  # nothing to draw the bonus from
    assert call(p=zero_bonus) == FD_ERR_VALUE
    with pytest.raises(NativeCallError):
        accept.accept_sample(p.astype(np.float64), path, ids, q, u)
    with pytest.raises(NativeCallError):
        accept.accept_sample(p, path, ids, q, u[:-1])
