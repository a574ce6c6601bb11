"""Models whose memory cannot roll back rejected tokens never speculate, and never reuse a prefix
built on stale state: simulated on SmolLM2 by a memory that refuses to drop a tail (as llama.cpp's
recurrent memory does without rollback snapshots). Real recurrent and sliding-window targets:
test_rollback_memory.py.
"""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.llama.context import Context, ContextConfig
from engine.speculative.exactness import judge

GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def no_tail_removal(monkeypatch):
    """Context.forget as on recurrent memory: a partial removal is refused and changes nothing."""
    real = Context.forget

    def forget(self, seq_id, p0=-1):
        if p0 > 0 and self.pos_max(seq_id) >= p0:
            return False
        return real(self, seq_id, p0)

    monkeypatch.setattr(Context, "forget", forget)


def test_a_memory_that_cannot_drop_a_tail_keeps_speculation_off(model_path, no_tail_removal):
    eng = Engine.load(model_path, EngineConfig(n_ctx=512, n_parallel=1))
    try:
        assert not eng.speculation.exactness.exact and not eng.speculation.enabled
        why = eng.speculation.exactness.why
        assert "cannot remove rejected tokens" in why and "plain speed" in why
        prompt = "The order: 40 mugs, blue, printed with the shop logo. Deliver by Friday. Summary:"
        first = eng.complete(prompt, sampling=GREEDY, max_tokens=16)
        again = eng.complete(prompt + " Also", sampling=GREEDY, max_tokens=16)  # shares the first prompt
        assert again.usage.cached_tokens == 0  # no prefix kept on a memory that cannot trim it
        fresh = Engine.load(model_path, EngineConfig(n_ctx=512, n_parallel=1))
        try:
            assert fresh.complete(prompt + " Also", sampling=GREEDY, max_tokens=16).tokens == again.tokens
        finally:
            fresh.close()
        assert eng.complete(prompt, sampling=GREEDY, max_tokens=16).tokens == first.tokens
    finally:
        eng.close()


@pytest.fixture
def ctx(target_model):
    c = Context(target_model, ContextConfig(256, 1, 64, 2))  # its own: an engine's context belongs to its worker
    yield c
    c.close()


def test_smollm2_rolls_back_and_stays_exact(ctx):
    assert judge(ctx, on_gpu=False).exact  # full attention, a KV cache that drops tails
