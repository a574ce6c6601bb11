"""The accept stage of the speculative step: how much of the verified path is kept.

What it is: greedy acceptance (temperature 0: the committed tokens are exactly what
plain decoding of the target would write) and rejection sampling (temperature > 0:
each committed token is distributed exactly as the target's sampler would draw it),
both in the native library (native/src/fd_accept.c).
What it is not: the target's sampler (temperature, top-k/top-p/min-p and grammar masks
are applied to p before this stage), the RNG (callers pass uniforms), or the rollback
of rejected positions (the loop does that).
Reference: Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding", Algorithm 1.
"""

from __future__ import annotations

import numpy as np

from .. import native
from ..native import accept_greedy  # noqa: F401  (the stage's greedy rule, as the library defines it)


def accept_sample(p: np.ndarray, path, cand_ids, cand_q, uniforms) -> tuple[int, int]:
    """p [T+1, V] float32: the target sampler's distribution at each verify position;
    path [T]; cand_ids [T, K] / cand_q [T, K]: the proposal each path token was drawn
    from, or both None for a deterministic path (a point mass: K = 1, q = 1);
    uniforms [2*(T+1)] in [0, 1). Returns (n_accepted, token), token = the replacement
    at the first rejection, or the bonus when all T are accepted."""
    path = np.asarray(path, dtype=np.int32).reshape(-1)  # [T]
    if cand_ids is None and cand_q is None:
        cand_ids = path[:, None]  # [T, 1]
        cand_q = np.ones((len(path), 1), np.float32)  # [T, 1]
    return native.accept_sample(p, path, cand_ids, cand_q, uniforms)
