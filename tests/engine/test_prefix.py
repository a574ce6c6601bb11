"""Prompt prefix reuse (engine/prefix.py): a request that shares a prompt prefix with the one
before it on the same sequence skips decoding that prefix, and writes exactly what a fresh
context would have written, plainly, with prompt lookup and with the DFlash 2 draft (whose
own KV keeps the same prefix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_CTX
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.params import SpecParams
from reference import greedy_reference

GREEDY = SamplingParams(temperature=0)
DRAFT = Path(__file__).resolve().parents[2] / "engine" / "drafts" / "smollm2-dflash2.gguf"
SYSTEM = ("You are the order desk of a small print shop. Answer briefly and politely. Our products: flyers, "
          "posters, banners, business cards, stickers, T-shirts and tote bags. We are open Monday to Saturday.")
QUESTIONS = ["Do you print stickers?", "When are you open?", "Can I get 200 business cards by Friday?"]
N = 40


def chat(eng, question: str, history: list[dict] | None = None) -> str:
    return eng.render_chat([{"role": "system", "content": SYSTEM}, *(history or []),
                            {"role": "user", "content": question}])


@pytest.fixture(scope="module")
def eng(model_path):
    e = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=2, n_threads=2, draft=str(DRAFT)))
    assert "dflash" in e.drafters, e.draft_error
    assert e.curve_ready.wait(120), "the verify-cost curve was not measured"  # auto mode needs it
    yield e
    e.close()


@pytest.fixture(scope="module")
def reference(model_path, eng):
    return {q: greedy_reference(model_path, eng.tokenize_prompt(chat(eng, q)), N) for q in QUESTIONS}


@pytest.mark.parametrize("mode", ["off", "lookup", "dflash"])
def test_a_shared_prefix_is_reused_and_changes_nothing(eng, reference, mode):
    spec = SpecParams(mode=mode, block=None if mode == "off" else 8)  # a fixed block: it always drafts
    first = eng.complete(chat(eng, QUESTIONS[0]), sampling=GREEDY, max_tokens=N, speculative=spec)
    assert first.tokens == reference[QUESTIONS[0]]
    for q in QUESTIONS[1:]:
        c = eng.complete(chat(eng, q), sampling=GREEDY, max_tokens=N, speculative=spec)
        assert c.tokens == reference[q], q
        n_prompt = len(eng.tokenize_prompt(chat(eng, q)))
        assert 40 < c.usage.cached_tokens < n_prompt  # the system prompt, not the question
    if mode == "dflash":  # the draft kept its own KV for the prefix: it still drafts and is accepted
        assert c.usage.speculation["mode"] == "dflash" and c.usage.speculation["tau"] > 1.2


def test_the_same_prompt_again_decodes_only_its_last_token(eng, reference):
    q = QUESTIONS[1]
    eng.complete(chat(eng, q), sampling=GREEDY, max_tokens=N)
    c = eng.complete(chat(eng, q), sampling=GREEDY, max_tokens=N)
    assert c.usage.cached_tokens == len(eng.tokenize_prompt(chat(eng, q))) - 1
    assert c.tokens == reference[q]


def test_a_second_turn_reuses_the_first_turn_and_its_answer(eng, model_path):
    first = eng.complete(chat(eng, QUESTIONS[2]), sampling=GREEDY, max_tokens=N)
    history = [{"role": "user", "content": QUESTIONS[2]}, {"role": "assistant", "content": first.text}]
    prompt = chat(eng, "And posters?", history)
    c = eng.complete(prompt, sampling=GREEDY, max_tokens=N, speculative=SpecParams(mode="lookup"))
    assert c.usage.cached_tokens > len(eng.tokenize_prompt(chat(eng, QUESTIONS[2])))
    assert c.tokens == greedy_reference(model_path, eng.tokenize_prompt(prompt), N)


def test_switching_drafters_between_requests_stays_exact(eng, reference):
    """dflash -> lookup -> dflash on the same prefix: the draft's KV was let go in between, so
    the third request decodes its prompt from the start (and drafts with a whole history)."""
    outs = [eng.complete(chat(eng, q), sampling=GREEDY, max_tokens=N, speculative=SpecParams(mode=m))
            for q, m in zip(QUESTIONS, ["dflash", "lookup", "dflash"])]
    assert [c.tokens for c in outs] == [reference[q] for q in QUESTIONS]
    assert outs[1].usage.cached_tokens > 0 and outs[2].usage.cached_tokens == 0


def test_a_cancelled_request_leaves_a_usable_prefix(eng, reference):
    h = eng.generate(chat(eng, QUESTIONS[0]), sampling=GREEDY, max_tokens=N)
    next(iter(h))
    h.cancel()
    for _ in h:
        pass
    c = eng.complete(chat(eng, QUESTIONS[1]), sampling=GREEDY, max_tokens=N)
    assert c.tokens == reference[QUESTIONS[1]]
