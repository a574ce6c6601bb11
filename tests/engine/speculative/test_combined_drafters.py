"""Drafters combined in one proposal (issue 24): the grammar's forced span, prompt lookup's copied
span and the DFlash 2 draft's lattice, verified under the request's grammar.

Greedy invariance with the combined drafter at blocks 2/4/8 and both selectors, 4 sequences at
once and 1 at a time; an oracle that plants errors inside forced spans (the same text, split into
other tokens) and inside copied spans (another token), alone and merged into the draft's lattice;
the committed-token counts per source; and at temperature > 0 a chi-square test under a grammar
with the grammar drafter and the combined one. The cases and the plain answers are
test_constrained_invariance's.
"""

from __future__ import annotations

import pytest

from conftest import DRAFT, dflash_engine_on
from engine import Completion
from engine.speculative.drafters.combined import GrammarLookupDrafter, SpanDFlashDrafter
from engine.speculative.params import SpecParams
from engine.grammar.schema import compile_response_format
from test_constrained_invariance import (COLOURS, CONSTRAINTS, GREEDY, MAX_TOKENS, assert_invariant,  # noqa: F401
                                         cases, colour_draws, plain, run_all)
from test_spec_sampling import chi_square, critical

COMBINED = "grammar+lookup+dflash"


def sources_add_up(results: dict[str, Completion]) -> dict[str, int]:
    """Every committed token after the first is counted once, by who wrote it."""
    total: dict[str, int] = {}
    for cid, r in results.items():
        by = r.usage.speculation.committed_by_source
        assert sum(by.values()) == len(r.tokens) - 1, (cid, by, len(r.tokens))
        for k, v in by.items():
            total[k] = total.get(k, 0) + v
    return total


@pytest.mark.parametrize("block,selector", [(2, "walk"), (4, "dp"), (8, "walk"), (8, "dp")])
def test_the_combined_proposal_is_lossless(dflash_engine, plain, block, selector):  # noqa: F811
    results = run_all(dflash_engine, SpecParams(mode=COMBINED, block=block, selector=selector))
    assert_invariant(plain, results)
    total = sources_add_up(results)
    assert total.get("grammar", 0) > 0 and total.get("dflash", 0) > 0, total


def test_one_sequence_at_a_time(dflash_engine, plain):  # noqa: F811
    results = {}
    for cid, name, m in cases():
        results[cid] = dflash_engine.complete(dflash_engine.render_chat(m), sampling=GREEDY, max_tokens=MAX_TOKENS,
                                              speculative=SpecParams(mode=COMBINED, block=4),
                                              grammar=CONSTRAINTS[name].grammar)
    assert_invariant(plain, results)
    sources_add_up(results)


def test_auto_combines_for_constrained_requests(dflash_engine, plain):  # noqa: F811
    results = run_all(dflash_engine, SpecParams(mode="auto"))
    assert_invariant(plain, results)
    used = {r.usage.speculation.mode for r in results.values() if r.usage.speculation}
    assert used and used <= {COMBINED, "grammar+lookup"}, used


class PlantedSpans(GrammarLookupDrafter):
    """The real forced and copied spans with one error planted per proposal, at a rotating
    position: a forced token is replaced by the same text split in two (the grammar allows it,
    the target would not write it), a copied one by another token."""

    name = "planted"

    def __init__(self, model, spans: GrammarLookupDrafter):
        super().__init__(spans.grammar, spans.lookup)
        self.model, self.calls, self.planted = model, 0, {"grammar": 0, "lookup": 0}

    def span(self, view, n_draft):
        tokens, sources = super().span(view, n_draft)
        self.calls += 1
        at = self.calls % (n_draft + 1)
        if at >= len(tokens):
            return tokens, sources
        piece = self.model.piece(tokens[at])
        if sources[at] == "grammar" and len(piece) >= 2 and piece.isascii():
            split = [t for part in (piece[:1], piece[1:])
                     for t in self.model.tokenize(part.decode(), add_bos=False, special=False)]
            if split == [tokens[at]] or not split:
                return tokens, sources
            tokens = tokens[:at] + split + tokens[at + 1:]
            sources = sources[:at] + ["grammar"] * len(split) + sources[at + 1:]
        else:
            tokens = tokens[:at] + [(tokens[at] + 7) % self.model.n_vocab] + tokens[at + 1:]
        self.planted[sources[at]] += 1
        return tokens[:n_draft], sources[:n_draft]


