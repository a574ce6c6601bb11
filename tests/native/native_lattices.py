"""Random DFlash 2 lattices for the native tests (a helper module, not a test file).

Built like the draft's nextn output (docs/llama-cpp.md, The lattice): one row per block slot,
[K candidate ids as float32 | K*K scores predecessor-major | padding]. Bytes the
selectors must never read (the anchor row, the padding, rows past slot T) are NaN,
so a stray read shows up as an FD_ERR_VALUE instead of passing silently.
"""

from __future__ import annotations

import numpy as np

VOCAB = 49152  # SmolLM2's vocabulary: ids are exact in float32 (< 2^24)


def make_lattice(rng: np.random.Generator, T: int, K: int, stride: int | None = None, *, ties: bool = False,
                 slot1_identical: bool = True, extra_rows: int = 1, scale: float = 2.0) -> np.ndarray:
    """[T + 1 + extra_rows, stride] float32. ties: scores drawn from {0, 1, 2} (many exact ties);
    slot1_identical: slot 1's K score rows equal, as the draft writes them (the anchor is the
    only predecessor); otherwise they differ, so reading any row but 0 there is caught."""
    stride = stride if stride is not None else K + K * K + 7
    lattice = np.full((T + 1 + extra_rows, stride), np.nan, dtype=np.float32)  # [B, stride]
    for i in range(1, T + 1):
        lattice[i, :K] = rng.choice(VOCAB, size=K, replace=False)
        scores = rng.integers(0, 3, size=(K, K)) if ties else rng.normal(size=(K, K)) * scale  # [K, K]
        if i == 1 and slot1_identical:
            scores[:] = scores[0]
        lattice[i, K:K + K * K] = scores.reshape(-1)
    return lattice


def scores_of(lattice: np.ndarray, T: int, K: int) -> np.ndarray:
    """[T, K(a), K(b)] float64 view of the scores."""
    return lattice[1:T + 1, K:K + K * K].astype(np.float64).reshape(T, K, K)
