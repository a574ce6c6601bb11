"""Rollback on real recurrent and sliding-window memory (engine/llama/context.py): the tiny hybrid
qwen35 (Gated DeltaNet state with llama.cpp's per-sequence snapshots) and the tiny gemma4 (a
32-token sliding window, full-size cache). What the engine allows is exact; what it refuses is
refused before llama.cpp could silently get it wrong.
"""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.speculative import exactness
from engine.speculative.exactness import Exactness, judge
from gguf_tools.random_targets import write_random_target

GREEDY = SamplingParams(temperature=0)
TOKENS = [(37 * i + 5) % 49152 for i in range(120)]


def tiny(tmp_path_factory, model_path, arch: str):
    m = Model(write_random_target(tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf", arch, tokenizer_from=model_path))
    yield m
    m.close()


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory, model_path):
    yield from tiny(tmp_path_factory, model_path, "qwen35")


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory, model_path):
    yield from tiny(tmp_path_factory, model_path, "gemma4")


def context(model, rollback=7) -> Context:
    return Context(model, ContextConfig(n_ctx_seq=256, n_seq=2, n_batch=64, n_threads=2, rollback=rollback))


def decode(ctx: Context, tokens: list[int], start: int, seq_id: int = 0) -> np.ndarray:
    """Decode tokens at positions start.. in one batch; the last one's logits [V]."""
    ctx.batch.clear()
    for j, t in enumerate(tokens):
        ctx.batch.add(t, start + j, seq_id, logits=j == len(tokens) - 1)
    ctx.decode(ctx.batch)
    return np.array(ctx.logits([len(tokens) - 1])[0])


def plain(ctx: Context, tokens: list[int]) -> np.ndarray:
    """The last token's logits after decoding `tokens` from scratch, the prefix in one batch."""
    ctx.forget(0)
    decode(ctx, tokens[:-1], 0)
    return decode(ctx, tokens[-1:], len(tokens) - 1)


def test_a_hybrid_model_keeps_its_snapshots_and_speculates(qwen35):
    ctx = context(qwen35)
    try:
        assert qwen35.recurrent and ctx.rollback == 7
        assert judge(ctx, on_gpu=False, block=8).exact
    finally:
        ctx.close()


def test_without_snapshots_it_is_refused_and_no_setting_overrides(qwen35, monkeypatch, tmp_path):
    ctx = context(qwen35, rollback=0)
    try:
        got = judge(ctx, on_gpu=False, block=8)
        assert not got.exact and not got.possible
        assert "keeps 0 of the 7 state snapshots" in got.why and "plain speed" in got.why
    finally:
        ctx.close()
    monkeypatch.setattr("engine.speculative.setup.judge",
                        lambda *a, **k: Exactness(False, "no rollback", possible=False))
    eng = Engine(Model(qwen35.path), EngineConfig(n_ctx=256, n_parallel=1, n_threads=2, spec_inexact=True))
    try:
        assert not eng.speculation.enabled  # spec_inexact accepts other numerics, never a broken rollback
    finally:
        eng.close()


def test_a_rollback_inside_the_last_decode_is_exact_at_every_depth(qwen35):
    ctx = context(qwen35)
    try:
        for depth in range(1, 8):
            ref = plain(ctx, TOKENS[:21])  # 20 tokens, then token 20
            ctx.forget(0)
            decode(ctx, TOKENS[:10], 0)
            decode(ctx, TOKENS[10:20] + TOKENS[50:50 + depth], 10)  # a verify whose last `depth` rows are rejected
            assert ctx.forget(0, 20) and ctx.pos_max(0) == 19
            assert np.array_equal(decode(ctx, TOKENS[20:21], 20), ref), f"depth {depth}"
    finally:
        ctx.close()


def test_a_removal_past_the_last_decode_is_refused_where_llama_cpp_would_read_a_stale_snapshot(qwen35):
    ctx = context(qwen35)
    try:
        ref = plain(ctx, TOKENS[:19])
        ctx.forget(0)
        decode(ctx, TOKENS[:18], 0)
        decode(ctx, TOKENS[18:19], 18)
        decode(ctx, TOKENS[19:20], 19)  # the last decode holds one row: no snapshot of position 18
        assert not ctx.forget(0, 19)  # refused: the sequence is unchanged
        assert ctx.pos_max(0) == 19
        # llama.cpp alone checks only the depth: it says yes and restores a state from another time
        assert llama_cpp.llama_memory_seq_rm(ctx.memory, 0, 18, -1)
        assert not np.array_equal(decode(ctx, TOKENS[18:19], 18), ref)
    finally:
        ctx.close()


def test_one_rollback_per_decode(qwen35):
    ctx = context(qwen35)
    try:
        ctx.forget(0)
        decode(ctx, TOKENS[:12], 0)
        assert ctx.forget(0, 10)  # rows 10, 11 rejected
        assert not ctx.forget(0, 8) and ctx.pos_max(0) == 9  # a second one would read a used snapshot
        assert ctx.forget(0, 10)  # nothing left to drop there: fine
    finally:
        ctx.close()


def test_prefix_reuse_on_a_hybrid_model_keeps_only_what_is_exact(qwen35):
    cfg = EngineConfig(n_ctx=256, n_parallel=2, n_threads=2)  # the idle cost measurement runs on seq 1
    eng, fresh = Engine(Model(qwen35.path), cfg), Engine(Model(qwen35.path), cfg)
    try:
        first = eng.complete(TOKENS[:30], sampling=GREEDY, max_tokens=8)
        longer = TOKENS[:30] + first.tokens[:-1] + TOKENS[60:70]  # extends all the cache holds
        got = eng.complete(longer, sampling=GREEDY, max_tokens=8)
        assert got.usage.cached_tokens == 30 + len(first.tokens) - 1
        assert got.tokens == fresh.complete(longer, sampling=GREEDY, max_tokens=8).tokens
        turn = longer + TOKENS[100:110]  # shares `longer` (the checkpoint at its end), not what followed it
        eng.complete(longer, sampling=GREEDY, max_tokens=8)
        got = eng.complete(turn, sampling=GREEDY, max_tokens=8)
        assert got.usage.cached_tokens == len(longer)  # the state copied at the end of that prompt
        assert got.tokens == fresh.complete(turn, sampling=GREEDY, max_tokens=8).tokens
        other = TOKENS[:20] + TOKENS[80:90]  # shares 20 tokens, less than any copy: decode it all
        got = eng.complete(other, sampling=GREEDY, max_tokens=8)
        assert got.usage.cached_tokens == 0
        assert got.tokens == fresh.complete(other, sampling=GREEDY, max_tokens=8).tokens
    finally:
        eng.close()
        fresh.close()


def test_a_sliding_window_cache_rolls_back_exactly_past_the_window(gemma4):
    assert gemma4.n_swa == 32
    ctx = context(gemma4)
    try:
        ref = plain(ctx, TOKENS[:41])
        ctx.forget(0)
        decode(ctx, TOKENS[:40], 0)
        decode(ctx, TOKENS[40:100], 40)  # 100 tokens: well past the window
        assert ctx.forget(0, 40)  # a full-size cache still holds positions 9..39
        assert np.array_equal(decode(ctx, TOKENS[40:41], 40), ref)
        assert exactness.rollback_refusal(ctx, depth=7) is None
    finally:
        ctx.close()
