"""The cost model the chooser prices paths with, learned from the decodes themselves (issue 42):
a fake clock and synthetic timings drive it through noise, outliers and drift. Pure logic, no model."""

from __future__ import annotations

import json
import random

from engine.speculative.chooser import StepBatch, choose_path_len
from engine.speculative.costs import CURVE_ROWS, MIN_SAMPLES, STALE_S, WINDOW, CostModel, ubatches


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def truth(rows: int, seqs: int = 1, per_row: float = 3.3) -> float:
    """A 2-core CPU's shape: a fixed part, a near-constant price per row, a little per sequence."""
    return 7.0 + per_row * (rows - 1) + 0.4 * (seqs - 1)


def noisy(ms: float, rng: random.Random) -> float:
    """Other processes only add time: mostly a few percent, now and then a 3x outlier."""
    return ms * (3.0 if rng.random() < 0.1 else 1.0 + 0.05 * rng.random())


def test_nothing_is_priced_before_a_decode_is_timed_and_c1_comes_first():
    model = CostModel(2)
    assert not model.ready and model.missing() == list(range(1, CURVE_ROWS + 1))
    for _ in range(MIN_SAMPLES):
        model.observe(1, 1, 7.0)
    assert model.ready and model.cost(1) == 7.0
    assert model.missing() == list(range(2, CURVE_ROWS + 1))
    model.observe(0, 1, 5.0)  # an empty decode, or a broken clock: not a sample
    model.observe(3, 1, 0.0)
    assert model.cells.keys() == {(1, 1)}


def test_medians_shrug_off_noise_and_outliers():
    rng, model = random.Random(7), CostModel(2)
    for _ in range(200):
        k = rng.randint(1, CURVE_ROWS)
        model.observe(k, 1, noisy(truth(k), rng))
    for k in range(1, CURVE_ROWS + 1):
        assert truth(k) <= model.cost(k) <= 1.06 * truth(k)
    assert model.curve() == sorted(model.curve())  # more rows never cost less


def test_drift_is_followed_within_a_window_of_decodes():
    """The machine slows down (another program, heat): the cells follow within WINDOW samples, and
    the chooser that paid for a path at the old prices decodes plainly at the new ones."""
    rng, clock = random.Random(3), Clock()
    model = CostModel(2, clock=clock)
    rates = [0.7] * 7
    for _ in range(WINDOW):
        for k in range(1, 9):
            model.observe(k, 1, noisy(truth(k, per_row=0.7), rng))  # verify rows nearly free
    assert choose_path_len(rates, 7, model) > 0
    for _ in range(WINDOW):
        clock.t += 1.0
        for k in range(1, 9):
            model.observe(k, 1, noisy(truth(k, per_row=6.0), rng))  # now each row costs most of c(1)
    for k in range(1, 9):
        assert truth(k, per_row=6.0) <= model.cost(k) <= 1.06 * truth(k, per_row=6.0)
    assert choose_path_len(rates, 7, model) == 0


def test_unvisited_rows_are_priced_from_the_visited():
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        for k in (1, 5, 9):
            model.observe(k, 1, truth(k))
    assert model.cost(3) == truth(3)  # between two timed row counts: linear
    assert model.cost(12) == truth(12)  # past the last: its segment's slope goes on
    one = CostModel(2)
    for _ in range(MIN_SAMPLES):
        one.observe(1, 1, 10.0)
    assert one.cost(5) == 10.0 + 4 * 0.25 * 10.0  # only c(1): the prior's slope, a guess that gets tried


def test_a_batch_of_several_sequences_is_priced_from_its_own_decodes_and_the_curves_shape():
    """Plain steps at 4 streams time the 4-row, 4-sequence decode; a path joining them is priced
    at that decode plus what the extra rows add on the one-sequence curve, until such decodes are
    timed too. Nothing decodes into other streams' sequences to learn it."""
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        for k in range(1, CURVE_ROWS + 1):
            model.observe(k, 1, truth(k))
        model.observe(4, 4, truth(4, 4))
    assert model.cost(4, 4) == truth(4, 4)
    assert abs(model.cost(9, 4) - (truth(4, 4) + truth(9) - truth(4))) < 1e-9
    assert model.cost(6, 3) == model.cost(6, 4)  # 3 sequences: the 4-sequence bucket
    assert model.cost(8, 8) == truth(8)  # no 8-sequence decode timed yet: the one-sequence cost of its rows
    for _ in range(MIN_SAMPLES):
        model.observe(8, 2, 5.0)  # two sequences, 8 rows: timed (noisily) cheaper than one sequence's 8 rows
    assert model.cost(2, 2) == truth(2)  # fewer rows: never below one sequence's decode of as many (nor 0)
    for _ in range(MIN_SAMPLES):
        model.observe(10, 4, truth(10, 4))
    assert model.cost(7, 4) == (truth(4, 4) + truth(10, 4)) / 2


def streams(n: int, tokens: float | None = None) -> StepBatch:
    """A step beside n - 1 other streams: sequences 0..n-1, one row each."""
    return StepBatch({s: 1 for s in range(n)}, float(n) if tokens is None else tokens)


