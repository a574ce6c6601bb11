"""The block-length chooser and prompt lookup: pure logic, no model."""

from engine.speculative.chooser import ROWS_PER_SEQ, SEQS, CostCurve, StepBatch, choose_path_len, expected_committed
from engine.speculative.drafters.lookup import PromptLookupDrafter

# This machine's shape of the cost curve (DESIGN.md §5): nearly linear on a 2-core CPU.
CPU = CostCurve([0, 7.0, 13.0, 16.0, 19.3, 22.6, 25.9, 29.2, 32.6] + [32.6 + 3.3 * i for i in range(1, 9)], 2, 256)
GPU = CostCurve([0] + [7.0 + 0.1 * k for k in range(16)], 1, 256)  # nearly flat up to 16 rows


def test_expected_committed():
    assert expected_committed([0.5, 0.5], 0) == 1.0
    assert expected_committed([0.5, 0.5], 2) == 1.0 + 0.5 + 0.25
    assert expected_committed([1.0] * 7, 7) == 8.0


def test_plain_when_acceptance_cannot_pay_for_the_verify():
    assert choose_path_len([0.5] * 7, 7, CPU) == 0
    assert choose_path_len([0.0] * 7, 7, GPU) == 0


def test_speculates_where_it_pays():
    assert choose_path_len([0.99] * 7, 7, CPU) > 0  # a copy span: nearly everything is accepted
    t = choose_path_len([0.8] * 15, 15, GPU)
    assert t >= 8  # a flat curve rewards long blocks


def test_draft_cost_counts():
    assert choose_path_len([0.9] * 7, 7, GPU, draft_ms=0.0) > 0
    assert choose_path_len([0.9] * 7, 7, GPU, draft_ms=1000.0) == 0


# A CPU surface: a decode costs a fixed part plus about 3.3 ms per row, whoever's rows they are
SURFACE = CostCurve(CPU.verify_ms, 2, 256, [[7.0 + 3.3 * (s * r - 1) for r in ROWS_PER_SEQ] for s in SEQS])


def test_the_surface_prices_rows_over_sequences():
    assert SURFACE.batch_cost(5, 1) == CPU.cost(5)  # one sequence: the curve itself
    assert SURFACE.batch_cost(4, 4) == 7.0 + 3.3 * 3  # measured points
    assert SURFACE.batch_cost(32, 4) == 7.0 + 3.3 * 31
    assert SURFACE.batch_cost(12, 4) == 7.0 + 3.3 * 11  # 3 rows each: between the measured 2 and 4
    assert SURFACE.batch_cost(3, 3) == (SURFACE.batch_cost(2, 2) + SURFACE.batch_cost(4, 4)) / 2
    assert SURFACE.batch_cost(16, 16) == 2 * SURFACE.batch_cost(8, 8)  # past 8 sequences: proportional
    assert SURFACE.batch_cost(64, 2) > SURFACE.batch_cost(32, 2)  # a prompt chunk beside: the slope goes on
    alone = CostCurve(CPU.verify_ms, 2, 256)  # a curve without the surface prices as one sequence
    assert alone.batch_cost(4, 4) == CPU.cost(4)


def test_a_path_is_priced_on_the_batch_it_joins():
    rates = [0.9] * 7
    alone = choose_path_len(rates, 7, SURFACE)
    assert alone == choose_path_len(rates, 7, SURFACE, batch=StepBatch())  # alone: the batch of one
    assert alone > 0
    # beside 3 other streams each row costs the same 3.3 ms but the step already commits 4 tokens:
    # a path must beat 4 tokens per c(4), not 1 per c(1)
    assert choose_path_len(rates, 7, SURFACE, batch=StepBatch(rows=4, seqs=4, tokens=4.0)) < alone
    assert choose_path_len([0.99] * 7, 7, SURFACE, batch=StepBatch(rows=8, seqs=8, tokens=8.0)) > 0
    b = StepBatch(rows=4, seqs=4, tokens=4.0)
    b.add(3, 2.5, 1.0)
    assert (b.rows, b.tokens, b.draft_ms) == (7, 5.5, 1.0)
    b.add(0, 1.0, 9.0)  # plain: nothing joins
    assert (b.rows, b.tokens, b.draft_ms) == (7, 5.5, 1.0)


def test_lookup_proposes_what_followed_the_latest_match():
    d = PromptLookupDrafter(max_ngram=3)
    toks = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert d.lookup(toks, 2) == [7, 8]  # the most recent earlier "1 2 3" was followed by 7 8
    assert d.lookup([5, 6, 7], 4) == []  # no repeat, nothing to propose
    assert d.lookup([4, 4, 4, 4], 3) == [4]  # overlap: the match at 0 has one token after it within L-1
    assert d.lookup(toks, 0) == []


