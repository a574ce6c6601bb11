"""Greedy invariance with the DFlash 2 drafter in the engine: every selector, block 2/4/8,
one and four concurrent sequences. The draft is random (not the trained one that ships),
so acceptance is low; what is tested here is that drafting, injection, selection,
verification and rollback never change a single output token.
"""

from __future__ import annotations

import pytest

from conftest import TEST_CTX, dev_prompts, dflash_engine_on
from engine import Completion, Engine, EngineConfig, SamplingParams
from engine.speculative.params import MeasuredGain, SpecParams
from engine.speculative.state import DrafterRecord
from gguf_tools.dflash import write_random_draft

GREEDY = SamplingParams(temperature=0)
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def draft_engine(tmp_path_factory, model_path):
    draft = tmp_path_factory.mktemp("draft") / "random-dflash2.gguf"
    write_random_draft(draft, model_path, seed=3)
    with dflash_engine_on(model_path, draft) as eng:
        yield eng


@pytest.fixture(scope="module")
def prompts():
    return dev_prompts()[1::10]  # 6 prompts, one per category


@pytest.fixture(scope="module")
def plain(engine, prompts):
    """Plain greedy output of the engine without any draft (and without layer capture)."""
    return {p["id"]: engine.chat(p["messages"], sampling=GREEDY, max_tokens=MAX_TOKENS).tokens for p in prompts}


def run(eng, prompts, spec, concurrent, sampling=GREEDY):
    """Each prompt's completion under `spec`: all at once (concurrent sequences) or one by one."""
    if concurrent:
        hs = {p["id"]: eng.generate(eng.render_chat(p["messages"]), sampling=sampling, max_tokens=MAX_TOKENS,
                                    speculative=spec) for p in prompts}
        return {k: Completion.collect(iter(h)) for k, h in hs.items()}
    return {p["id"]: eng.chat(p["messages"], sampling=sampling, max_tokens=MAX_TOKENS, speculative=spec)
            for p in prompts}


def test_layer_capture_does_not_change_plain_output(draft_engine, prompts, plain):
    got = run(draft_engine, prompts, SpecParams(mode="off"), concurrent=True)
    assert {k: c.tokens for k, c in got.items()} == plain


@pytest.mark.parametrize("selector", ["walk", "viterbi", "dp", "top1"])
@pytest.mark.parametrize("block", [2, 4, 8])
def test_dflash_is_lossless_4seq(draft_engine, prompts, plain, selector, block):
    got = run(draft_engine, prompts, SpecParams(mode="dflash", selector=selector, block=block), concurrent=True)
    bad = {k: c.tokens for k, c in got.items() if c.tokens != plain[k]}
    assert not bad, f"speculative output differs for {sorted(bad)}"
    stats = [c.usage.speculation for c in got.values()]
    assert all(s.mode == "dflash" and s.selector == selector for s in stats)
    assert sum(s.verifies for s in stats) > 0


def test_dflash_is_lossless_1seq(draft_engine, prompts, plain):
    got = run(draft_engine, prompts, SpecParams(mode="dflash", block=8), concurrent=False)
    assert {k: c.tokens for k, c in got.items()} == plain


def test_auto_mode_is_lossless_and_reports(draft_engine, prompts, plain):
    draft_engine.speculation.policy.records["dflash"] = DrafterRecord()  # untried: auto gives the draft its chance
    got = run(draft_engine, prompts, SpecParams(mode="auto"), concurrent=True)
    assert {k: c.tokens for k, c in got.items()} == plain
    modes = [got[p["id"]].usage.speculation.mode for p in prompts]
    # the first four start together on the untried draft; later ones may already know better
    assert modes[:4] == ["dflash"] * 4 and set(modes) <= {"dflash", "lookup"}


def test_auto_leaves_a_useless_draft_for_lookup(draft_engine, prompts, plain):
    """A random draft is (almost) never accepted: once its record shows it, auto speculates
    with prompt lookup instead, still losslessly."""
    run(draft_engine, prompts, SpecParams(mode="dflash", block=8), concurrent=True)
    assert draft_engine.speculation.policy.records["dflash"].useless()
    # what lookup measured on this module's earlier requests is not the point here: auto would leave it
    # for plain decoding where it measured slower (test_chooser_lookup.py)
    draft_engine.speculation.policy.records["lookup"].gain = MeasuredGain()
    got = run(draft_engine, prompts, SpecParams(mode="auto"), concurrent=True)
    assert {k: c.tokens for k, c in got.items()} == plain
    assert all(c.usage.speculation.mode == "lookup" for c in got.values())


def test_a_sliding_window_draft_is_lossless_across_rollbacks(tmp_path, model_path, prompts, plain):
    """A draft with the published options (an 8-token window, logit scale and soft-cap): many
    blocks, each with rejected tokens to roll back from the draft's windowed KV cache; the
    output is still the plain output and the draft keeps drafting."""
    draft = tmp_path / "swa-dflash2.gguf"
    write_random_draft(draft, model_path, seed=5, sliding_window=8, logit_scale=0.5, final_logit_softcapping=10.0)
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2, draft=str(draft)))
    try:
        assert "dflash" in eng.drafters, eng.speculation.draft_error
        got = run(eng, prompts, SpecParams(mode="dflash", block=4), concurrent=True)
        assert {k: c.tokens for k, c in got.items()} == plain
        assert all(c.usage.speculation.verifies > 5 for c in got.values())
    finally:
        eng.close()
