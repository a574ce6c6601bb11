"""SpecStats.speedup: the estimate the UI shows under an answer."""

from engine.speculative.params import SpecStats


def test_no_verify_means_no_speedup_claimed():
    s = SpecStats(mode="dflash", plain_steps=30, plain_ms=300.0)
    assert s.speedup(10.0) is None


def test_speedup_uses_the_curve_without_own_plain_steps():
    s = SpecStats(mode="lookup")
    for _ in range(10):
        s.record(3, 2)  # 3 tokens committed per verify
    s.verify_ms, s.draft_ms = 150.0, 0.0  # 15 ms a verify
    assert s.speedup(10.0) == 2.0  # 30 tokens at 10 ms plain = 300 ms, spent 150 ms


def test_speedup_prefers_the_requests_own_plain_steps():
    s = SpecStats(mode="lookup", plain_steps=10, plain_ms=200.0)  # 20 ms a plain token under today's load
    for _ in range(10):
        s.record(3, 2)
    s.verify_ms = 200.0
    assert s.speedup(10.0) == round(40 * 20.0 / 400.0, 2)


def test_the_drafts_gain_pools_the_answers_of_every_mode_it_drafts_in():
    """MeasuredGain.pooled: /health's draft_measured (dflash alone and beside the spans), time-weighted."""
    from engine.speculative.params import MeasuredGain

    a, b = MeasuredGain(), MeasuredGain()
    assert MeasuredGain.pooled([a, b]) is None  # nothing drafted yet: nothing said
    s = SpecStats(mode="dflash")
    for _ in range(10):
        s.record(3, 2)
    s.verify_ms = 150.0
    a.add(s, 10.0)  # 300 ms of plain decoding in 150
    t = SpecStats(mode="grammar+lookup+dflash", plain_steps=10, plain_ms=100.0)
    b.add(t, 10.0)  # plain all along: 1.0x
    assert MeasuredGain.pooled([a, b]) == {"answers": 2, "speedup": round(400.0 / 250.0, 2)}


def test_what_speculation_did_is_kept_and_a_file_not_ours_reads_as_nothing(tmp_path):
    """stats.MeasuredSpeedup: the catalog shows it beside a model that is not loaded; a damaged or
    foreign file is shown as "not measured", never as a figure."""
    from engine.stats import MeasuredSpeedup

    path = tmp_path / "measured.json"
    kept = MeasuredSpeedup(at=1.8e9, answers=12, speedup=1.37, draft={"answers": 8, "speedup": 1.5})
    kept.save(path)
    assert MeasuredSpeedup.load(path) == kept
    MeasuredSpeedup(at=1.8e9, answers=3, speedup=0.9).save(path)
    assert MeasuredSpeedup.load(path).draft is None
    for text in ("", "[1, 2]", '{"at": 1, "answers": "many", "speedup": 1}', '{"answers": 3}',
                 '{"at": 1, "answers": 3, "speedup": 1.2, "draft": {"speedup": "fast"}}'):
        path.write_text(text)
        got = MeasuredSpeedup.load(path)
        assert got is None or got.draft is None, text
    assert MeasuredSpeedup.load(tmp_path / "missing.json") is None
