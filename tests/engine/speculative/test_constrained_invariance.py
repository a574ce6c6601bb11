"""Greedy invariance under a grammar: constrained speculative output == constrained plain output.

The grammar acts on the target's logits at every verify row, so drafted tokens it forbids
are rejected like any other disagreement. Drafters: prompt lookup, the trained DFlash 2
draft that ships with flashdesk, an oracle that knows the constrained answer and plants
a wrong token (usually one the grammar forbids) at every position in turn, and a drafter
of random tokens (nearly always forbidden). Plain constrained decoding itself is checked
against llama.cpp's own grammar sampler chain, token by token. At temperature > 0 the
constrained speculative sampler must draw like the constrained plain sampler (chi-square).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conftest import DRAFT, dev_prompts, dflash_engine_on
from reference import greedy_reference
from engine.speculative.drafters.base import Drafter
from engine import Completion, SamplingParams
from engine.grammar.schema import compile_response_format
from engine.speculative.drafters.base import Proposal
from engine.speculative.params import SpecParams
from test_spec_sampling import FixedPathDrafter, chi_square, critical

GREEDY = SamplingParams(temperature=0)
MAX_TOKENS = 96
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "items": {"type": "array", "items": {
            "type": "object",
            "properties": {"description": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["description", "quantity"]}},
        "priority": {"enum": ["low", "normal", "high", "urgent"]},
    },
    "required": ["customer", "items", "priority"],
}
CONSTRAINTS = {
    "json_object": compile_response_format({"type": "json_object"}),
    "order": compile_response_format({"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER_SCHEMA}}),
}
SYSTEM = "Extract the order from the message as JSON with the customer, the items and the priority."


def cases() -> list[tuple[str, str, list[dict]]]:
    """(case id, constraint name, messages): dev JSON-extraction prompts and two shop notes."""
    ps = [p for p in dev_prompts() if p.get("category") == "json_extraction"][:2] or dev_prompts()[:2]
    notes = ["Walk-in: Lin's Bakery wants 500 A5 flyers and 2 roll-up banners by Friday, urgent.",
             "老闆～我是巷口早餐店的阿芳 急!! 菜單 A3 10張 要護貝 明天早上就要"]
    out = [(p["id"], "json_object", p["messages"]) for p in ps]
    out += [(f"note{i}", "order", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": n}])
            for i, n in enumerate(notes)]
    return out


@pytest.fixture(scope="module")
def plain(dflash_engine):
    """case id -> (prompt tokens, constrained plain greedy output tokens)."""
    out = {}
    for cid, name, messages in cases():
        ids = dflash_engine.tokenize_prompt(dflash_engine.render_chat(messages))
        c = dflash_engine.complete(ids, sampling=GREEDY, max_tokens=MAX_TOKENS, grammar=CONSTRAINTS[name].grammar)
        out[cid] = (ids, c.tokens)
    return out


def run_all(eng, spec: SpecParams) -> dict[str, Completion]:
    hs = {cid: eng.generate(eng.render_chat(m), sampling=GREEDY, max_tokens=MAX_TOKENS, speculative=spec,
                            grammar=CONSTRAINTS[name].grammar) for cid, name, m in cases()}
    return {cid: Completion.collect(iter(h)) for cid, h in hs.items()}


def assert_invariant(plain, results):
    bad = {k: next((i for i, (a, b) in enumerate(zip(plain[k][1], r.tokens)) if a != b),
                   min(len(plain[k][1]), len(r.tokens))) for k, r in results.items() if r.tokens != plain[k][1]}
    assert not bad, f"case -> first differing token position: {bad}"


def test_plain_constrained_decoding_is_llama_cpps_grammar_sampler(model_path, plain):
    for cid, name, _ in cases()[1:3]:
        ids, got = plain[cid]
        assert got == greedy_reference(model_path, ids, MAX_TOKENS, CONSTRAINTS[name].grammar), cid


def test_constrained_output_is_valid(dflash_engine, plain):
    for cid, name, _ in cases():
        ids, tokens = plain[cid]
        text = dflash_engine.model.detokenize(tokens[:-1] if dflash_engine.model.is_eog(tokens[-1]) else tokens)
        if len(tokens) < MAX_TOKENS:  # closed before the limit: must be valid
            assert CONSTRAINTS[name].validate(text) == [], (cid, text)


@pytest.mark.parametrize("block", [2, 4, 8])
def test_lookup_is_lossless_under_a_grammar(dflash_engine, plain, block):
    results = run_all(dflash_engine, SpecParams(mode="lookup", block=block))
    assert_invariant(plain, results)
    assert sum(r.usage.speculation.verifies for r in results.values()) > 0


@pytest.mark.parametrize("selector", ["walk", "dp"])
def test_dflash_is_lossless_under_a_grammar(dflash_engine, plain, selector):
    results = run_all(dflash_engine, SpecParams(mode="dflash", selector=selector, block=8))
    assert_invariant(plain, results)
    stats = [r.usage.speculation for r in results.values()]
    assert sum(s.accepted for s in stats) > 0


@pytest.mark.parametrize("mode", ["grammar", "grammar+lookup"])
@pytest.mark.parametrize("block", [2, 4, 8])
def test_forced_spans_are_lossless(dflash_engine, plain, mode, block):
    """The grammar drafter (alone and with lookup after its span) proposes the text the grammar
    forces; the target accepts most of it and the output is plain constrained decoding's."""
    results = run_all(dflash_engine, SpecParams(mode=mode, block=block))
    assert_invariant(plain, results)
    stats = [r.usage.speculation for r in results.values()]
    # Where the grammar's forced text is tokenized as the model writes it, the target accepts most of
    # it. Pooled over every case this hung on the step schedule: in two of the four cases the
    # drafter's tokens never match the model's (0 accepted whatever the path length), and how many
    # of those it drafts depends on how the steps interleave (the CPU band's 16-row cap changed it).
    hit = [s for s in stats if s.accepted > 0]
    assert mode != "grammar" or (hit and sum(s.accepted for s in hit) > 0.5 * sum(s.drafted for s in hit))
    assert sum(s.accepted for s in stats) > 0