def test_company_makes_paths_pay_less():
    """Beside 3 other streams the step already commits 4 tokens for c(4), and a path's rows are a
    ubatch of their own: a path must beat that rate, not one token per c(1), so the same acceptance
    buys a shorter path, or none."""
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        for s in (1, 4):
            for r in range(s, CURVE_ROWS + 1):
                model.observe(r, s, truth(r, s, per_row=2.0))
    rates = [0.95] * 7
    alone = choose_path_len(rates, 7, model)
    assert alone > 0
    assert 0 < choose_path_len(rates, 7, model, batch=streams(4)) < alone
    assert choose_path_len([0.6] * 7, 7, model, batch=streams(4)) == 0


def test_llama_cpp_splits_a_decode_into_ubatches_of_equal_rows_per_sequence():
    """Mirrors `llama_batch_allocr::split_equal(n_ubatch, sequential=true)` (a KV cache that is not unified)."""
    assert ubatches({0: 1, 1: 1, 2: 1}, 512) == [(3, 3)]
    assert ubatches({0: 3, 1: 1, 2: 1}, 512) == [(3, 3), (2, 1)]  # a path beside single rows: its own ubatch
    assert ubatches({0: 3, 1: 3}, 512) == [(6, 2)]  # equal paths share one
    assert ubatches({0: 1, 2: 1, 3: 1}, 512) == [(1, 1), (2, 2)]  # a gap in the ids splits a plain step
    assert ubatches({0: 2, 1: 3, 3: 1}, 512) == [(4, 2), (1, 1), (1, 1)]
    assert ubatches({0: 600}, 512) == [(512, 1), (88, 1)]
    assert ubatches({0: 300, 1: 300}, 512) == [(512, 2), (88, 2)]
    assert ubatches({0: 0, 1: 2}, 512) == [(2, 1)]


def test_a_decode_is_priced_as_its_ubatches_and_only_whole_ones_are_samples():
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        model.observe_decode({0: 1, 1: 1, 2: 1, 3: 1}, 512, truth(4, 4))
        model.observe_decode({5: 3}, 512, truth(3))
        model.observe_decode({0: 1}, 512, truth(1))
        model.observe_decode({0: 3, 1: 1, 2: 1, 3: 1}, 512, 99.0)  # split: its parts were not timed apart
    assert model.cells.keys() == {(4, 4), (3, 1), (1, 1)}
    assert model.decode_cost({0: 3, 1: 1, 2: 1, 3: 1}, 512) == truth(4, 4) + truth(2)
    assert model.decode_cost({0: 1, 1: 1, 2: 1, 3: 1}, 512) == truth(4, 4)


def test_beside_single_rows_a_path_pays_for_a_ubatch_of_its_own_and_equal_paths_share_one():
    """At 8 streams on a CPU whose decodes cost a fixed part and 3.3 ms a row, a near-certain path
    beside 7 single rows costs a second decode and is not worth it; joining 7 paths of its length,
    it costs only its rows."""
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        for s in (1, 8):
            for k in range(1, 9):
                model.observe(k * s, s, truth(k * s, s))
    rates = [0.99] * 7
    assert choose_path_len(rates, 7, model) > 0
    assert choose_path_len(rates, 7, model, batch=streams(8)) == 0
    together = StepBatch({s: 8 if s else 1 for s in range(8)}, 8.0 + 7 * 6.9)
    assert choose_path_len(rates, 7, model, batch=together) == 7


def test_a_verify_that_costs_more_than_it_can_win_is_not_chosen():
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        model.observe(1, 1, 10.0)
        model.observe(2, 1, 21.0)  # one more row costs more than a whole decode: nothing can pay for it
    assert choose_path_len([1.0] * 7, 7, model) == 0


def test_rows_nobody_timed_for_long_are_measured_again():
    clock = Clock()
    model = CostModel(2, clock=clock)
    for _ in range(MIN_SAMPLES):
        for k in range(1, CURVE_ROWS + 1):
            model.observe(k, 1, truth(k))
    assert model.missing() == []
    clock.t += STALE_S / 2
    for _ in range(MIN_SAMPLES):
        model.observe(1, 1, truth(1))  # traffic keeps c(1) fresh
    clock.t += STALE_S / 2 + 1
    assert model.missing() == list(range(2, CURVE_ROWS + 1))
    assert model.cost(5) == truth(5)  # stale cells still price until measured again


def test_kept_per_thread_count_and_build(tmp_path):
    path = tmp_path / "verify-cost-2t.json"
    model = CostModel(2, "abc")
    for _ in range(MIN_SAMPLES):
        for k in range(1, 5):
            model.observe(k, 1, truth(k))
        model.observe(8, 4, 40.0)
    model.observe(12, 1, 50.0)  # one sample: not kept (it would price on its own once it had MIN_SAMPLES)
    model.save(path)
    again = CostModel.load(path, 2, "abc")
    assert again.ready and again.cost(3) == truth(3) and again.cost(8, 4) == 40.0
    assert (12, 1) not in again.cells
    assert not CostModel.load(path, 4, "abc").cells  # another thread count
    assert not CostModel.load(path, 2, "def").cells  # another llama.cpp build: its kernels cost otherwise
    path.write_text(json.dumps({"n_threads": 2, "verify_ms": [0.0] + [1.0] * CURVE_ROWS, "batch_ms": []}), "utf-8")
    assert not CostModel.load(path, 2, "").cells  # a curve from before the learned model
    path.write_text("{not json", "utf-8")
    assert not CostModel.load(path, 2, "abc").cells
    assert not CostModel.load(tmp_path / "missing.json", 2).cells
