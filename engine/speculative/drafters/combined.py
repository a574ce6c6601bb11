"""Drafters combined in one proposal: the grammar's forced span, prompt lookup's copied span,
and DFlash 2's candidates for the rest (issue 24, part 2).

A work order's JSON alternates between text the schema fixes (keys, quotes, braces: the grammar
drafter's span) and values copied from the message (names, phone numbers: prompt lookup).
`GrammarLookupDrafter` chains the two: the lookup continues from the end of the forced span, as
if the span were already written, so one verify can carry `, "contact": "0912-345-678`. Both cost
no model call, so the loop asks for the longest path and the chooser prices what comes back.

`SpanDFlashDrafter` adds the draft: the span enters the DFlash 2 lattice as one more candidate
per position (span_lattice.py), weighted by how often that source's tokens were what the target
wrote, and the select stage's DP chooses between the span and the draft's 16 at each position.
"""

from __future__ import annotations

from ..params import COPY, DFLASH, GRAMMAR, GRAMMAR_LOOKUP, GRAMMAR_LOOKUP_DFLASH, LOOKUP
from .base import Drafter, Proposal, SeqView
from .grammar import GrammarDrafter
from .lookup import PromptLookupDrafter
from .span_lattice import merge_span

# P(a span token is what the target writes), before any is seen, where the draft's best guess is the
# same token (True) or another (False)
PRIOR = {(GRAMMAR, True): 0.95, (GRAMMAR, False): 0.8, (COPY, True): 0.8, (COPY, False): 0.6,
         (LOOKUP, True): 0.8, (LOOKUP, False): 0.3}
PRIOR_WEIGHT = 4.0
MEMORY = 400.0  # trials per source kept, so the estimate follows a change of use


class GrammarLookupDrafter(Drafter):
    name = GRAMMAR_LOOKUP
    free = True

    def __init__(self, grammar: GrammarDrafter, lookup: PromptLookupDrafter):
        self.grammar, self.lookup = grammar, lookup

    def span(self, view: SeqView, n_draft: int) -> tuple[list[int], list[str]]:
        """At most n_draft tokens: the forced span (with a copy field's continuation), then what the
        history repeats after it; and each token's source."""
        forced, sources = self.grammar.span(view, n_draft)
        copied = self.lookup.lookup(view.tokens + forced, n_draft - len(forced)) if len(forced) < n_draft else []
        return forced + copied, sources + [self.lookup.name] * len(copied)

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        out = []
        for s in seqs:
            tokens, sources = self.span(s, n_draft)
            out.append(Proposal(tokens, sources=sources, setup_ms=self.grammar.setup_ms))
        return out

    def forget(self, seq_id: int) -> None:
        self.grammar.forget(seq_id)

    def close(self) -> None:
        self.grammar.close()


class SourceRecord:
    """How often a span source's token was the one the target committed, given the span's
    earlier tokens were, kept apart for where the draft agreed and where it did not (a Beta
    estimate around PRIOR). Where they disagree, one of them is wrong: the marginal rate of a
    lookup would overrule a draft that knows better."""

    def __init__(self):
        self.hits: dict[tuple[str, bool], float] = {}
        self.trials: dict[tuple[str, bool], float] = {}

    def rate(self, source: str, agrees: bool) -> float:
        key = (source, agrees)
        prior = PRIOR.get(key, 0.5)
        return (self.hits.get(key, 0.0) + prior * PRIOR_WEIGHT) / (self.trials.get(key, 0.0) + PRIOR_WEIGHT)

    def score(self, span: list[int], keys: list[tuple[str, bool]], committed: list[int]) -> None:
        """A span offered after some anchor, against the tokens committed after that anchor since."""
        for tok, key, got in zip(span, keys, committed):
            self.trials[key] = self.trials.get(key, 0.0) + 1.0
            hit = tok == got
            self.hits[key] = self.hits.get(key, 0.0) + hit
            if self.trials[key] > MEMORY:
                self.hits[key] *= MEMORY / self.trials[key]
                self.trials[key] = MEMORY
            if not hit:
                return


class SpanDFlashDrafter(Drafter):
    """The grammar+lookup span and a DFlash 2 draft in one lattice. The draft's KV is the
    DFlash drafter's own: observation and prefix keeping go to it (`holder`)."""

    name = GRAMMAR_LOOKUP_DFLASH
    source = DFLASH  # what the draft's own candidates are counted as
    follows_kv = True

    def __init__(self, spans: GrammarLookupDrafter, draft: Drafter):
        self.spans, self.draft = spans, draft
        self.kind, self.info = draft.kind, draft.info
        self.record = SourceRecord()
        self._offered: dict[int, tuple[int, list[int], list]] = {}  # seq_id -> (at, span, record keys)

    @property
    def holder(self) -> Drafter:
        return self.draft  # engine/prefix.py: who keeps the KV a later request may reuse

    def propose(self, seqs: list[SeqView], n_draft: int, unary: bool = False) -> list[Proposal]:
        spans, setup = [], []
        for s in seqs:
            past = self._offered.pop(s.seq_id, None)
            if past is not None and past[0] <= len(s.tokens):
                self.record.score(past[1], past[2], s.tokens[past[0]:])
            spans.append(self.spans.span(s, n_draft))
            setup.append(self.spans.grammar.setup_ms)
        # a forced span that fills the whole path needs no draft call for its sequence (a copied one
        # does: the draft may know better)
        need = [i for i, (tokens, sources) in enumerate(spans)
                if len(tokens) < n_draft or any(src != self.spans.grammar.name for src in sources)]
        drafted = dict(zip(need, self.draft.propose([seqs[i] for i in need], n_draft, unary))) if need else {}
        out = []
        for i, (tokens, sources) in enumerate(spans):
            prop = drafted.get(i)
            if prop is None or prop.lattice is None:  # no lattice (skipped, or a v1 draft): the span, else its path
                out.append(Proposal(tokens, sources=sources) if tokens or prop is None else prop)
                agrees = [True] * len(tokens)  # nothing to disagree with
            else:
                agrees = []
                if tokens:
                    prop.lattice, agrees = merge_span(prop.lattice, tokens,
                                                      lambda j, agree: self.record.rate(sources[j], agree))
                    prop.lattice.origin = sources
                out.append(prop)
            out[-1].setup_ms = setup[i]
            if agrees:
                self._offered[seqs[i].seq_id] = (len(seqs[i].tokens), tokens[:len(agrees)],
                                                 list(zip(sources, agrees)))
        return out

    def observe(self, committed) -> None:
        self.draft.observe(committed)

    def keep_prefix(self, seq_id: int, n: int) -> bool:
        self._offered.pop(seq_id, None)
        self.spans.forget(seq_id)
        return self.draft.keep_prefix(seq_id, n)

    def forget(self, seq_id: int) -> None:
        self._offered.pop(seq_id, None)
        self.spans.forget(seq_id)
        self.draft.forget(seq_id)

    def close(self) -> None:
        self.spans.close()
