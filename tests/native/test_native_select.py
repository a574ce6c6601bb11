"""The native path selectors (native/src/fd_select.c): against the NumPy reference
(tests/native/numpy_reference.py), against brute force over all paths, on ties and on bad
input; and the select stage (engine/speculative/select.py) that the speculative loop calls."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest
from native_lattices import make_lattice, scores_of

from engine import native
from engine.errors import InvalidRequest
from engine.native import NativeCallError, RawLattice
import numpy_reference as ref
from engine.speculative.params import SELECTORS as METHODS
from engine.speculative.select import Selection, select

SEEDS = (0, 1, 2)
KS = (1, 2, 3, 16)
TS = (1, 2, 7, 15)
FD_OK, FD_ERR_ARG, FD_ERR_VALUE = 0, -1, -2
DETERMINISTIC = ("select_walk", "select_viterbi", "select_dp")


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def path_logprob(S: np.ndarray, path) -> float:
    """sum_t log p_t(x_t | x_{t-1}) with x_{-1} the anchor (score row 0). S [T, K, K]."""
    total, pred = 0.0, 0
    for t, b in enumerate(path):
        total += float(np.log(softmax(S[t, pred])[b]))
        pred = b
    return total


def path_expected(S: np.ndarray, path) -> float:
    """Expected accepted tokens if the target agrees with the draft's p:
    sum_{j} prod_{i <= j} p_i(x_i | x_{i-1})."""
    total, prob, pred = 0.0, 1.0, 0
    for t, b in enumerate(path):
        prob *= float(softmax(S[t, pred])[b])
        total += prob
        pred = b
    return total


def assert_same(got, want, *, exact_idx: bool = True):
    if exact_idx:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    if want[2] is not None:
        np.testing.assert_allclose(got[2], want[2], rtol=1e-6, atol=1e-7)


# --- against the reference -------------------------------------------------------------

@pytest.mark.parametrize("slot1_identical", [True, False])
@pytest.mark.parametrize("T", TS)
@pytest.mark.parametrize("K", KS)
@pytest.mark.parametrize("seed", SEEDS)
def test_selectors_match_reference(seed, K, T, slot1_identical):
    rng = np.random.default_rng([seed, K, T, slot1_identical])
    L = make_lattice(rng, T, K, slot1_identical=slot1_identical)  # [T+2, K+K*K+7]
    for name in DETERMINISTIC:
        got = getattr(native, name)(L, T, K, 0.7, want_q=True)
        want = getattr(ref, name)(L, T, K, 0.7, want_q=True)
        assert_same(got, want)
        np.testing.assert_array_equal(getattr(native, name)(L, T, K)[0], want[0])  # q = NULL: same path
        assert got[1].dtype == np.int32 and got[2].dtype == np.float32
        if name == "select_dp":
            assert got[3] == pytest.approx(want[3], rel=1e-6)
    unary = rng.normal(size=(T, K)).astype(np.float32)  # [T, K]
    assert_same(native.select_top1(L, T, K, unary, 1.3, want_q=True), ref.select_top1(L, T, K, unary, 1.3, True))
    for temperature in (0.3, 1.0, 2.5):
        u = rng.random(T, dtype=np.float32)  # [T]
        got = native.select_sample(L, T, K, temperature, u)
        assert_same(got, ref.select_sample(L, T, K, temperature, u))
        np.testing.assert_allclose(got[2].sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("T", TS)
@pytest.mark.parametrize("K", (2, 3, 16))
@pytest.mark.parametrize("seed", SEEDS)
def test_selectors_on_tied_scores(seed, K, T):
    """Scores from {0, 1, 2}: many exact ties. Walk, top1 and sample compare raw scores and
    must equal the reference exactly; viterbi and dp must reach the reference's optimum."""
    rng = np.random.default_rng([seed, K, T, 7])
    L = make_lattice(rng, T, K, ties=True)
    S = scores_of(L, T, K)
    assert_same(native.select_walk(L, T, K, 1.0, True), ref.select_walk(L, T, K, 1.0, True))
    unary = rng.integers(0, 2, size=(T, K)).astype(np.float32)  # [T, K]
    assert_same(native.select_top1(L, T, K, unary), ref.select_top1(L, T, K, unary))
    u = rng.random(T, dtype=np.float32)  # [T]
    assert_same(native.select_sample(L, T, K, 0.9, u), ref.select_sample(L, T, K, 0.9, u))
    got, want = native.select_viterbi(L, T, K)[0], ref.select_viterbi(L, T, K)[0]
    assert path_logprob(S, got) == pytest.approx(path_logprob(S, want), abs=1e-9)
    got, want = native.select_dp(L, T, K), ref.select_dp(L, T, K)
    assert path_expected(S, got[0]) == pytest.approx(path_expected(S, want[0]), rel=1e-12)
    assert got[3] == pytest.approx(want[3], rel=1e-6)


