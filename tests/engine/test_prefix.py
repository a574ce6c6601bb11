"""Prompt prefix reuse (engine/prefix.py): a request that shares a prompt prefix with the one
before it on the same sequence skips decoding that prefix, and writes exactly what a fresh
context would have written, plainly, with prompt lookup and with the DFlash 2 draft (whose
own KV keeps the same prefix)."""

from __future__ import annotations

import pytest

from engine import SamplingParams
from engine.speculative.params import SpecParams
from engine.worker import Engine, EngineConfig
from conftest import DRAFT
from reference import greedy_reference

GREEDY = SamplingParams(temperature=0)
SYSTEM = ("You are the order desk of a small print shop. Answer briefly and politely. Our products: flyers, "
          "posters, banners, business cards, stickers, T-shirts and tote bags. We are open Monday to Saturday.")
QUESTIONS = ["Do you print stickers?", "When are you open?", "Can I get 200 business cards by Friday?"]
N = 40


def chat(eng, question: str, history: list[dict] | None = None) -> str:
    return eng.render_chat([{"role": "system", "content": SYSTEM}, *(history or []),
                            {"role": "user", "content": question}])


@pytest.fixture(scope="module")
def reference(model_path, dflash_engine):
    return {q: greedy_reference(model_path, dflash_engine.tokenize_prompt(chat(dflash_engine, q)), N)
            for q in QUESTIONS}


@pytest.mark.parametrize("mode", ["off", "lookup", "dflash"])
def test_a_shared_prefix_is_reused_and_changes_nothing(dflash_engine, reference, mode, model_path):
    spec = SpecParams(mode=mode, block=None if mode == "off" else 8)  # a fixed block: it always drafts
    first = dflash_engine.complete(chat(dflash_engine, QUESTIONS[0]), sampling=GREEDY, max_tokens=N, speculative=spec)
    assert first.tokens == reference[QUESTIONS[0]]
    for q in QUESTIONS[1:]:
        c = dflash_engine.complete(chat(dflash_engine, q), sampling=GREEDY, max_tokens=N, speculative=spec)
        assert c.tokens == reference[q], q
        n_prompt = len(dflash_engine.tokenize_prompt(chat(dflash_engine, q)))
        assert 40 < c.usage.cached_tokens < n_prompt  # the system prompt, not the question
    if mode == "dflash":  # the draft kept its own KV for the prefix: it drafts as it would on a fresh context
        assert c.usage.speculation.mode == "dflash"
        fresh = Engine.load(model_path, EngineConfig(n_ctx=1024, n_parallel=1, n_threads=2, draft=str(DRAFT)))
        try:
            f = fresh.complete(chat(fresh, QUESTIONS[-1]), sampling=GREEDY, max_tokens=N, speculative=spec)
        finally:
            fresh.close()
        assert f.usage.cached_tokens == 0 and f.tokens == c.tokens
        assert c.usage.speculation.tau == f.usage.speculation.tau > 1.0  # same drafts, same acceptance


def test_the_same_prompt_again_decodes_only_its_last_token(dflash_engine, reference):
    q = QUESTIONS[1]
    dflash_engine.complete(chat(dflash_engine, q), sampling=GREEDY, max_tokens=N)
    c = dflash_engine.complete(chat(dflash_engine, q), sampling=GREEDY, max_tokens=N)
    assert c.usage.cached_tokens == len(dflash_engine.tokenize_prompt(chat(dflash_engine, q))) - 1
    assert c.tokens == reference[q]


def test_a_second_turn_reuses_the_first_turn_and_its_answer(dflash_engine, model_path):
    first = dflash_engine.complete(chat(dflash_engine, QUESTIONS[2]), sampling=GREEDY, max_tokens=N)
    history = [{"role": "user", "content": QUESTIONS[2]}, {"role": "assistant", "content": first.text}]
    prompt = chat(dflash_engine, "And posters?", history)
    c = dflash_engine.complete(prompt, sampling=GREEDY, max_tokens=N, speculative=SpecParams(mode="lookup"))
    assert c.usage.cached_tokens > len(dflash_engine.tokenize_prompt(chat(dflash_engine, QUESTIONS[2])))
    assert c.tokens == greedy_reference(model_path, dflash_engine.tokenize_prompt(prompt), N)


def test_switching_drafters_between_requests_stays_exact(dflash_engine, reference):
    """dflash -> lookup -> dflash on the same prefix: the draft's KV was let go in between, so
    the third request decodes its prompt from the start (and drafts with a whole history)."""
    outs = [dflash_engine.complete(chat(dflash_engine, q), sampling=GREEDY, max_tokens=N,
                                   speculative=SpecParams(mode=m))
            for q, m in zip(QUESTIONS, ["dflash", "lookup", "dflash"])]
    assert [c.tokens for c in outs] == [reference[q] for q in QUESTIONS]
    assert outs[1].usage.cached_tokens > 0 and outs[2].usage.cached_tokens == 0


def test_a_cancelled_request_leaves_a_usable_prefix(dflash_engine, reference):
    h = dflash_engine.generate(chat(dflash_engine, QUESTIONS[0]), sampling=GREEDY, max_tokens=N)
    next(iter(h))
    h.cancel()
    for _ in h:
        pass
    c = dflash_engine.complete(chat(dflash_engine, QUESTIONS[1]), sampling=GREEDY, max_tokens=N)
    assert c.tokens == reference[QUESTIONS[1]]
