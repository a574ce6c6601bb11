"""What every drafter (DFlash 2, DFlash v1, prompt lookup, test drafters) offers the speculative loop.

The loop owns the target context and decides block lengths; a drafter only proposes and
keeps whatever state it needs (a DFlash draft's own KV cache, an n-gram index) in step
with what the target committed. A drafter proposes either a path (lookup, DFlash v1) or a
lattice (DFlash 2); turning a lattice into a path is the select stage's job (select.py), and only
its. Words as in docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from gguf_tools.dflash.format import DFLASH2, DraftKind

if TYPE_CHECKING:  # its module loads llama.cpp's model binding, which the base of every drafter does not need
    from .dflash_fit import DraftInfo


@dataclass
class SeqView:
    """One sequence as a drafter sees it at the start of a step."""

    seq_id: int
    tokens: list[int]  # every committed token, prompt + output; tokens[-1] is the anchor
    pos: int  # position of the anchor (= len(tokens) - 1); the anchor is not in the target KV yet
    grammar: str | None = None  # the request's GBNF (the grammar drafter follows it), None: unconstrained
    n_prompt: int = 0  # tokens[:n_prompt] are the prompt, the rest the output


@dataclass
class Lattice:
    """A DFlash 2 block's output (layout: docs/llama-cpp.md, The lattice): row i >= 1 holds slot i's K candidate
    ids (as float32) and K x K transition scores, predecessor-major; row 0, the anchor, is zeros."""

    rows: np.ndarray  # [B, n_embd] float32, B = anchor + drafted slots
    top_k: int  # K
    unary: np.ndarray | None = None  # [B-1, K] float32 the draft's logit of each candidate (top1); if asked
    origin: Sequence[str | None] | None = None  # [B-1] the source of candidate K-1 where a span was merged in


@dataclass
class Proposal:
    """A drafter's offer for one sequence: a path, or a lattice for the select stage; neither
    (an empty path) means nothing worth verifying this step."""

    path: list[int] = field(default_factory=list)  # [T] tokens for slots 1..T after the anchor
    lattice: Lattice | None = None
    sources: list[str] | None = None  # [T] where each path token came from (a combined drafter); None: its own
    skipped: str | None = None  # why nothing was offered (diagnostics)
    # Timings of the draft call this proposal came from, shared with the other sequences in it:
    draft_ms: float = 0.0  # the block decode
    n_blocks: int = 1  # blocks (sequences) that decode carried
    inject_ms: float = 0.0  # KV injection of the rows the target committed since the last call
    inject_rows: int = 0
    setup_ms: float = 0.0  # this sequence's once-per-request start (the grammar drafter's parse), in draft_ms


class Drafter:
    """The base of every drafter (DFlash 2 and v1, prompt lookup, the grammar's spans, their
    combinations, test drafters). Its class attributes declare what the loop, the policy and
    prefix reuse ask of a drafter; a drafter sets those that differ. A drafter with nothing to keep
    between steps (prompt lookup, test drafters) overrides `propose` only."""

    name: str = "drafter"  # the mode that drafts with it (engine/speculative/params.py MODES)
    free: bool = False  # no model call: the loop asks for the longest path and prices what comes back
    source: str | None = None  # what its own path tokens count as (None: its name); a combined drafter's draft
    kind: DraftKind | None = None  # a DFlash draft's kind (gguf_tools/dflash/format.py); None: not a DFlash draft
    info: DraftInfo | None = None  # a DFlash draft's facts (DraftInfo: block size, top-k, taps); None otherwise
    follows_kv: bool = False  # it keeps a KV cache of its own in step with the target's (DFlash)

    @property
    def lattice(self) -> bool:
        """It proposes lattices for the select stage (a DFlash 2 draft); else it proposes its path itself."""
        return self.kind == DFLASH2

    @property
    def holder(self) -> "Drafter":
        """Whose KV a kept prefix is (engine/prefix.py): its own, or the draft a combined drafter drafts with."""
        return self

    def attach(self, target_ctx) -> None:
        """Called once before the target's first decode (e.g. to enable layer capture)."""

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        """A proposal of at most n_draft path tokens for each of `seqs`, in one draft pass where
        possible. `unary`: a drafter with a lattice also returns the draft's logit of every
        candidate (`Lattice.unary`), which the top1 selector needs; others ignore it."""
        raise NotImplementedError

    def observe(self, committed: list[tuple[int, int, int]]) -> None:
        """Right after a target decode: (seq_id, pos, batch_row) of each decoded token that is
        now committed (prompt chunks: all rows; verifies: the anchor and accepted tokens).
        Target layer features of those rows stay readable until the next target decode."""

    def keep_prefix(self, seq_id: int, n: int) -> bool:
        """The sequence's request ended and the next one may share its first `n` positions: keep
        what this drafter holds for them. False: it holds nothing the next request could use."""
        return False

    def forget(self, seq_id: int) -> None:
        """The sequence ended or was cancelled: drop its state (e.g. its draft KV cells)."""

    def close(self) -> None:
        """Free what the drafter holds (before the target context it points into)."""
