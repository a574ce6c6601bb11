"""The block-length chooser and prompt lookup: pure logic, no model."""

from engine.speculative.chooser import StepBatch, choose_path_len, expected_committed
from engine.speculative.costs import MIN_SAMPLES, CostModel
from engine.speculative.drafters.lookup import PromptLookupDrafter


def learned(ms: list[float], per_row: float | None = None, seqs: tuple[int, ...] = ()) -> CostModel:
    """A cost model that timed c(1..16) of one sequence as `ms`, and, with `per_row`, decodes of
    1..16 rows each over `seqs` sequences at a fixed part plus `per_row` ms per row."""
    model = CostModel(2)
    for _ in range(MIN_SAMPLES):
        for k, x in enumerate(ms, 1):
            model.observe(k, 1, x)
        for s in seqs:
            for r in range(s, 17):
                model.observe(r, s, ms[0] + per_row * (r - 1))
    return model


# This machine's shape of the cost curve (docs/llama-cpp.md, What it costs here): nearly linear on a 2-core CPU.
CPU = learned([7.0, 13.0, 16.0, 19.3, 22.6, 25.9, 29.2, 32.6] + [32.6 + 3.3 * i for i in range(1, 9)])
GPU = learned([7.0 + 0.1 * k for k in range(16)])  # nearly flat up to 16 rows


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
SURFACE = learned([7.0 + 3.3 * (k - 1) for k in range(1, 17)], 3.3, seqs=(4, 8))


def test_a_path_is_priced_on_the_batch_it_joins():
    rates = [0.9] * 7
    alone = choose_path_len(rates, 7, SURFACE)
    assert alone == choose_path_len(rates, 7, SURFACE, batch=StepBatch())  # alone: the batch of one
    assert alone > 0
    # beside 3 other streams the step already commits 4 tokens for c(4), and the path's rows are
    # a ubatch of their own: a path must beat 4 tokens per c(4), not 1 per c(1)
    four = StepBatch({s: 1 for s in range(4)}, 4.0)
    assert choose_path_len(rates, 7, SURFACE, batch=four, seq_id=2) < alone
    four.add(3, 2, 2.5, 1.0)
    assert (four.rows, four.tokens, four.draft_ms) == ({0: 1, 1: 1, 2: 1, 3: 3}, 5.5, 1.0)
    four.add(0, 0, 1.0, 9.0)  # plain: nothing joins
    assert (four.rows, four.tokens, four.draft_ms) == ({0: 1, 1: 1, 2: 1, 3: 3}, 5.5, 1.0)
    assert four.cost(SURFACE) == SURFACE.cost(4, 4) + SURFACE.cost(2)
    assert four.cost(SURFACE, 0, 2) == SURFACE.cost(4, 4) + SURFACE.cost(2) + SURFACE.cost(2)


def test_lookup_proposes_what_followed_the_latest_match():
    d = PromptLookupDrafter(max_ngram=3)
    toks = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert d.lookup(toks, 2) == [7, 8]  # the most recent earlier "1 2 3" was followed by 7 8
    assert d.lookup([5, 6, 7], 4) == []  # no repeat, nothing to propose
    assert d.lookup([4, 4, 4, 4], 3) == [4]  # overlap: the match at 0 has one token after it within L-1
    assert d.lookup(toks, 0) == []


class _Slot:
    seq_id, n_past, max_new, output = 0, 100, 1000, [1]


def test_failed_probes_back_off_and_auto_retires():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    # on the flat GPU curve a probe is cheap, so the back-off, not the cost floor, spaces them
    st = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, GPU, record=DrafterRecord(prior=0.0))
    probes = []
    for step in range(400):
        t = st.plan_path(_Slot)
        if t:
            probes.append(step)
            st.observe_acceptance(t, 0)  # every probe misses
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # backing off
    assert st.retired and st.plan_path(_Slot) == 0  # auto gave up on a useless drafter


def next_probe(st, most: int = 1000) -> int:
    """Plain steps until `st` probes again; a state that stopped probing fails here instead of
    spinning until the suite's timeout (the longest gap these tests expect is 64 steps)."""
    for step in range(most):
        if st.plan_path(_Slot):
            return step
    raise AssertionError(f"no probe in {most} steps (probe_every {st.probe_every}, retired {st.retired})")


def test_a_hit_resets_the_probe_interval():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    st = SpecState(SpecParams(mode="lookup"), PromptLookupDrafter(), 8, 4096, GPU, record=DrafterRecord(prior=0.0))
    for _ in range(3):
        next_probe(st)
        st.observe_acceptance(1, 0)
    assert st.probe_every == 64 and not st.retired  # explicit modes never retire
    next_probe(st)
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
    probes = [step for step in range(2000) if st.plan_path(_Slot)]
    assert probes, "it must still probe now and then"
    gap = probes[0] + 1
    extra = CPU.cost(2) - CPU.cost(1) + 14.0
    assert extra / (gap * CPU.cost(1)) <= PROBE_BUDGET + 1e-9