COPY_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"anyOf": [{"type": "string", "x-copy": True}, {"type": "null"}]},
        "items": {"type": "array", "items": {
            "type": "object",
            "properties": {"description": {"type": "string", "x-copy": True},
                           "quantity": {"type": "integer", "x-copy": True}},
            "required": ["description", "quantity"]}},
        "priority": {"enum": ["low", "normal", "high", "urgent"]},
    },
    "required": ["customer", "items", "priority"],
}
COPY_NOTES = ["Walk-in: Lin's Bakery wants 500 A5 flyers and 2 roll-up banners by Friday, urgent.",
              "Hi, this is Marco from Bellavista Pizzeria. Please print 1,200 menus on 250gsm matte, "
              "and 3 window posters. Call 0912-345-678 when ready.",
              "老闆～我是巷口早餐店的阿芳 急!! 菜單 A3 10張 要護貝 明天早上就要"]


@pytest.mark.parametrize("block", [4, 8])
def test_copy_fields_are_lossless(dflash_engine, block):
    """Copy fields (issue 52): the grammar drafter offers a copy's unique continuation in the message
    and where the value seems to end; whatever it guesses, every mode writes what plain constrained
    decoding writes, and the copied tokens are accepted."""
    copy_order = compile_response_format({"type": "json_schema", "json_schema": {"name": "o", "schema": COPY_SCHEMA}})
    runs, copied = {}, 0
    for mode in ("off", "grammar", "grammar+lookup", "grammar+lookup+dflash", "auto"):
        hs = [dflash_engine.generate(dflash_engine.render_chat([{"role": "system", "content": SYSTEM},
                                                                {"role": "user", "content": note}]),
                                     sampling=GREEDY, max_tokens=MAX_TOKENS, grammar=copy_order.grammar_for([note]),
                                     speculative=SpecParams(mode=mode, block=None if mode == "off" else block))
              for note in COPY_NOTES]
        runs[mode] = [Completion.collect(iter(h)) for h in hs]
        copied += sum((c.usage.speculation.committed_by_source.get("copy", 0) if c.usage.speculation else 0)
                      for c in runs[mode])
    for mode, got in runs.items():
        assert [c.tokens for c in got] == [c.tokens for c in runs["off"]], mode
    assert copied > 0, "no copied token was ever accepted"


class WrongTokenOracle(Drafter):
    """The constrained answer, with path token `(step % (n_draft + 1))` replaced by another id."""

    name = "grammar-oracle"

    def __init__(self):
        self.reset({})

    def reset(self, answers: dict[tuple, list[int]]) -> None:
        self.answers, self.steps = answers, 0

    def propose(self, seqs, n_draft, unary=False):
        out = []
        for s in seqs:
            prompt = next((p for p in self.answers if list(p) == s.tokens[:len(p)]), None)
            if prompt is None:
                out.append(Proposal([]))
                continue
            done = len(s.tokens) - len(prompt)
            path = list(self.answers[prompt][done:done + n_draft])
            self.steps += 1
            wrong = self.steps % (n_draft + 1)
            if wrong < len(path):
                path[wrong] = (path[wrong] + 7) % 49152
            out.append(Proposal(path))
        return out


