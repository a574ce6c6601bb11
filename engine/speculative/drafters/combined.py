"""Grammar and prompt lookup in one proposal: the forced span first, then what the message
repeats after it.

A work order's JSON alternates between text the schema fixes (keys, quotes, braces: the
grammar drafter's span) and values copied from the message (names, phone numbers: prompt
lookup). Each alone covers one kind; here the lookup continues from the end of the forced span,
as if the span were already written, so one verify can carry `, "contact": "0912-345-678`.
Both cost no model call, so the loop asks for the longest path and the chooser prices what
comes back.

Not yet here: DFlash 2's candidates in the same lattice (issue 24, part 2).
"""

from __future__ import annotations

from .base import Proposal, SeqView
from .grammar import GrammarDrafter
from .lookup import PromptLookupDrafter


class GrammarLookupDrafter:
    name = "grammar+lookup"
    free = True

    def __init__(self, grammar: GrammarDrafter, lookup: PromptLookupDrafter):
        self.grammar, self.lookup = grammar, lookup

    def attach(self, target_ctx) -> None:
        pass

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        out = []
        for s in seqs:
            span = self.grammar.span(s, n_draft)
            copied = self.lookup.lookup(s.tokens + span, n_draft - len(span)) if len(span) < n_draft else []
            out.append(Proposal(span + copied))
        return out

    def observe(self, committed) -> None:
        pass

    def forget(self, seq_id: int) -> None:
        self.grammar.forget(seq_id)

    def close(self) -> None:
        self.grammar.close()
