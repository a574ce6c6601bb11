"""The verify-cost curve (and its surface over rows and sequences) is measured while the engine
is idle (issue 16): a request that comes first decodes plainly at once instead of waiting
seconds for the measurement, the output is the same either way, and the curve, once measured,
is kept beside the model for the next start."""

from __future__ import annotations

import json

from conftest import TEST_CTX
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.chooser import MAX_ROWS, CostCurve

GREEDY = SamplingParams(temperature=0)
ORDER = [{"role": "user", "content": "Repeat exactly: 200 mugs, white, logo on both sides, ship to Taichung."}]


def test_requests_before_the_curve_decode_plainly_and_the_curve_is_kept(model_path, engine, tmp_path):
    cache = tmp_path / "verify-cost-2t.json"
    config = EngineConfig(n_ctx=TEST_CTX, n_parallel=2, n_threads=2, cost_cache=str(cache))
    plain = engine.chat(ORDER, sampling=GREEDY, max_tokens=24)
    eng = Engine.load(model_path, config)
    try:
        # Several requests at once, right after the load: each interrupts the measurement (dozens
        # of decodes), none waits for it, and none speculates without the chooser's curve.
        first = [eng.chat(ORDER, sampling=GREEDY, max_tokens=24) for _ in range(3)]
        assert eng.cost_curve == "measuring"
        assert all(c.usage.speculation is None and c.tokens == plain.tokens for c in first)

        assert eng.curve_ready.wait(120), "the measurement never finished"
        assert eng.cost_curve == "ready"
        kept = json.loads(cache.read_text("utf-8"))
        assert kept["n_threads"] == 2 and len(kept["verify_ms"]) == MAX_ROWS + 1
        ms = kept["verify_ms"][1:]
        assert all(a > 0 for a in ms) and ms == sorted(ms)  # c(1..16): positive, never cheaper with more rows
        assert kept["batch_ms"] == []  # no surface over sequences yet: it would cost kept prefixes

        # The paused and resumed measurement left nothing behind: answers are still plain decoding's,
        # now with the chooser (auto: prompt lookup, no draft here).
        after = eng.chat(ORDER, sampling=GREEDY, max_tokens=24)
        assert after.tokens == plain.tokens and after.usage.speculation["mode"] == "lookup"
    finally:
        eng.close()

    again = Engine.load(model_path, config)  # the next start reads the kept curve: ready at once
    try:
        assert again.curve_ready.is_set() and again.cost_curve == "ready"
        assert again.chat(ORDER, sampling=GREEDY, max_tokens=24).usage.speculation["mode"] == "lookup"
    finally:
        again.close()


def test_a_curve_for_other_threads_another_build_or_a_broken_file_is_measured_again(tmp_path):
    path = tmp_path / "verify-cost-2t.json"
    CostCurve([0.0] + [float(k) for k in range(1, MAX_ROWS + 1)], 4, 256, build="abc").save(path)
    assert CostCurve.load(path, 4, "abc") is not None and CostCurve.load(path, 2, "abc") is None
    # another llama.cpp build (a patch that changes the kernels, GGML_BATCH_INVARIANT=0): its own curve
    assert CostCurve.load(path, 4, "def") is None
    path.write_text("{not json", "utf-8")
    assert CostCurve.load(path, 4) is None
    assert CostCurve.load(tmp_path / "missing.json", 2) is None
