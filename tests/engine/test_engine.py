"""The engine on the real SmolLM2 model: exactness, limits, stops, concurrency, cancellation."""

from __future__ import annotations

import time

import llama_cpp
import pytest

from conftest import TEST_CTX, dev_prompts
from engine import Completion, ContextLengthExceeded, InvalidRequest, SamplingParams

GREEDY = SamplingParams(temperature=0)
HELLO = [{"role": "user", "content": "Write two sentences about printing T-shirts."}]


def test_greedy_is_reproducible(engine):
    a = engine.chat(HELLO, sampling=GREEDY, max_tokens=40)
    b = engine.chat(HELLO, sampling=GREEDY, max_tokens=40)
    assert a.tokens == b.tokens and a.text == b.text and len(a.tokens) > 5


def test_greedy_matches_argmax_of_a_plain_one_sequence_decode(engine, model_path):
    """Tokens from the batched worker == argmax of logits from a fresh single-sequence context."""
    import numpy as np

    from engine.llama.context import Context, ContextConfig

    ours = engine.chat(HELLO, sampling=GREEDY, max_tokens=12)
    prompt = engine.tokenize_prompt(engine.render_chat(HELLO))
    ctx = Context(engine.model, ContextConfig(n_ctx_seq=512, n_seq=1, n_batch=512, n_threads=2))
    try:
        toks, pos = list(prompt), 0
        out = []
        for _ in range(len(ours.tokens)):
            ctx.batch.clear()
            for j, t in enumerate(toks):
                ctx.batch.add(t, pos + j, 0, logits=j == len(toks) - 1)
            ctx.decode(ctx.batch)
            pos += len(toks)
            logits = np.ctypeslib.as_array(ctx.logits_ptr(ctx.batch.n - 1), shape=(engine.model.n_vocab,))
            nxt = int(np.argmax(logits))
            out.append(nxt)
            toks = [nxt]
        assert out == ours.tokens
    finally:
        ctx.close()


def test_seed_makes_sampling_reproducible(engine):
    s = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)
    a = engine.chat(HELLO, sampling=s, max_tokens=30)
    b = engine.chat(HELLO, sampling=s, max_tokens=30)
    c = engine.chat(HELLO, sampling=SamplingParams(temperature=1.0, top_p=0.95, seed=99), max_tokens=30)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens  # a different seed draws differently (30 tokens at T=1)


def test_max_tokens_ends_with_length(engine):
    c = engine.complete("1, 2, 3, 4, 5, 6,", sampling=GREEDY, max_tokens=7)
    assert c.finish_reason == "length" and len(c.tokens) == 7 and c.usage.completion_tokens == 7


def test_stop_string_cuts_output_and_finishes_with_stop(engine):
    full = engine.complete("1, 2, 3, 4, 5, 6,", sampling=GREEDY, max_tokens=20)
    assert " 9" in full.text
    cut = engine.complete("1, 2, 3, 4, 5, 6,", sampling=GREEDY, max_tokens=20, stop=[" 9"])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index(" 9")]


def test_penalties_change_the_output(engine):
    plain = engine.complete("1, 2, 3, 4, 5, 6,", sampling=GREEDY, max_tokens=24)
    pen = engine.complete("1, 2, 3, 4, 5, 6,", max_tokens=24,
                          sampling=SamplingParams(temperature=0, frequency_penalty=2.0, presence_penalty=2.0))
    assert plain.tokens != pen.tokens


def test_prompt_beyond_context_is_refused_before_queueing(engine):
    with pytest.raises(ContextLengthExceeded) as e:
        engine.complete("word " * (TEST_CTX + 10), max_tokens=5)
    assert str(TEST_CTX) in e.value.message
    with pytest.raises(ContextLengthExceeded):
        engine.complete("short prompt", max_tokens=TEST_CTX)
    assert engine.stats().queued == 0


def test_bad_requests_are_refused(engine):
    with pytest.raises(InvalidRequest):
        engine.complete([engine.model.n_vocab + 5], max_tokens=3)
    with pytest.raises(InvalidRequest):
        engine.complete("hi", max_tokens=0)
    with pytest.raises(InvalidRequest):
        engine.chat([{"role": "wizard", "content": "hi"}])


