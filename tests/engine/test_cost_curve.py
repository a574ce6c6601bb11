"""The chooser learns what decodes cost from the requests it serves (issue 42): a fresh install
speculates from its first request, without waiting for any measurement; the idle fill-in times
the rows traffic has not visited on a sequence of its own, never on a busy one; answers are
plain decoding's throughout; and what was learned is kept beside the model for the next start."""

from __future__ import annotations

import json
import threading
import time

from conftest import TEST_CTX
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.costs import CURVE_ROWS, MIN_SAMPLES, VERSION
from engine.speculative.params import SpecParams
from engine.stats import MEASURED_FILE, MeasuredSpeedup

GREEDY = SamplingParams(temperature=0)
ORDERS = [[{"role": "user", "content": f"Repeat exactly: {n} mugs, white, logo on both sides, ship to {city}."}]
          for n, city in ((200, "Taichung"), (40, "Tainan"), (75, "Hsinchu"), (320, "Keelung"))]


def watch_decodes(eng: Engine) -> list[str]:
    """Wrap the target context's decode: every batch may hold only the sequences of busy slots, or,
    while no slot is busy, the fill-in's own. Returns the list the violations go into."""
    bad: list[str] = []
    decode, fill_seq = eng.ctx.decode, eng.ctx.n_seq - 1

    def checked(batch):
        seqs = set(batch.rows_of)
        busy = {s.seq_id for s in eng._slots if s.busy}
        if not (seqs <= busy or (not busy and seqs == {fill_seq})):
            bad.append(f"decode into {sorted(seqs)} while slots {sorted(busy)} were busy")
        return decode(batch)

    eng.ctx.decode = checked
    return bad


def test_a_fresh_install_speculates_from_its_first_requests_and_keeps_what_it_learned(model_path, engine, tmp_path):
    cache, measured = tmp_path / "verify-cost-2t.json", tmp_path / MEASURED_FILE
    config = EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2, cost_cache=str(cache),
                          measured_cache=str(measured))
    plain = [engine.chat(o, sampling=GREEDY, max_tokens=32, speculative=SpecParams(mode="off")).tokens for o in ORDERS]
    eng = Engine.load(model_path, config)
    try:
        bad = watch_decodes(eng)
        assert eng.speculation.cost_curve == "learning" and not eng.speculation.costs.ready
        # Four requests at once, right after the load, then four one after another: none waits for a
        # measurement, each speculates once its first plain decodes have timed c(1).
        out: dict[int, object] = {}
        threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, eng.chat(
            ORDERS[i], sampling=GREEDY, max_tokens=32))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = [eng.chat(o, sampling=GREEDY, max_tokens=32) for o in ORDERS]
        assert [out[i].tokens for i in range(4)] == plain and [c.tokens for c in after] == plain
        assert all(c.usage.speculation and c.usage.speculation.mode == "lookup" for c in after)
        assert sum(c.usage.speculation.verifies for c in after) > 0  # learned enough to verify
        costs = eng.speculation.costs
        assert costs.ready and costs.cells.get((4, 4)), "the 4-stream decodes were timed"

        assert eng.speculation.curve_ready.wait(120), "the idle fill-in never finished"
        assert eng.speculation.cost_curve == "ready" and eng.speculation.costs.missing() == []
        assert bad == []
        assert eng.chat(ORDERS[0], sampling=GREEDY, max_tokens=32).tokens == plain[0]
    finally:
        eng.close()
    kept = json.loads(cache.read_text("utf-8"))
    assert kept["version"] == VERSION and kept["n_threads"] == 2
    one = {r for r, b, ms in kept["cells"] if b == 1 and len(ms) >= MIN_SAMPLES and all(x > 0 for x in ms)}
    assert one >= set(range(1, CURVE_ROWS + 1))
    # what speculation did for these answers is kept beside the model too (the catalog shows it): the
    # answers that could speculate, lookup's (no draft here), as of the close
    got = MeasuredSpeedup.load(measured)
    assert got is not None and got.answers >= len(after) and got.speedup > 0 and got.draft is None
    assert time.time() - 600 < got.at <= time.time()

    again = Engine.load(model_path, config)  # the next start reads what was learned: ready at once
    try:
        assert again.speculation.curve_ready.is_set() and again.speculation.cost_curve == "ready"
        first = again.chat(ORDERS[1], sampling=GREEDY, max_tokens=32)
        assert first.tokens == plain[1] and first.usage.speculation.mode == "lookup"
    finally:
        again.close()
