"""fd_gather_features: captured target layers -> one injection row per committed token."""

import ctypes

import numpy as np
import pytest

from engine import native


def layers_of(arrays):
    ptrs = (ctypes.c_void_p * len(arrays))()
    for i, a in enumerate(arrays):
        ptrs[i] = a.ctypes.data
    return ptrs


def test_rows_side_by_side_in_tap_order():
    rng = np.random.default_rng(0)
    taps = [rng.standard_normal((64, 12)).astype(np.float32) for _ in range(3)]  # [n_batch, n_embd] each
    rows = np.array([5, 6, 7, 0, 63], np.int32)
    out = np.full((5, 36), np.nan, np.float32)
    native.gather_features(layers_of(taps), 12, 64, rows, out)
    assert np.array_equal(out, np.concatenate([t[rows] for t in taps], axis=1))


def test_empty_and_bad_rows():
    taps = [np.zeros((8, 4), np.float32)]
    native.gather_features(layers_of(taps), 4, 8, np.zeros(0, np.int32), np.zeros((0, 4), np.float32))
    out = np.full((2, 4), 7.0, np.float32)
    for bad in ([0, 8], [-1, 0]):  # outside the capture buffer: refused, nothing written
        with pytest.raises(native.NativeCallError):
            native.gather_features(layers_of(taps), 4, 8, np.array(bad, np.int32), out)
        assert np.all(out == 7.0)
    with pytest.raises(native.NativeCallError):
        native.gather_features(layers_of(taps), 4, 8, np.array([0, 1], np.int32), np.zeros((2, 5), np.float32))
    with pytest.raises(native.NativeCallError):  # a NULL layer pointer
        native.gather_features((ctypes.c_void_p * 1)(), 4, 8, np.array([0], np.int32), np.zeros((1, 4), np.float32))