def test_largest_block_matches_reference():
    rng = np.random.default_rng(64)
    L = make_lattice(rng, 64, 64, stride=64 + 64 * 64)
    for name in DETERMINISTIC:
        assert_same(getattr(native, name)(L, 64, 64, 1.0, True), getattr(ref, name)(L, 64, 64, 1.0, True))


# --- against brute force over all paths ---------------------------------------------------

BRUTE = [(seed, K, T) for seed in range(5) for K in (1, 2, 3, 4) for T in (1, 2, 3, 4)]


@pytest.mark.parametrize("seed,K,T", BRUTE)
def test_selectors_against_brute_force(seed, K, T):
    rng = np.random.default_rng([seed, K, T, 99])
    L = make_lattice(rng, T, K, slot1_identical=seed % 2 == 0, scale=1.5)
    S = scores_of(L, T, K)  # [T, K, K]
    paths = list(itertools.product(range(K), repeat=T))
    best_logp = max(path_logprob(S, x) for x in paths)
    best_expected = max(path_expected(S, x) for x in paths)

    idx = native.select_viterbi(L, T, K)[0]
    assert path_logprob(S, idx) == pytest.approx(best_logp, abs=1e-9)
    idx, _, _, v0 = native.select_dp(L, T, K)
    assert path_expected(S, idx) == pytest.approx(best_expected, rel=1e-12)
    assert v0 == pytest.approx(best_expected, rel=1e-6)
    assert 0.0 < v0 <= T
    # The walk: at every position the first maximum of its predecessor's score row.
    idx, pred = native.select_walk(L, T, K)[0], 0
    for t in range(T):
        row = S[t, pred]
        assert row[idx[t]] == row.max() and (row[:idx[t]] < row.max()).all()
        pred = idx[t]
    unary = rng.normal(size=(T, K)).astype(np.float32)  # [T, K]
    np.testing.assert_array_equal(native.select_top1(L, T, K, unary)[0], unary.argmax(axis=1))


def test_brute_force_cases_tell_the_selectors_apart():
    """The brute-force lattices are not degenerate: dp beats the walk and viterbi somewhere,
    so a dp that fell back to either would fail the test above."""
    dp_beats_walk = dp_beats_viterbi = 0
    for seed, K, T in BRUTE:
        L = make_lattice(np.random.default_rng([seed, K, T, 99]), T, K, slot1_identical=seed % 2 == 0, scale=1.5)
        S = scores_of(L, T, K)
        dp = path_expected(S, native.select_dp(L, T, K)[0])
        dp_beats_walk += dp > path_expected(S, native.select_walk(L, T, K)[0]) + 1e-9
        dp_beats_viterbi += dp > path_expected(S, native.select_viterbi(L, T, K)[0]) + 1e-9
    assert dp_beats_walk >= 3 and dp_beats_viterbi >= 3


# --- ties, the anchor row ---------------------------------------------------------------

@pytest.mark.parametrize("T", TS)
@pytest.mark.parametrize("K", KS)
def test_all_equal_scores_choose_the_lowest_index(T, K):
    L = make_lattice(np.random.default_rng([K, T]), T, K)
    L[1:T + 1, K:K + K * K] = 0.25
    for name in DETERMINISTIC:
        idx, ids, q = getattr(native, name)(L, T, K, 1.3, want_q=True)[:3]
        np.testing.assert_array_equal(idx, 0)
        np.testing.assert_array_equal(ids, L[1:T + 1, 0].astype(np.int32))
        np.testing.assert_allclose(q, 1.0 / K, rtol=1e-6)
    expected = native.select_dp(L, T, K)[3]
    assert expected == pytest.approx(sum(K ** -j for j in range(1, T + 1)), rel=1e-6)
    np.testing.assert_array_equal(native.select_top1(L, T, K, np.zeros((T, K)))[0], 0)


def test_a_tied_maximum_goes_to_its_first_index():
    L = make_lattice(np.random.default_rng(5), 1, 4)
    L[1, 4:20] = np.tile([1.0, 3.0, 3.0, 0.0], 4)
    for name in DETERMINISTIC:
        assert getattr(native, name)(L, 1, 4)[0].tolist() == [1]
    assert native.select_top1(L, 1, 4, [[1.0, 3.0, 3.0, 0.0]])[0].tolist() == [1]


