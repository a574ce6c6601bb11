"""The select stage of the speculative step: the path through the DFlash 2 lattice.

What it is: the only code that turns a lattice into a path. `path_from` gives the loop
the path to verify through a drafter's lattice (K candidates and K x K transition scores
per block slot); `select` does it with one of the native selectors (native/src/fd_select.c):
  walk     upstream llama.cpp's greedy walk (what the selector was trained for; parity),
  viterbi  the max-product path under p_t(b|a) = softmax(scores_t[a]),
  dp       the path with the most expected accepted tokens; also reports that number,
  top1     DFlash v1: each position's best unary logit (needs `unary`).
At temperature > 0 with `uniforms`, the path is *drawn* by a sampling walk and comes
with the proposal q it was drawn from, which rejection sampling needs to stay lossless.
What it is not: the draft forward (drafters/) or acceptance (accept.py).

Lossless sampling note: a deterministic path must be verified as a point mass
(q = None here; the acceptance stage treats that as K = 1, q = 1). Verifying it
against the softmax it was *not* drawn from would bias the output, so `select`
returns q only for a drawn path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import native
from ..errors import InvalidRequest
from ..native import Lattice, RawLattice  # noqa: F401  (re-exported: what callers pass in)
from .drafters.base import Lattice as DraftLattice
from .params import SELECTORS


@dataclass
class Path:
    """The path the target verifies after the anchor, with the proposal it was drawn from."""

    tokens: list[int]  # [T] token ids for slots 1..T
    cand_ids: np.ndarray | None = None  # [T, K] int32 the candidates a drawn path chose among
    cand_q: np.ndarray | None = None  # [T, K] float32 q over them (rows sum to 1); None = a point mass
    sources: Sequence[str | None] | None = None  # [T] where each token came from; None (or an entry None): the drafter

    def head(self, n: int) -> "Path":
        """The first n tokens of this path."""
        def cut(a):
            return None if a is None else a[:n]
        return Path(self.tokens[:n], cut(self.cand_ids), cut(self.cand_q), cut(self.sources))


def path_from(lattice: DraftLattice, T: int, selector: str, temperature: float = 0.0, uniforms=None) -> Path:
    """The path of T tokens through a drafter's lattice: `selector`'s at temperature 0; with
    `uniforms` [T] (temperature > 0), drawn by the sampling walk, which acceptance needs to
    stay lossless."""
    if uniforms is not None:
        sel = select(lattice.rows, T, lattice.top_k, "walk", temperature, uniforms=uniforms)
    else:
        unary = None if lattice.unary is None else lattice.unary[:T]
        sel = select(lattice.rows, T, lattice.top_k, selector, unary=unary)
    origin = lattice.origin  # a merged span's tokens are its last candidate
    sources = None if origin is None else [origin[t] if i == lattice.top_k - 1 and t < len(origin) else None
                                           for t, i in enumerate(sel.idx.tolist())]
    return Path(sel.ids.tolist(), sel.cand_ids, sel.q, sources)


@dataclass
class Selection:
    idx: np.ndarray  # [T] int32 chosen candidate index per path position
    ids: np.ndarray  # [T] int32 the path: token ids for slots 1..T
    q: np.ndarray | None  # [T, K] float32 the proposal the path was drawn from; None = point mass
    expected_accepted: float | None  # dp only: V_0, the draft's own estimate of accepted tokens
    cand_ids: np.ndarray | None = None  # [T, K] int32 candidate ids per position (with q)


def select(lattice: Lattice, T: int, K: int, method: str, temperature: float = 0.0, uniforms=None,
           unary=None) -> Selection:
    """Pick the path for one block. lattice: [B, stride] float32 rows or a RawLattice
    (slot 0 = anchor); T <= B-1 path positions; K candidates per position.
    uniforms [T] in [0, 1) with temperature > 0: draw the path (method must be "walk");
    unary [T, K]: the draft's logits of the candidates, for method "top1"."""
    if method not in SELECTORS:
        raise InvalidRequest(f"unknown path selector {method!r}; choose one of {', '.join(SELECTORS)}",
                             param="selector")
    if uniforms is not None:
        if not temperature > 0:
            raise InvalidRequest("a sampled path needs temperature > 0", param="temperature")
        if method != "walk":
            raise InvalidRequest(f"only the walk can be sampled; {method!r} is deterministic (pass no "
                                 "uniforms and verify its path as a point mass)", param="selector")
        idx, ids, q = native.select_sample(lattice, T, K, temperature, uniforms)
        rows = native.lattice_rows(lattice, T)  # [T+1, stride]
        cand_ids = rows[1:, :K].astype(np.int32)  # [T, K]
        return Selection(idx, ids, q, None, cand_ids)
    if method == "walk":
        idx, ids, _ = native.select_walk(lattice, T, K)
        return Selection(idx, ids, None, None)
    if method == "viterbi":
        idx, ids, _ = native.select_viterbi(lattice, T, K)
        return Selection(idx, ids, None, None)
    if method == "dp":
        idx, ids, _, expected = native.select_dp(lattice, T, K)
        return Selection(idx, ids, None, expected)
    if unary is None:
        raise InvalidRequest("the top1 selector needs the draft's unary logits of the candidates",
                             param="selector")
    idx, ids, _ = native.select_top1(lattice, T, K, unary)
    return Selection(idx, ids, None, None)
