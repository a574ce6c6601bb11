"""The CPU tier (engine/advisor/speed.py, measure.py, tiers.py): a computer without a graphics card is
measured with the model in use, each processor entry gets a predicted speed from that, and the
recommended entry is the best-ranked one that fits the RAM and keeps a usable speed.

The recommendation cases feed given Rates (a fast and a slow computer), so they hold on any test
machine; the measurement itself runs for real, with SmolLM2, and is only checked for sense."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from engine.models import catalog
from engine.advisor import measure, speed, tiers
from engine.advisor.speed import Rates, Speed, predict

GIB = 1 << 30
CELLS = 4096 * 2
CAT = catalog.load(None)
SIZE = {name: CAT.entries[name].target.size for name in ("smollm2", "qwen3.5-2b", "qwen3.5-4b", "qwen3-4b")}


def rates(memory_gb_s: float = 20.0, fixed_ms: float = 5.0, prefill_share: float = 0.4,
          weights_gb_s: float | None = None) -> Rates:
    """A measurement with SmolLM2's file: the probe's weights went at `weights_gb_s` (default: as fast
    as memory), and a decode of SmolLM2 took its bytes at the lesser rate plus `fixed_ms`."""
    weights = (weights_gb_s or memory_gb_s) * 1e9
    decode_s = SIZE["smollm2"] / min(weights, memory_gb_s * 1e9) + fixed_ms / 1e3
    return Rates(memory_gb_s * 1e9, weights, SIZE["smollm2"], decode_s, decode_s * prefill_share, 2)


def recommended(r: Rates | None, ram_gb: int) -> str | None:
    offers = tiers.offers(CAT, tiers.Machine("cpu", "", ram_gb * GIB), CELLS, r)
    return next((o.name for o in offers if o.recommended), None)


def test_a_token_reads_the_file_at_the_weight_rate_plus_what_the_model_in_use_leaves_unexplained():
    r = rates(memory_gb_s=30, weights_gb_s=20, fixed_ms=5, prefill_share=0.25)
    assert r.read_rate == 20e9 and r.fixed_s == pytest.approx(0.005)
    s = predict(2 * 10**9, r)
    per_token = 2e9 / 20e9 + 0.005
    assert s.tokens_per_s == pytest.approx(1 / per_token)
    want = speed.WORK_ORDER_PROMPT_TOKENS * per_token * 0.25 + speed.WORK_ORDER_ANSWER_TOKENS * per_token
    assert s.work_order_s == pytest.approx(want)
    assert s.words_per_s("en") == pytest.approx(0.75 / per_token)
    assert s.words_per_s("zh-TW") == pytest.approx(1 / per_token)
    assert s.words_per_s("fr") == s.words_per_s("en")
    # the model in use is predicted at exactly its measured speed
    assert predict(SIZE["smollm2"], r).tokens_per_s == pytest.approx(1 / r.decode_s)


def test_the_memory_rate_caps_a_probe_that_sat_in_a_cache():
    r = rates(memory_gb_s=10, weights_gb_s=40)  # a big cache held the probe file: memory decides for a 2 GB model
    assert r.read_rate == 10e9 and predict(2 * 10**9, r).tokens_per_s == pytest.approx(1 / (0.2 + r.fixed_s))


def test_a_decode_faster_than_the_rates_allow_leaves_no_negative_fixed_time():
    r = Rates(10e9, 10e9, 10**9, 0.05, 0.01, 2)  # 1 GB in 50 ms: the file was partly in a cache
    assert r.fixed_s == 0.0 and predict(10**9, r).tokens_per_s == pytest.approx(10.0)


def test_usable_is_the_reading_pace():
    assert Speed(speed.USABLE_TOKENS_PER_S, 60.0).usable
    assert not Speed(speed.USABLE_TOKENS_PER_S - 0.01, 60.0).usable


def test_a_fast_computer_gets_the_best_model_its_ram_holds():
    fast = rates(memory_gb_s=40)  # the 4B at ~14 tokens a second
    assert recommended(fast, 32) == "qwen3.5-4b"
    assert recommended(fast, 4) == "qwen3.5-2b"  # 2.4 GB of 4 GB x 0.6 holds the 2B (2.2 GB) and not the 4B
    assert recommended(fast, 2) is None  # only SmolLM2 fits: it is installed already, nothing to suggest


def test_speed_decides_between_entries_that_fit():
    # the 2B at ~9 tokens a second, the 4B at ~4.3: too slow to read along with, so the 2B is suggested
    middling = rates(memory_gb_s=12)
    offers = {o.name: o for o in tiers.offers(CAT, tiers.Machine("cpu", "", 32 * GIB), CELLS, middling)}
    assert offers["qwen3.5-2b"].speed.usable and not offers["qwen3.5-4b"].speed.usable
    assert recommended(middling, 32) == "qwen3.5-2b"
    slow = rates(memory_gb_s=5)  # even the 2B under 4 tokens a second
    assert recommended(slow, 32) is None


def test_without_a_measurement_nothing_is_recommended_and_no_speed_is_guessed():
    offers = tiers.offers(CAT, tiers.Machine("cpu", "", 32 * GIB), CELLS, None)
    assert not any(o.recommended for o in offers) and all(o.speed is None for o in offers)


def test_a_graphics_card_gets_no_processor_speed():
    offers = tiers.offers(CAT, tiers.Machine("gpu", "NVIDIA GeForce RTX 4090", 24 * GIB), CELLS, rates())
    assert all(o.speed is None for o in offers)


def test_with_memory_keeps_the_fixed_time_and_prompt_share_and_changes_the_rate():
    here = rates(memory_gb_s=20, prefill_share=0.25)
    r = here.with_memory(10e9)
    assert r.memory_bytes_per_s == 10e9 and r.read_rate == 10e9
    assert r.fixed_s == pytest.approx(here.fixed_s) and r.prefill_s / r.decode_s == pytest.approx(0.25)
    assert predict(SIZE["qwen3.5-2b"], r).tokens_per_s < predict(SIZE["qwen3.5-2b"], rates(memory_gb_s=20)).tokens_per_s


def write_old_format(cache, model_path, threads, build, r: Rates) -> None:
    """speed.json as flashdesk wrote it before it kept a history: one figure, no date."""
    cache.write_text(json.dumps({"key": measure._cache_key(model_path, threads, build), "rates": r.__dict__}))


def test_the_measurement_runs_smollm2_in_a_child_and_is_kept(tmp_path, model_path):
    cache = tmp_path / "speed.json"
    before = time.time()
    m = measure.take(cache, model_path, 1, "build-a")
    r = m.rates
    assert r.threads == 1 and r.in_use_bytes == SIZE["smollm2"]
    assert r.decode_s > 0 and r.prefill_s > 0 and r.memory_bytes_per_s > 0 and r.weights_bytes_per_s > 0
    assert m.idle is True and before <= m.at <= time.time()
    data = json.loads(cache.read_text())
    assert data["rates"]["threads"] == 1 and data["history"][0]["at"] == m.at  # the date is kept
    assert measure.history(cache, model_path, 1, "build-a") == [m]
    assert measure.history(cache, model_path, 1, "build-b") == []  # another llama.cpp build measures again
    # one is not enough to trust, but the next waits GAP_S: a load that slowed this one has moved on by then
    assert not measure.due([m], m.at + 1) and measure.due([m], m.at + measure.GAP_S)


def test_an_old_one_figure_file_still_loads_and_is_dated_by_the_file(tmp_path, model_path):
    cache = tmp_path / "speed.json"
    write_old_format(cache, model_path, 1, "build-a", rates())
    (m,) = measure.history(cache, model_path, 1, "build-a")
    assert m.rates == rates() and m.idle is None and m.at == pytest.approx(cache.stat().st_mtime)
    assert measure.best([m]) == m and measure.due([m], m.at + measure.GAP_S)


def test_a_busy_or_stale_figure_is_replaced_by_a_better_idle_one(tmp_path, model_path):
    """The issue's case: a figure taken while the test suite ran (five times too slow) in an old file,
    and a very fast idle one from months ago; a real idle measurement now is the one the figures use."""
    cache = tmp_path / "speed.json"
    probe = measure.measure(model_path, 1)
    slow = dataclasses.replace(probe, decode_s=probe.decode_s * 5, prefill_s=probe.prefill_s * 5)
    write_old_format(cache, model_path, 1, "build-a", slow)
    assert measure.best(measure.history(cache, model_path, 1, "build-a")).rates == slow  # all there is, for now
    new = measure.take(cache, model_path, 1, "build-a")
    kept = measure.history(cache, model_path, 1, "build-a")
    assert len(kept) == 2 and kept[-1] == new and measure.best(kept) == new  # preferred: idle, where the old is not
    assert json.loads(cache.read_text())["rates"] == new.rates.__dict__  # what a reader of one figure finds

    fast = dataclasses.replace(probe, decode_s=probe.decode_s / 10)
    stale = measure.Measured(fast, time.time() - 2 * measure.FRESH_S, True)
    assert measure.best([stale, new]) == new  # a recent idle figure beats an old one, however fast
    assert measure.best([stale]) == stale and measure.due([stale])  # still shown while a new one is taken
    twice = [new, measure.Measured(fast, new.at + 1, True)]
    assert measure.best(twice).rates == fast  # of recent idle ones, the fastest: a busy computer only slows


def test_a_request_stops_a_measurement_and_nothing_is_kept(tmp_path, model_path):
    cache = tmp_path / "speed.json"
    start = time.monotonic()
    assert measure.take(cache, model_path, 1, "build-a", idle=lambda: time.monotonic() - start < 0.3) is None
    assert not cache.exists()


def test_a_broken_model_file_is_a_clear_error_not_a_crash(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(Exception, match="could not measure this computer"):
        measure.measure(str(bad), 1)


@pytest.fixture
def own_speed_file(store, monkeypatch, tmp_path):
    """The store's models under a home of this test's own, so that its speed.json starts empty."""
    monkeypatch.setattr(store, "home", tmp_path)  # speed.json lives in the home; the models stay where they are
    monkeypatch.setattr(measure, "_tried", {})
    monkeypatch.setattr(measure, "QUIET_S", 0.05)
    return tmp_path / measure.CACHE_NAME


def wait_measured(deadline_s: float = 10) -> None:
    deadline = time.time() + deadline_s
    while measure.measuring() and time.time() < deadline:
        time.sleep(0.02)


def test_this_computer_measures_in_the_background_only_while_idle(store, own_speed_file, monkeypatch):
    seen, idle = [], [False]

    def slow_measure(path, threads, timeout=0, busy=None):
        time.sleep(0.3)
        seen.append(path)
        return rates()

    monkeypatch.setattr(measure, "measure", slow_measure)
    backend = dataclasses.replace(store.get("smollm2"), source="backend:http://x", path="/nonexistent.gguf")
    assert measure.this_computer(store, backend, 3, idle=lambda: idle[0]) is None and measure.measuring()
    assert measure.this_computer(store, backend, 3) is None  # a second ask starts no second measurement
    time.sleep(0.3)
    assert seen == []  # a request is running: it waits
    idle[0] = True
    wait_measured()
    got = measure.this_computer(store, backend, 3)
    assert got.rates == rates() and got.idle is True and seen == [store.get("smollm2").path]
    assert not measure.measuring()  # one of WANT, but the next waits GAP_S


def test_an_old_file_answers_at_once_and_a_better_idle_figure_replaces_it(store, own_speed_file, monkeypatch):
    path = store.get("smollm2").path
    write_old_format(own_speed_file, path, 5, measure.ggml.build_id(), rates(memory_gb_s=7))
    day_ago = time.time() - 86400
    os.utime(own_speed_file, (day_ago, day_ago))  # written by an older flashdesk, a while back
    monkeypatch.setattr(measure, "measure", lambda *a, **k: rates(memory_gb_s=30))
    first = measure.this_computer(store, store.get("smollm2"), 5, idle=lambda: True)
    assert first.rates == rates(memory_gb_s=7) and first.idle is None  # at once, while the next is taken
    assert first.at == pytest.approx(day_ago)  # its date: the file's
    wait_measured()
    assert measure.this_computer(store, store.get("smollm2"), 5).rates == rates(memory_gb_s=30)
