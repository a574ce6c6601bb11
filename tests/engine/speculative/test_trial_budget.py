"""Auto mode never much slower than plain decoding: a drafter losing time on a request is retired
for the rest of it, and trials of a drafter that has not paid here are bounded by a budget of the
time they cost. Pure logic, no model."""

from engine.speculative.costs import MIN_SAMPLES, CostModel
from engine.speculative.drafters.lookup import PromptLookupDrafter
from engine.speculative.params import SpecParams, SpecStats
from engine.speculative.policy import REFRESH, Policy
from engine.speculative.state import LOSS_SHARE, LOSS_SLACK, SpecState, TrialBudget, loss_ms

CPU = CostModel(2)  # a 2-core CPU's nearly linear curve: c(k) = 7 + 3.3 (k - 1) ms
for _ in range(MIN_SAMPLES):
    for k in range(1, 17):
        CPU.observe(k, 1, 7.0 + 3.3 * (k - 1))
C1 = CPU.cost(1)
SETTINGS = dict(mode="auto", selector="walk", block=8, n_ctx=4096, n_vocab=100)  # a policy's, bar drafters and costs


class Named:
    """A drafter as the policy sees it here: its mode's name."""

    def __init__(self, name):
        self.name = name


def answered(tokens: int, spent_per_token: float) -> SpecStats:
    """The stats of an answer that committed `tokens` tokens in verifies at `spent_per_token` x c(1)
    each (missed drafts make it more than 1, accepted ones less)."""
    return SpecStats(verifies=tokens // 2, committed=tokens, verify_ms=tokens * C1 * spent_per_token)


def test_loss_is_the_time_beyond_plain_decoding():
    s = SpecStats(plain_steps=2, plain_ms=2 * C1, draft_ms=3.0, upkeep_ms=1.0, verify_ms=0.0)
    assert loss_ms(s, C1) == 4.0
    gain = SpecStats(verifies=10, committed=40, verify_ms=10 * 2 * C1)  # 40 tokens for 20 plain tokens' time
    assert loss_ms(gain, C1) < 0


def test_a_losing_drafter_is_retired_in_auto_mode_only():
    for mode, retires in (("auto", True), ("lookup", False)):
        st = SpecState(SpecParams(mode=mode), PromptLookupDrafter(), 8, 4096, CPU)
        st.stats = answered(100, 1.0)
        assert not st.losing()  # as fast as plain
        st.stats.upkeep_ms = (LOSS_SHARE * 100 + LOSS_SLACK) * C1 * 0.9
        assert not st.losing()  # inside the allowance
        st.stats.upkeep_ms = (LOSS_SHARE * 100 + LOSS_SLACK) * C1 * 1.1
        assert st.losing() is retires  # a mode the user chose is theirs to keep


def test_a_fixed_block_or_unknown_costs_never_retire():
    st = SpecState(SpecParams(mode="auto"), PromptLookupDrafter(), 8, 4096, costs=None)
    st.stats = answered(100, 2.0)
    assert not st.losing()  # no learned c(1): nothing to judge the loss against


def test_trials_may_lose_only_a_share_of_the_time_served():
    budget = TrialBudget()
    assert budget.allows()  # nothing is known before the first trial
    budget.add(answered(100, 1.5), C1, trial=True)  # lost half its plain time
    assert budget.trials == 1 and budget.lost_ms == 50 * C1
    assert not budget.allows()
    for _ in range(200):  # answers chosen on their records: time served, nothing lost to trials
        budget.add(answered(100, 1.0), C1, trial=False)
    assert budget.lost_ms <= LOSS_SHARE * budget.served_ms and budget.allows()
    budget.add(answered(100, 0.5), C1, trial=True)  # a trial that paid costs nothing
    assert budget.lost_ms == 50 * C1


def test_auto_tries_an_untried_draft_only_while_the_budget_allows():
    policy = Policy({name: Named(name) for name in ("dflash", "lookup")}, CPU, **SETTINGS)
    assert policy.auto_drafter() == ("dflash", True)
    policy.budget.add(answered(100, 1.5), C1, trial=True)  # the trial lost: no second one for now
    assert policy.auto_drafter() == ("lookup", False)
    policy.records["dflash"].upkeep_ms = 3.0  # tried, and priced as slower than plain: refreshes only
    picks = [policy.auto_drafter() for _ in range(2 * REFRESH)]
    assert ("dflash", True) not in picks  # the budget is spent: not even the refreshes
    for _ in range(200):
        policy.budget.add(answered(100, 1.0), C1, trial=False)
    picks = [policy.auto_drafter() for _ in range(2 * REFRESH)]
    assert picks.count(("dflash", True)) == 2  # served time refills it: the refreshes come back


def test_the_budget_hears_of_every_auto_answer():
    policy = Policy({"lookup": PromptLookupDrafter()}, CPU, **SETTINGS)

    class Slot:
        cached, cached_drafter, seq_id = [], None, 0

    from engine.sampling import SamplingParams
    st = policy.state_for(SpecParams(mode="lookup"), SamplingParams(temperature=0), [1, 2, 3], Slot)
    assert st.budget is None  # a mode the user chose is not auto's to count
    st = policy.state_for(SpecParams(mode="auto"), SamplingParams(temperature=0), [1, 2, 3], Slot)
    assert st.budget is policy.budget and not st.trial
    st.stats = answered(50, 1.0)
    st.free()
    assert policy.budget.served_ms == 50 * C1 and policy.budget.trials == 0


def test_the_grammars_spans_are_never_retired_but_their_draft_trials_are_priced_against_them():
    st = SpecState(SpecParams(mode="auto"), Named("grammar+lookup+dflash"), 8, 4096, CPU)
    st.stats = answered(100, 2.0)
    assert not st.losing()  # retiring it would lose the forced spans too
    policy = Policy({name: Named(name) for name in ("grammar+lookup", "grammar+lookup+dflash")}, CPU, **SETTINGS)
    assert policy._baseline("grammar+lookup+dflash") == 1.0  # the spans measured nothing yet: plain
    policy.records["grammar+lookup"].gain.add(answered(100, 0.5), C1)  # the spans alone: 2x plain
    assert policy._baseline("grammar+lookup+dflash") == 2.0
    budget = TrialBudget()
    budget.add(answered(100, 0.8), C1, trial=True, baseline=2.0)  # 1.25x plain, but slower than the spans
    assert budget.lost_ms == (80 - 50) * C1 and not budget.allows()