class RandomDrafter(Drafter):
    name = "random-tokens"

    def __init__(self):
        self.rng = random.Random(5)

    def propose(self, seqs, n_draft, unary=False):
        return [Proposal([self.rng.randrange(49152) for _ in range(n_draft)]) for _ in seqs]


@pytest.fixture(scope="module")
def dflash_engine(model_path):
    """conftest's, with this module's drafters: they join before the engine starts, and each test
    gives them what it knows (the plain answers, a path)."""
    with dflash_engine_on(model_path, DRAFT, drafters=(WrongTokenOracle(), RandomDrafter(), FixedPathDrafter([]))) \
            as eng:
        yield eng


@pytest.mark.parametrize("block", [4, 8])
def test_rejection_at_every_position_under_a_grammar(dflash_engine, plain, block):
    dflash_engine.drafters["grammar-oracle"].reset({tuple(ids): out for ids, out in plain.values()})
    results = run_all(dflash_engine, SpecParams(mode="grammar-oracle", block=block))
    assert_invariant(plain, results)
    accepted_at = [r.usage.speculation.acceptance_by_position for r in results.values()]
    assert any(0 < x < 1 for a in accepted_at for x in a)


def test_forbidden_drafts_are_rejected_not_committed(dflash_engine, plain):
    results = run_all(dflash_engine, SpecParams(mode="random-tokens", block=4))
    assert_invariant(plain, results)


CLOSE_AT = 40  # max_tokens 64, the last 24 close the JSON: every case is cut mid-answer


@pytest.mark.parametrize("mode", ["off", "lookup", "dflash", "grammar-oracle"])
def test_closing_early_is_valid_and_lossless(dflash_engine, plain, mode):
    """close_within: from output token CLOSE_AT on, the grammar's closers win; the answer ends
    complete and valid, and speculation closes at exactly the same tokens."""
    if mode == "grammar-oracle":
        dflash_engine.drafters["grammar-oracle"].reset({tuple(ids): out for ids, out in plain.values()})
    runs = {}
    for m in ("off", mode):
        hs = {cid: dflash_engine.generate(dflash_engine.render_chat(msgs), sampling=GREEDY, max_tokens=64,
                                          speculative=SpecParams(mode=m, block=4 if m != "off" else None),
                                          grammar=CONSTRAINTS[name].grammar, close_within=64 - CLOSE_AT)
              for cid, name, msgs in cases()}
        runs[m] = {cid: Completion.collect(iter(h)) for cid, h in hs.items()}
    for cid, name, _ in cases():
        c = runs["off"][cid]
        assert c.finish_reason == "stop" and CONSTRAINTS[name].validate(c.text) == [], (cid, c.text)
        assert c.tokens[:CLOSE_AT] == plain[cid][1][:CLOSE_AT]  # the same answer up to the closing point
        assert runs[mode][cid].tokens == c.tokens, cid
    assert any(c.usage.closed_early for c in runs["off"].values())


COLOURS = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue", "yellow", "black"]}},
           "required": ["colour"]}
PROMPT = "<|im_start|>user\nName a colour, as JSON.<|im_end|>\n<|im_start|>assistant\n"
N = 300


def colour_draws(eng, spec: SpecParams, grammar: str, seed0: int, wave: int = 4) -> Counter:
    """N seeded draws, `wave` at a time (the engine's slots): each draw has its own seed and the
    rows of a batch decode like single tokens, so this is the same distribution in fewer steps."""
    out = Counter()
    for start in range(0, N, wave):
        handles = [eng.generate(PROMPT, max_tokens=12, speculative=spec, grammar=grammar,
                                sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed0 + i))
                   for i in range(start, min(N, start + wave))]
        for h in handles:
            out[Completion.collect(iter(h)).text] += 1
    return out


def test_constrained_sampling_matches_plain_constrained_sampling(dflash_engine):
    grammar = compile_response_format({"type": "json_schema", "json_schema": {"name": "c", "schema": COLOURS}}).grammar
    greedy = dflash_engine.complete(PROMPT, max_tokens=12, sampling=GREEDY, grammar=grammar).tokens
    dflash_engine.drafters["fixed"].path = greedy[1:]
    a = colour_draws(dflash_engine, SpecParams(mode="off"), grammar, 0)
    b = colour_draws(dflash_engine, SpecParams(mode="fixed", block=8), grammar, 50_000)
    assert len(a) >= 2, f"the target must spread its choices for this test to mean anything: {a}"
    stat, dof = chi_square(a, b)
    assert stat < critical(dof), f"chi2 {stat:.1f} ({dof} dof); plain {a}, spec {b}"
