"""What every drafter (DFlash 2, prompt lookup, test drafters) offers the speculative loop.

The loop owns the target context and decides block lengths; a drafter only proposes
tokens and keeps whatever state it needs (the DFlash 2 draft's own KV cache, an
n-gram index) in step with what the target committed. Words as in DESIGN.md §3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass
class SeqView:
    """One sequence as a drafter sees it at the start of a step."""

    seq_id: int
    tokens: list[int]  # every committed token, prompt + output; tokens[-1] is the anchor
    pos: int  # position of the anchor (= len(tokens) - 1); the anchor is not in the target KV yet


@dataclass
class Proposal:
    """A drafter's path for one sequence: tokens for slots 1..len(tokens) after the anchor."""

    tokens: list[int]  # [T] the path, T <= n_draft (may be empty: nothing worth verifying)
    # For sampling at temperature > 0 (rejection sampling): the proposal distribution q
    # the path tokens were drawn from. None = deterministic path (q is a point mass).
    cand_ids: np.ndarray | None = None  # [T, K] int32 candidate ids per path position
    cand_q: np.ndarray | None = None  # [T, K] float32 q over those candidates (rows sum to 1)
    stats: dict = field(default_factory=dict)  # drafter-specific timing / diagnostics


class Drafter(Protocol):
    name: str

    def attach(self, target_ctx) -> None:
        """Called once before the target's first decode (e.g. to enable layer capture)."""

    def propose(self, seqs: list[SeqView], n_draft: int, temperature: float,
                unary: bool = False) -> list[Proposal]:
        """Paths of at most n_draft tokens for all `seqs`, in one draft pass where possible.
        `unary`: a drafter with a lattice also returns the draft's logit of every candidate
        (`stats["unary"]`, [T, K]), which the top1 selector needs; others ignore it."""

    def observe(self, committed: list[tuple[int, int, int]]) -> None:
        """Right after a target decode: (seq_id, pos, batch_row) of each decoded token that is
        now committed (prompt chunks: all rows; verifies: the anchor and accepted tokens).
        Target layer features of those rows stay readable until the next target decode."""

    def forget(self, seq_id: int) -> None:
        """The sequence ended or was cancelled: drop its state (e.g. its draft KV cells)."""
