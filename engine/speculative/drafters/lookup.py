"""Prompt lookup: a drafter with no model. If the last few tokens occurred earlier in
the prompt or output, propose what followed them there.

Copy-heavy work (extracting fields from a pasted order, quoting an email, editing
code) repeats long spans of the prompt, and there this is nearly free tau. It keeps
no state: each proposal searches the sequence's tokens afresh (a few vectorised
NumPy comparisons per step, microseconds for a few thousand tokens).
Not a suffix automaton or an n-gram table: simple is fast enough at these lengths.
"""

from __future__ import annotations

import numpy as np

from ..params import LOOKUP
from .base import Drafter, Proposal, SeqView


class PromptLookupDrafter(Drafter):
    name = LOOKUP

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        return [Proposal(self.lookup(s.tokens, n_draft)) for s in seqs]

    def lookup(self, tokens: list[int], n_draft: int) -> list[int]:
        """The continuation of the most recent earlier match of the longest suffix n-gram."""
        if n_draft <= 0 or len(tokens) < 2:
            return []
        arr = np.asarray(tokens, dtype=np.int32)  # [L]
        L = len(arr)
        for n in range(min(self.max_ngram, L - 1), self.min_ngram - 1, -1):
            suffix = arr[L - n:]  # [n]
            # candidate starts i (i + n <= L - 1, so at least one token follows the match)
            starts = np.flatnonzero(arr[: L - n] == suffix[0])  # [M]
            for k in range(1, n):
                starts = starts[arr[starts + k] == suffix[k]]
            if starts.size:
                i = int(starts[-1])  # the most recent occurrence predicts best
                return arr[i + n: i + n + n_draft].tolist()
        return []