def test_position_0_reads_score_row_0():
    """At slot 1 the anchor is the only predecessor: every selector reads row 0 there, even
    when (unlike the draft's output) the other rows differ."""
    K = 4
    L = make_lattice(np.random.default_rng(3), 1, K, slot1_identical=False)
    scores = np.full((K, K), 0.0, np.float32)  # [K(a), K(b)]
    scores[0, 2] = 5.0
    scores[1:, 3] = 9.0
    L[1, K:K + K * K] = scores.reshape(-1)
    for name in DETERMINISTIC:
        assert getattr(native, name)(L, 1, K)[0].tolist() == [2]
    q = native.select_walk(L, 1, K, 1.0, want_q=True)[2]
    np.testing.assert_allclose(q[0], softmax(scores[0].astype(np.float64)), rtol=1e-6)


# --- bad input never crashes --------------------------------------------------------------

SELECTORS = ("fd_select_walk", "fd_select_viterbi", "fd_select_dp", "fd_select_top1", "fd_select_sample")


def c_select(name, lattice, T, K, *, stride=None, temperature=1.0, q=True, null=(), unary=None, uniforms=None):
    """Call the C selector directly (the wrappers cannot pass NULL or wrong sizes);
    outputs are oversized so a broken bound check fails the test, not the process."""
    def ptr(key, arr):
        return None if key in null else arr.ctypes.data
    idx, ids = np.zeros(160, np.int32), np.zeros(160, np.int32)
    qbuf, expected = np.zeros(160 * 80, np.float32), np.zeros(1, np.float32)
    unary = np.zeros(160 * 80, np.float32) if unary is None else unary
    uniforms = np.full(160, 0.5, np.float32) if uniforms is None else uniforms
    stride = lattice.shape[1] if stride is None else stride
    head = [ptr("lattice", lattice), stride, T, K]
    tail = [ptr("idx", idx), ptr("ids", ids), ptr("q", qbuf) if q else None]
    fn = getattr(native.lib, name)
    if name == "fd_select_dp":
        return fn(*head, temperature, *tail, ptr("expected", expected))
    if name == "fd_select_top1":
        return fn(*head, ptr("unary", unary), temperature, *tail)
    if name == "fd_select_sample":
        return fn(*head, temperature, ptr("uniforms", uniforms), *tail)
    return fn(*head, temperature, *tail)


@pytest.mark.parametrize("name", SELECTORS)
def test_bad_arguments_return_fd_err_arg(name):
    T, K = 3, 4
    L = make_lattice(np.random.default_rng(1), 70, 64, stride=64 + 64 * 64)  # room for any size below
    L[1:71, :64] = np.arange(64)
    L[1:71, 64:] = 0.0
    assert c_select(name, L, T, K) == FD_OK
    for null in ("lattice", "idx", "ids") + {"fd_select_top1": ("unary",),
                                             "fd_select_sample": ("uniforms",)}.get(name, ()):
        assert c_select(name, L, T, K, null=(null,)) == FD_ERR_ARG, null
    for t, k in ((0, K), (-1, K), (65, K), (T, 0), (T, -3), (T, 65)):
        assert c_select(name, L, t, k) == FD_ERR_ARG, (t, k)
    assert c_select(name, L, T, K, stride=K + K * K - 1) == FD_ERR_ARG
    assert c_select(name, L, T, K, stride=-1) == FD_ERR_ARG
    for temperature in (0.0, -1.0, float("nan"), float("inf")):
        assert c_select(name, L, T, K, temperature=temperature) == FD_ERR_ARG, temperature
        want = FD_ERR_ARG if name == "fd_select_sample" else FD_OK  # temperature unread without q
        assert c_select(name, L, T, K, temperature=temperature, q=False) == want
    assert c_select(name, L, 64, 64) == FD_OK  # the limits themselves are fine


