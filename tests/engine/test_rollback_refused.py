"""A real hybrid recurrent model the pinned llama.cpp cannot roll back: the tiny random qwen3next
(Gated DeltaNet layers beside attention; `llm_arch_supports_rs_rollback` leaves the arch out, so
llama.cpp clamps its state snapshots to 0). The engine must refuse speculation with the reason,
whatever the config or the request asks, answer exactly as plain greedy decoding, and never build
a reused prefix on recurrent state it cannot trim. The simulated case on SmolLM2:
test_rollback_guard.py; architectures that do roll back: test_rollback_memory.py.
"""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.params import SpecParams
from gguf_tools.dflash import write_random_draft
from gguf_tools.random_targets import REFUSED, architectures, write_random_target

GREEDY = SamplingParams(temperature=0)
N = 24
PROMPT = "The order: 40 mugs, blue, printed with the shop logo. Deliver by Friday. Summary:"
CONFIG = dict(n_ctx=512, n_parallel=2, n_threads=2)


@pytest.fixture(scope="module")
def target(tmp_path_factory, model_path):
    return write_random_target(tmp_path_factory.mktemp("q3n") / "tiny-qwen3next.gguf", "qwen3next",
                               tokenizer_from=model_path)


@pytest.fixture(scope="module")
def reference(target):
    """Plain greedy tokens for PROMPT and for PROMPT + " Also", each on a fresh engine (no prefix
    reuse can touch them), with speculation switched off by the config."""
    out = {}
    for prompt in (PROMPT, PROMPT + " Also"):
        eng = Engine.load(str(target), EngineConfig(**CONFIG, spec_mode="off"))
        try:
            out[prompt] = eng.complete(prompt, sampling=GREEDY, max_tokens=N).tokens
        finally:
            eng.close()
    return out


def no_verifies(completion) -> bool:
    spec = completion.usage.speculation
    return spec is None or spec.verifies == 0


def test_it_is_kept_out_of_the_invariance_architectures():
    assert "qwen3next" in REFUSED
    assert "qwen3next" not in architectures() and "qwen3next" in architectures(include_refused=True)


def test_speculation_is_refused_with_the_reason(target):
    eng = Engine.load(str(target), EngineConfig(**CONFIG))
    try:
        assert eng.speculation.exactness.exact is False and eng.speculation.enabled is False
        why = eng.speculation.exactness.why
        assert "recurrent layers" in why and "snapshots" in why and "plain speed" in why, why
    finally:
        eng.close()


def test_spec_inexact_cannot_turn_it_on(target):
    eng = Engine.load(str(target), EngineConfig(**CONFIG, spec_inexact=True))
    try:
        assert eng.speculation.enabled is False and eng.speculation.exactness.exact is False
    finally:
        eng.close()


def test_a_request_for_speculation_answers_plainly_and_prefixes_stay_exact(target, reference):
    assert len(set(reference[PROMPT])) > 3  # the random model writes varied text, so equality means something
    eng = Engine.load(str(target), EngineConfig(**CONFIG))
    try:
        first = eng.complete(PROMPT, sampling=GREEDY, max_tokens=N, speculative=SpecParams(mode="lookup", block=4))
        assert first.tokens == reference[PROMPT] and no_verifies(first)
        # shares the first prompt: whatever the slot kept of it must not be stale recurrent state
        again = eng.complete(PROMPT + " Also", sampling=GREEDY, max_tokens=N,
                             speculative=SpecParams(mode="lookup", block=4))
        assert again.tokens == reference[PROMPT + " Also"] and no_verifies(again)
        repeat = eng.complete(PROMPT, sampling=GREEDY, max_tokens=N)
        assert repeat.tokens == reference[PROMPT] and no_verifies(repeat)
    finally:
        eng.close()


def test_a_dflash_draft_loads_but_the_engine_answers_plainly(target, reference, tmp_path):
    draft = tmp_path / "draft-dflash2.gguf"
    write_random_draft(draft, target, seed=1, kind="dflash2", block_size=8, n_layer=1, selector_top_k=4,
                       selector_rank=8)
    eng = Engine.load(str(target), EngineConfig(**CONFIG, draft=str(draft)))
    try:
        assert eng.speculation.enabled is False
        out = eng.complete(PROMPT, sampling=GREEDY, max_tokens=N)
        assert out.tokens == reference[PROMPT] and no_verifies(out)
    finally:
        eng.close()
