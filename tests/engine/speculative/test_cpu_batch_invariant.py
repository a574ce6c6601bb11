"""A K-quant model speculates on the CPU, exactly: flashdesk's CPU patch (native/llama-patches/0002).

Stock ggml-cpu computes a Q4_K_M model's verify rows with other kernels than a single token
(the repacked GEMM from 4 rows, the tiled K-quant kernel from 8), so the load-time judge refuses
to speculate on it. With the patch, every batch of up to 16 rows takes the single-token
arithmetic. The target here is a random llama written at test time and quantized to Q4_K_M
(Q4_K and Q6_K tensors, repacked on AVX2), with SmolLM2's vocabulary so grammars work on it.

- the build carries the patch and reports its band;
- the judge passes that model, and with the patch switched off (GGML_BATCH_INVARIANT=0, read once
  per process, so in a child) the same model is refused: the control;
- greedy invariance on it: lookup and grammar, 1 and 4 sequences, against plain decoding;
- its prompt rows depend on the decode they are in (above the band, stock kernels run), so the
  engine cuts prompts at fixed positions (engine/chunks.py): an answer's log-probabilities are the
  same bit for bit whatever prefix was kept and whoever else is served.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, dev_prompts
from bench import gpu_check
from engine import Completion, Engine, EngineConfig, SamplingParams
from engine.grammar.schema import compile_response_format
from engine.chunks import CHUNK
from engine.llama import ggml
from engine.speculative.params import SpecParams

GREEDY = SamplingParams(temperature=0)
BAND = 16  # GGML_CPU_BATCH_INVARIANT_BAND in the patch
MAX_TOKENS = 48
JSON = compile_response_format({"type": "json_object"}).grammar
JUDGE = """
import json, sys
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.speculative.exactness import judge
m = Model(sys.argv[1]); ctx = Context(m, ContextConfig(n_ctx_seq=256, n_seq=1, n_batch=64, n_threads=2))
ex = judge(ctx, on_gpu=False)
print(json.dumps({"exact": ex.exact, "why": ex.why, "max_rows": ex.max_rows}))
"""


@pytest.fixture(scope="module")
def kquant_path(tmp_path_factory, model_path) -> str:
    """A random 4-layer, 1024-wide llama in Q4_K_M, with SmolLM2's tokenizer and chat template."""
    path = tmp_path_factory.mktemp("kquant") / "random-q4km.gguf"
    gpu_check.random_model(path, n_layer=4, n_embd=1024, tokenizer_from=model_path)
    return str(path)


@pytest.fixture(scope="module")
def kquant_engine(kquant_path):
    eng = Engine.load(kquant_path, EngineConfig(n_ctx=1024, n_parallel=4, n_threads=2))
    yield eng
    eng.close()


def judged(path: str, switch: str) -> dict:
    env = {**os.environ, "GGML_BATCH_INVARIANT": switch}
    r = subprocess.run([sys.executable, "-c", JUDGE, path], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_cpu_build_carries_the_patch():
    assert f"BATCH_INVARIANT = {BAND}" in ggml.system_info()
    assert ggml.row_band() == BAND


def test_the_judge_passes_a_q4_k_m_model_and_refuses_it_without_the_patch(kquant_path):
    on = judged(kquant_path, "1")
    assert on["exact"] and on["max_rows"] == BAND, on["why"]
    assert "batch-invariant patch" in on["why"]
    off = judged(kquant_path, "0")  # the control: stock kernels, the same model
    assert not off["exact"], off
    assert "switched off" in off["why"] and "gives other logits than single tokens" in off["why"], off["why"]


def prompts() -> list[dict]:
    return dev_prompts()[::15]  # 4 prompts, different categories


def run(eng: Engine, spec: SpecParams, grammar: str | None, concurrent: bool) -> dict[str, list[int]]:
    def start(p):
        return eng.generate(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=MAX_TOKENS,
                            speculative=spec, grammar=grammar)

    if concurrent:  # submitted together: 4 sequences share each step, capped at the band's rows
        handles = {p["id"]: start(p) for p in prompts()}
        done = {k: Completion.collect(iter(h)) for k, h in handles.items()}
    else:
        done = {p["id"]: Completion.collect(iter(start(p))) for p in prompts()}
    verifies = sum(c.usage.speculation.verifies for c in done.values() if c.usage.speculation)
    if spec.mode != "off":
        assert verifies > 0, "it never speculated"
    return {k: c.tokens for k, c in done.items()}


@pytest.mark.parametrize("mode,grammar", [("lookup", None), ("grammar+lookup", JSON)], ids=["lookup", "grammar"])
@pytest.mark.parametrize("concurrent", [False, True], ids=["1seq", "4seq"])
def test_greedy_speculation_on_the_q4_k_m_model_is_lossless(kquant_engine, mode, grammar, concurrent):
    eng = kquant_engine
    assert eng.speculation.exactness.exact and eng.speculation.exactness.max_rows == BAND, eng.speculation.exactness.why
    plain = run(eng, SpecParams(mode="off"), grammar, concurrent=False)
    got = run(eng, SpecParams(mode=mode, block=8), grammar, concurrent)
    bad = {k: next((i for i, (a, b) in enumerate(zip(plain[k], t)) if a != b), min(len(plain[k]), len(t)))
           for k, t in got.items() if t != plain[k]}
    assert not bad, f"prompt -> first differing token position: {bad}"


def answer(eng: Engine, prompt: list[int]):
    return eng.generate(prompt, sampling=GREEDY, max_tokens=12, speculative=SpecParams(mode="off"), logprobs=True)


def test_prompts_are_cut_at_fixed_positions_on_the_q4_k_m_model(kquant_engine):
    chunks = kquant_engine.chunks
    assert chunks.aligned and chunks.size == CHUNK, chunks.why
    assert "depend on the decode they are in" in chunks.why
    facts = kquant_engine.speculation_facts()
    assert facts.prompt_chunk == CHUNK and facts.prompt_why == chunks.why


def test_a_kept_prefix_and_other_requests_never_change_an_answer(kquant_engine):
    """Prompt B shares 125 tokens with A (a kept prefix that ends off a multiple of four, where
    the stock GEMM's row groups move), and later runs beside three other prompts' chunks."""
    eng, base = kquant_engine, [eng_bos(kquant_engine)] + [(37 * i + 11) % 40000 + 50 for i in range(1, 125)]
    a = base + [(13 * i + 3) % 40000 + 50 for i in range(30)]
    b = base + [(17 * i + 5) % 40000 + 50 for i in range(45)]
    others = [[eng_bos(eng)] + [(k * 101 + 7 * i) % 40000 + 50 for i in range(1, 90 + 9 * k)] for k in range(1, 4)]
    ref = Completion.collect(iter(answer(eng, b)))  # B's prompt decoded from nothing
    assert ref.usage.cached_tokens == 0 and ref.logprobs
    Completion.collect(iter(answer(eng, a)))  # A now holds the slot whose prefix B shares
    again = Completion.collect(iter(answer(eng, b)))
    assert again.usage.cached_tokens == CHUNK  # whole chunks of A's prompt, not its 125 shared tokens
    handles = [answer(eng, p) for p in others[:1]] + [answer(eng, b)] + [answer(eng, p) for p in others[1:]]
    beside = [Completion.collect(iter(h)) for h in handles][1]
    for got in (again, beside):
        assert got.tokens == ref.tokens
        assert got.logprobs == ref.logprobs  # bit for bit: every logit the answer read


def eng_bos(eng: Engine) -> int:
    return eng.model.bos_id if eng.model.bos_id >= 0 else 1