def test_the_next_request_starts_from_what_the_last_one_learned():
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    rec = DrafterRecord(prior=0.95)  # optimistic prior: the first request speculates at once
    first = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    assert first.plan_path(_Slot) > 0
    for _ in range(300):  # a drafter that never hits (a few verifies, then probes)
        t = first.plan_path(_Slot)
        if t:
            first.stats.record(t, 0)
            first.observe_acceptance(t, 0)
    first.free()
    second = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    assert second.accept_rate[0] < 0.3 and second.plan_path(_Slot) == 0  # plain from the first step


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

    named = {name: Named(name) for name in ("grammar+lookup", "grammar+lookup+dflash")}
    policy = Policy(named, CPU, mode="auto", selector="walk", block=8, n_ctx=4096, n_vocab=100)
    assert policy._draft_adds() == (True, True)  # not tried yet: it is, on trial
    spans, mixed = policy.records["grammar+lookup"], policy.records["grammar+lookup+dflash"]
    for rec, draft_ms in ((spans, 0.0), (mixed, 6.0)):  # the same acceptance; the draft's call costs 6 ms
        rec.hits, rec.trials, rec.draft_ms = [90.0] * 15, [100.0] * 15, draft_ms
    assert mixed.trials[0] >= EXPLORE_TRIALS
    picks = [policy._draft_adds() for _ in range(2 * REFRESH)]
    assert picks.count((True, True)) == 2 and picks[REFRESH - 1] == (True, True)  # only the refreshes, on trial
    assert picks.count((False, False)) == 2 * REFRESH - 2
    mixed.draft_ms = 0.0
    mixed.hits = [99.0] * 15  # now it is the faster one
    assert policy._draft_adds() == (True, False)  # chosen on its record


def test_a_forced_span_is_priced_at_what_forced_tokens_are_worth():
    """A combined drafter's path: the grammar's forced tokens are near certain, a copied run's first
    token is not. Priced by position alone (the drafter's mixed record) a long forced span is cut
    short; priced by source it goes through, and the copy after it only where it pays."""
    from engine.speculative.params import SpecParams
    from engine.speculative.state import DrafterRecord, SpecState

    rec = DrafterRecord(prior=0.5)
    for _ in range(100):  # what verified paths showed: forced tokens kept, copies' first tokens mostly not
        rec.observe_sources(["grammar"] * 6, 6)
        rec.observe_sources(["lookup"] * 4, 0 if _ % 5 else 4)
    st = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, CPU, record=rec)
    st.accept_rate = [0.5] * 7  # the positional estimate, mixed over both kinds of path
    span = ["grammar"] * 6 + ["lookup"]
    assert st.path_len(_Slot, available=7) < 6
    assert st.path_len(_Slot, available=7, sources=span) == 6  # the span, not the doubtful copy after it
    assert st.path_len(_Slot, available=4, sources=["lookup"] * 4) == 0


def test_a_draft_whose_upkeep_costs_more_than_its_paths_win_leaves_auto_to_lookup():
    """A DFlash draft copies the target's features on every committed token, verified or not: once a
    request has shown that upkeep, auto judges the draft with it counted, before its EXPLORE_TRIALS."""
    from engine.speculative.policy import EXPLORE_TRIALS, Policy

    class Named:
        def __init__(self, name):
            self.name = name

    policy = Policy({"dflash": Named("dflash")}, CPU, mode="auto", selector="walk", block=8, n_ctx=4096, n_vocab=100)
    rec = policy.records["dflash"]
    rec.draft_ms = 8.0
    assert rec.trials[0] < EXPLORE_TRIALS and policy.auto_drafter() == ("dflash", True)  # not tried yet
    rec.upkeep_ms = 3.0  # 3 ms a token, against c(1) = 7 ms: its paths cannot win that back
    assert policy.auto_drafter()[0] == "lookup"
    rec.upkeep_ms, rec.hits, rec.trials = 0.1, [99.0] * 15, [100.0] * 15  # cheap to keep, nearly always right
    assert policy.auto_drafter()[0] == "dflash"


def test_auto_follows_what_its_requests_measured():
    """Once requests have measured it (company, upkeep and misses in): a draft slower than prompt
    lookup leaves auto to lookup, and lookup slower than plain decoding leaves it to plain, each
    tried again every REFRESH-th request."""
    from engine.speculative.params import SpecStats
    from engine.speculative.policy import MIN_ANSWERS, REFRESH, Policy

    class Named:
        def __init__(self, name):
            self.name = name

    def answered(rec, speedup: float) -> None:
        for _ in range(MIN_ANSWERS):
            # 10 plain steps of 10 ms and 10 tokens verified: 200 ms plainly, spent 200 / speedup
            rec.gain.add(SpecStats(committed=10, plain_steps=10, plain_ms=100.0, verify_ms=200.0 / speedup - 100.0),
                         10.0)

    policy = Policy({name: Named(name) for name in ("dflash", "lookup")}, CPU,
                    mode="auto", selector="walk", block=8, n_ctx=4096, n_vocab=100)
    draft, lookup = policy.records["dflash"], policy.records["lookup"]
    draft.hits, draft.trials, draft.draft_ms, draft.upkeep_ms = [99.0] * 15, [100.0] * 15, 1.0, 0.1
    assert policy.auto_drafter()[0] == "dflash"  # its estimate pays, nothing measured against it
    answered(draft, 0.9)
    answered(lookup, 1.3)
    tried = [policy.auto_drafter() for _ in range(2 * REFRESH)]
    assert all(trial == (name == "dflash") for name, trial in tried)  # a retry is a trial: it gives up no kept prompt
    picks = [name for name, _ in tried]
    assert picks.count("dflash") == 2 and picks.count("lookup") == 2 * REFRESH - 2
    answered(lookup, 0.8)  # chat that copies nothing: lookup's misses cost more than its hits win
    answered(lookup, 0.8)
    assert lookup.gain.speedup < 1.0
    picks = [policy.auto_drafter()[0] for _ in range(2 * REFRESH)]
    assert picks.count("off") == 2 * REFRESH - 2 and picks.count("dflash") == 2