def planted_spans(model, have) -> PlantedSpans:
    return PlantedSpans(model, have["grammar+lookup"])  # free, as grammar+lookup: the longest path, priced after


def planted_with_draft(model, have) -> SpanDFlashDrafter:
    drafter = SpanDFlashDrafter(planted_spans(model, have), have["dflash"])
    drafter.name = "planted+dflash"
    drafter.record.rate = lambda source, agrees: 0.99  # the DP trusts the spans: the errors get verified
    return drafter


@pytest.fixture(scope="module")
def dflash_engine(model_path):
    """conftest's, with the planted drafters (made from the engine's own, before it starts)."""
    with dflash_engine_on(model_path, DRAFT, drafters=(planted_spans, planted_with_draft)) as eng:
        yield eng


@pytest.mark.parametrize("with_draft", [False, True])
def test_errors_planted_in_forced_and_copied_spans_are_rejected(dflash_engine, plain, with_draft):  # noqa: F811
    name = "planted+dflash" if with_draft else PlantedSpans.name
    planted = dflash_engine.drafters[name].spans if with_draft else dflash_engine.drafters[name]
    results = run_all(dflash_engine, SpecParams(mode=name, block=8))
    assert_invariant(plain, results)
    assert planted.planted["grammar"] > 0 and planted.planted["lookup"] > 0, planted.planted
    positions = [x for r in results.values() for x in r.usage.speculation.acceptance_by_position]
    assert any(0 < x < 1 for x in positions)


@pytest.fixture(scope="module")
def colour_grammar():
    return compile_response_format({"type": "json_schema", "json_schema": {"name": "c", "schema": COLOURS}}).grammar


@pytest.fixture(scope="module")
def plain_colours(dflash_engine, colour_grammar):
    return colour_draws(dflash_engine, SpecParams(mode="off"), colour_grammar, 0)


@pytest.mark.parametrize("mode", ["grammar", COMBINED])
def test_sampling_under_a_grammar_with_forced_spans(dflash_engine, colour_grammar, plain_colours, mode):
    """At T > 0 the grammar drafter's point-mass spans, and the combined lattice's drawn paths,
    leave the distribution of answers plain constrained sampling's."""
    a = plain_colours
    b = colour_draws(dflash_engine, SpecParams(mode=mode, block=8), colour_grammar, 50_000)
    assert len(a) >= 2, f"the target must spread its choices for this test to mean anything: {a}"
    stat, dof = chi_square(a, b)
    assert stat < critical(dof), f"chi2 {stat:.1f} ({dof} dof); plain {a}, {mode} {b}"


def test_a_kept_prefix_serves_dflash_and_the_combined_drafter(dflash_engine, plain):  # noqa: F811
    """Both draft with the same DFlash KV, so a prompt kept by one is reused by the other."""
    cid, name, messages = cases()[2]
    prompt = dflash_engine.render_chat(messages)
    for i, mode in enumerate(("dflash", COMBINED, "dflash", COMBINED)):
        c = dflash_engine.complete(prompt, sampling=GREEDY, max_tokens=MAX_TOKENS, grammar=CONSTRAINTS[name].grammar,
                                   speculative=SpecParams(mode=mode, block=4))
        assert c.tokens == plain[cid][1], mode
        assert i == 0 or c.usage.cached_tokens > 0, (i, mode)
