"""A banded build: a GPU build with flashdesk's batch-invariant patch (native/llama-patches) is
exact only in decodes of at most `max_rows` rows. No GPU here, so the CPU build plays one: the
engine is made to read a band of 4 from the build's features and to believe its layers are on a
graphics card. Then the load-time judge takes the banded path for real (every width of the band,
at every offset, across n_kv's 256 padding boundary, on the real model), the policy caps blocks at
4, every decode that holds plain or verify rows holds at most 4 rows, a prompt chunk is decoded
alone, and the output is still the plain output, token for token.
"""

from __future__ import annotations

import pytest

from conftest import DRAFT, TEST_CTX, dev_prompts
from engine import Completion, Engine, EngineConfig, SamplingParams
from engine.llama import ggml
from engine.speculative.exactness import judge
from engine.speculative.params import SpecParams

GREEDY = SamplingParams(temperature=0)
BAND = 4
CPU_INFO = ggml.system_info()  # the real build's, before any test pretends otherwise


def banded_build(monkeypatch, value: str = str(BAND), on_gpu: bool = True) -> None:
    monkeypatch.setattr(ggml, "system_info", lambda: f"{CPU_INFO} CUDA : BATCH_INVARIANT = {value} | ")
    monkeypatch.setattr(ggml, "supports_gpu_offload", lambda: on_gpu)


@pytest.fixture(scope="module")
def banded(model_path):
    """An engine on the 'banded' build, with the shipped draft, recording every decode's rows."""
    mp = pytest.MonkeyPatch()
    banded_build(mp)
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2, draft=str(DRAFT)))
    decodes: list[list[tuple[int, bool]]] = []  # per decode: (seq_id, logits) of each row
    real = eng.ctx.decode

    def recording(batch):
        b = batch.raw
        decodes.append([(b.seq_id[i][0], bool(b.logits[i])) for i in range(batch.n)])
        return real(batch)

    eng.ctx.decode = recording
    try:
        assert eng.speculation.curve_ready.wait(120), "the verify-cost curve was not measured"
        yield eng, decodes
    finally:
        eng.close()
        mp.undo()


def test_the_judge_measures_the_band_and_the_engine_keeps_to_it(banded):
    eng, _ = banded
    assert eng.speculation.exactness.exact and eng.speculation.enabled, eng.speculation.exactness.why
    assert eng.speculation.exactness.max_rows == BAND and eng.speculation.policy.max_block == BAND
    why = eng.speculation.exactness.why
    assert f"up to {BAND} rows" in why and "batch-invariant patch" in why


def test_banded_steps_are_exact_and_keep_to_the_band(banded):
    eng, decodes = banded
    prompts = dev_prompts()[1::15][:4]  # four prompts of different categories, decoded together
    plain = {p["id"]: eng.complete(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=48,
                                   speculative=SpecParams(mode="off")).tokens for p in prompts}
    for mode in ("dflash", "lookup"):
        decodes.clear()
        spec = SpecParams(mode=mode, block=8)  # asks for more than the band: capped at 4
        handles = {p["id"]: eng.generate(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=48,
                                         speculative=spec) for p in prompts}
        got = {k: Completion.collect(iter(h)) for k, h in handles.items()}
        for k, c in got.items():
            assert c.tokens == plain[k], (mode, k)
        if mode == "dflash":
            assert any(c.usage.speculation and c.usage.speculation.verifies for c in got.values())
        for rows in decodes:
            seqs = {s for s, _ in rows}
            # a prompt chunk alone (its last row may give the first token), or at most BAND rows
            assert len(rows) <= BAND or len(seqs) == 1, rows
        assert any(len({s for s, _ in rows}) > 1 for rows in decodes), "the sequences never shared a step"


def test_the_judge_words_each_case(model_path, monkeypatch, target_model):
    from engine.llama.context import Context, ContextConfig

    ctx = Context(target_model, ContextConfig(n_ctx_seq=512, n_seq=1, n_batch=512, n_threads=2))
    try:
        banded_build(monkeypatch, "off")  # switched off: measured (exact here, on the CPU)
        assert judge(ctx, on_gpu=True).max_rows is None
        banded_build(monkeypatch, str(BAND), on_gpu=False)  # a band, the model on the CPU: the CPU's measurement
        ex = judge(ctx, on_gpu=False)
        assert ex.exact and ex.max_rows == BAND and "graphics-card" not in ex.why
        monkeypatch.setattr(ggml, "system_info", lambda: "CPU : LLAMAFILE = 1 | ")
        ex = judge(ctx, on_gpu=False)
        assert not ex.exact and "llamafile" in ex.why
    finally:
        ctx.close()


def test_the_build_feature_is_read(monkeypatch):
    banded_build(monkeypatch, "8")
    assert ggml.batch_invariant() == "8" and ggml.row_band() == 8
    banded_build(monkeypatch, "off")
    assert ggml.batch_invariant() == "off" and ggml.row_band() is None


def test_the_band_is_kept_off_llamafile(monkeypatch):
    """The patch keeps its band off llamafile's sgemm, which then serves only prompt chunks above it."""
    for info, case in (("CPU : LLAMAFILE = 1 | BATCH_INVARIANT = 16 | ", (ggml.BANDED, 16)),
                       ("CPU : LLAMAFILE = 1 | BATCH_INVARIANT = off | ", (ggml.SWITCHED_OFF, None)),
                       ("CPU : LLAMAFILE = 1 | ", (ggml.LLAMAFILE, None)),
                       ("CPU : AVX2 = 1 | ", (ggml.STOCK, None))):
        monkeypatch.setattr(ggml, "system_info", lambda info=info: info)
        assert ggml.exactness_case() == case, info