def test_token_id_prompt_equals_text_prompt(engine):
    text = engine.render_chat(HELLO)
    ids = engine.tokenize_prompt(text)
    assert engine.complete(ids, sampling=GREEDY, max_tokens=10).tokens == \
        engine.complete(text, sampling=GREEDY, max_tokens=10).tokens


def test_chat_template_bos_is_not_doubled(engine):
    ids = engine.tokenize_prompt(engine.render_chat(HELLO))
    bos = engine.model.bos_id
    assert ids[:2] != [bos, bos]  # SmolLM2's BOS is <|im_start|>, which its template writes itself
    assert ids == engine.model.tokenize(engine.render_chat(HELLO), add_bos=False)


def test_concurrent_greedy_equals_sequential(engine):
    """4 sequences decoded together produce exactly what each produces alone."""
    prompts = dev_prompts()[::5][:12]
    alone = [engine.chat(p["messages"], sampling=GREEDY, max_tokens=p["max_tokens"]).tokens for p in prompts]
    handles = [engine.generate(engine.render_chat(p["messages"]), sampling=GREEDY, max_tokens=p["max_tokens"])
               for p in prompts]
    together = [Completion.collect(iter(h)).tokens for h in handles]
    diverged = [(p["id"], next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
                for p, a, b in zip(prompts, alone, together) if a != b]
    assert not diverged, f"(prompt, first differing position): {diverged}"


def _seq_cells(engine) -> list[int]:
    return [llama_cpp.llama_memory_seq_pos_max(engine.ctx.memory, s) for s in range(engine.ctx.n_seq)]


def test_cancel_stops_within_a_step_and_keeps_only_committed_kv(engine):
    h = engine.generate("1, 2, 3, 4, 5, 6,", sampling=GREEDY, max_tokens=1500)
    events = iter(h)
    for _ in range(5):
        next(events)
    t0 = time.perf_counter()
    h.cancel()
    last = None
    for ev in events:
        last = ev
    assert last.finish_reason == "cancelled"
    assert time.perf_counter() - t0 < 2.0
    assert last.usage.completion_tokens < 100
    deadline = time.time() + 2
    while engine.stats().active and time.time() < deadline:
        time.sleep(0.01)
    assert engine.stats().active == 0
    # a sequence's KV holds exactly the prefix its slot keeps for the next request, nothing more;
    # except that the idle cost measurement may take the last sequence (costs.FillIn, after a slot's
    # drop), and the cells are read first, so a fill-in that starts or ends meanwhile still matches
    cells = _seq_cells(engine)
    fill_seq = engine.ctx.n_seq - 1
    assert [c for q, (c, s) in enumerate(zip(cells, engine._slots))
            if c != len(s.cached) - 1 and not (q == fill_seq and not s.cached)] == []
    assert any(len(s.cached) > 5 for s in engine._slots)


def test_more_requests_than_slots_all_complete(engine):
    n = engine.ctx.n_seq * 2 + 1
    handles = [engine.generate(f"Count from {i}:", sampling=GREEDY, max_tokens=8) for i in range(n)]
    results = [Completion.collect(iter(h)) for h in handles]
    assert all(r.finish_reason in ("length", "stop") for r in results)
    alone = engine.complete("Count from 3:", sampling=GREEDY, max_tokens=8)
    assert results[3].tokens == alone.tokens


def test_a_small_context_still_speculates_and_answers(model_path):
    """The cost curve is measured inside the request's own sequence: with a 256-token context
    its history must shrink to fit (it used to overflow, kill the worker and hang the caller)."""
    from engine import Engine, EngineConfig

    eng = Engine.load(model_path, EngineConfig(n_ctx=256, n_parallel=1, n_threads=2))
    try:
        done = eng.chat([{"role": "user", "content": "Say hi."}], sampling=SamplingParams(temperature=0),
                        max_tokens=8)
        assert done.usage.completion_tokens > 0
    finally:
        eng.close()