class _Slot:
    n_past, max_new, output = 100, 1000, [1]


def test_failed_probes_back_off_and_auto_retires():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    # on the flat GPU curve a probe is cheap, so the back-off, not the cost floor, spaces them
    st = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, GPU, record=DrafterRecord(prior=0.0))
    probes = []
    for step in range(400):
        t = st.path_len(_Slot)
        if t:
            probes.append(step)
            st.observe_acceptance(t, 0)  # every probe misses
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # backing off
    assert st.retired and st.path_len(_Slot) == 0  # auto gave up on a useless drafter


def test_a_hit_resets_the_probe_interval():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    st = SpecState(SpecParams(mode="lookup"), PromptLookupDrafter(), 8, 4096, GPU, record=DrafterRecord(prior=0.0))
    for _ in range(3):
        while not st.path_len(_Slot):
            pass
        st.observe_acceptance(1, 0)
    assert st.probe_every == 64 and not st.retired  # explicit modes never retire
    while not st.path_len(_Slot):
        pass
    st.observe_acceptance(1, 1)
    assert st.probe_every == 8


def test_probes_of_a_costly_drafter_are_rare():
    """A probe costs a draft call and an extra verify row: at 14 ms of draft per call the
    probes must be far enough apart to cost at most 1% of plain time."""
    from engine.speculative.params import SpecParams
    from engine.speculative.state import PROBE_BUDGET, DrafterRecord, SpecState

    rec = DrafterRecord(prior=0.0)
    rec.draft_ms = 14.0
    st = SpecState(SpecParams(mode="dflash"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    probes = [step for step in range(2000) if st.path_len(_Slot)]
    assert probes, "it must still probe now and then"
    gap = probes[0] + 1
    extra = CPU.cost(2) - CPU.cost(1) + 14.0
    assert extra / (gap * CPU.cost(1)) <= PROBE_BUDGET + 1e-9


def test_the_next_request_starts_from_what_the_last_one_learned():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    rec = DrafterRecord(prior=0.95)  # optimistic prior: the first request speculates at once
    first = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    assert first.path_len(_Slot) > 0
    for _ in range(300):  # a drafter that never hits (a few verifies, then probes)
        t = first.path_len(_Slot)
        if t:
            first.stats.record(t, 0)
            first.observe_acceptance(t, 0)
    first.free()
    second = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    assert second.accept_rate[0] < 0.3 and second.path_len(_Slot) == 0  # plain from the first step


def test_a_drafter_that_never_hits_is_marked_useless():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    rec = DrafterRecord()
    assert not rec.useless()  # untried: give it a chance
    for _ in range(6):  # requests whose probes and blocks all miss
        st = SpecState(SpecParams(mode="dflash"), PromptLookupDrafter(), 8, 4096, GPU, record=rec)
        for _ in range(4):
            st.stats.record(3, 0)
        st.free()
    assert rec.useless()
    good = DrafterRecord()
    st = SpecState(SpecParams(mode="dflash"), PromptLookupDrafter(), 8, 4096, GPU, record=good)
    for _ in range(30):
        st.stats.record(3, 1)
    st.free()
    assert not good.useless()


def test_auto_adds_the_draft_to_the_spans_only_while_it_pays():
    from engine.speculative.policy import EXPLORE_TRIALS, REFRESH, Policy

    class Named:
        def __init__(self, name):
            self.name = name

    policy = Policy(mode="auto", selector="walk", block=8, n_ctx=4096, n_vocab=100)
    for name in ("grammar+lookup", "grammar+lookup+dflash"):
        policy.add(Named(name))
    policy.curve = CPU
    assert policy._draft_adds()  # not tried yet: it is
    spans, mixed = policy.records["grammar+lookup"], policy.records["grammar+lookup+dflash"]
    for rec, draft_ms in ((spans, 0.0), (mixed, 6.0)):  # the same acceptance; the draft's call costs 6 ms
        rec.hits, rec.trials, rec.draft_ms = [90.0] * 15, [100.0] * 15, draft_ms
    assert mixed.trials[0] >= EXPLORE_TRIALS
    picks = [policy._draft_adds() for _ in range(2 * REFRESH)]
    assert picks.count(True) == 2 and picks[REFRESH - 1]  # only the refreshes
    mixed.draft_ms = 0.0
    mixed.hits = [99.0] * 15  # now it is the faster one
    assert policy._draft_adds()