@pytest.mark.parametrize("name", SELECTORS)
def test_bad_values_return_fd_err_value(name):
    T, K = 3, 4
    fresh = lambda: make_lattice(np.random.default_rng(2), T, K)  # noqa: E731
    assert c_select(name, fresh(), T, K) == FD_OK  # NaN anchor row and padding are never read
    for row, col, value in ((1, K + 3, np.nan), (3, K + K * K - 1, np.inf), (2, K, -np.inf),
                            (2, 0, 1.5), (1, K - 1, -1.0), (3, 1, 2.0 ** 31), (2, 2, np.nan)):
        L = fresh()
        L[row, col] = value
        assert c_select(name, L, T, K) == FD_ERR_VALUE, (row, col, value)
    if name == "fd_select_top1":
        unary = np.zeros(T * K, np.float32)
        unary[-1] = np.nan
        assert c_select(name, fresh(), T, K, unary=unary) == FD_ERR_VALUE
    if name == "fd_select_sample":
        for bad in (1.0, -0.1, np.nan, 2.0):
            u = np.full(T, 0.5, np.float32)
            u[T - 1] = bad
            assert c_select(name, fresh(), T, K, uniforms=u) == FD_ERR_VALUE, bad


def test_wrappers_check_before_calling_c():
    L = make_lattice(np.random.default_rng(4), 3, 4)
    for bad in (L.astype(np.float64), L[:, ::2], L[:3], L[:, :19], L.T, [[0.0]]):
        with pytest.raises(NativeCallError):
            native.select_walk(bad, 3, 4)
    with pytest.raises(NativeCallError):
        native.select_walk(L, 0, 4)
    L[2, 5] = np.nan
    with pytest.raises(NativeCallError, match="FD_ERR_VALUE"):
        native.select_dp(L, 3, 4)
    with pytest.raises(NativeCallError):
        native.select_top1(make_lattice(np.random.default_rng(4), 3, 4), 3, 4, np.zeros((3, 5)))
    with pytest.raises(NativeCallError):
        native.select_walk(RawLattice(0, 100, 8), 3, 4)


# --- raw pointers: the draft's output buffer, read in place ---------------------------------

def test_raw_lattice_reads_the_buffer_in_place():
    T, K, stride = 7, 16, 576  # the draft's n_embd
    rng = np.random.default_rng(11)
    blocks = [make_lattice(rng, T, K, stride=stride, extra_rows=0) for _ in range(3)]
    buf = np.concatenate(blocks)  # [3 * (T+1), stride]: three sequences' blocks in one output
    addr = buf.ctypes.data + (T + 1) * stride * 4  # the second block's anchor row
    for ptr in (addr, ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))):
        raw = RawLattice(ptr, stride, T + 1)
        for name in DETERMINISTIC:
            assert_same(getattr(native, name)(raw, T, K, 1.0, True), getattr(ref, name)(blocks[1], T, K, 1.0, True))
        np.testing.assert_array_equal(native.lattice_rows(raw, T), blocks[1])
    with pytest.raises(NativeCallError):
        native.select_walk(RawLattice(addr, stride, T), T, K)  # B = T slots hold only T-1 positions


# --- the select stage ---------------------------------------------------------------------

def test_select_stage():
    assert METHODS == ("walk", "viterbi", "dp", "top1")
    T, K = 7, 16
    rng = np.random.default_rng(21)
    L = make_lattice(rng, T, K)
    unary = rng.normal(size=(T, K)).astype(np.float32)  # [T, K]
    for method in METHODS:
        s = select(L, T, K, method, unary=unary)
        assert isinstance(s, Selection) and s.q is None and s.cand_ids is None
        want = ref.select_top1(L, T, K, unary) if method == "top1" else getattr(ref, f"select_{method}")(L, T, K)
        np.testing.assert_array_equal(s.ids, want[1])
        assert (s.expected_accepted is not None) == (method == "dp")
    # temperature > 0 without uniforms: still the deterministic path, verified as a point mass
    assert select(L, T, K, "dp", temperature=0.8).q is None
    u = rng.random(T, dtype=np.float32)  # [T]
    s = select(RawLattice(L.ctypes.data, L.shape[1], L.shape[0]), T, K, "walk", 0.8, uniforms=u)
    assert_same((s.idx, s.ids, s.q), ref.select_sample(L, T, K, 0.8, u))
    np.testing.assert_array_equal(s.cand_ids, L[1:T + 1, :K].astype(np.int32))
    np.testing.assert_array_equal(s.cand_ids[np.arange(T), s.idx], s.ids)


def test_select_stage_refuses_what_it_cannot_do():
    L = make_lattice(np.random.default_rng(22), 3, 4)
    u = np.full(3, 0.5, np.float32)
    for kwargs in ({"method": "beam"}, {"method": "top1"}, {"method": "dp", "temperature": 1.0, "uniforms": u},
                   {"method": "walk", "temperature": 0.0, "uniforms": u}):
        with pytest.raises(InvalidRequest):
            select(L, 3, 4, **kwargs)
