"""Greedy invariance: speculative output == plain output, token for token.

The first test of any speculative change. Drafters: prompt lookup, and a test-only
oracle that knows the plain answer and plants one wrong token at a chosen position of
every path, so acceptance stops (and rollback happens) at every possible position.
"""

from __future__ import annotations

import pytest

from conftest import TEST_CTX, dev_prompts
from engine import Completion, Engine, EngineConfig, SamplingParams
from engine.llama import ggml
from engine.speculative.costs import CURVE_ROWS, SEQ_BUCKETS, WINDOW, CostModel
from engine.speculative.drafters.base import Proposal, SeqView
from engine.speculative.params import SpecParams
from engine.speculative.drafters.base import Drafter

GREEDY = SamplingParams(temperature=0)


class OracleDrafter(Drafter):
    """Proposes the true plain continuation with token `(step % n_draft)` of each path wrong."""

    name = "oracle"

    def __init__(self):
        self.answers: dict[tuple, list[int]] = {}  # prompt tokens -> plain output tokens
        self.steps = 0

    def propose(self, seqs: list[SeqView], n_draft: int, unary=False) -> list[Proposal]:
        out = []
        for s in seqs:
            answer = next((a for p, a in self.answers.items() if list(p) == s.tokens[:len(p)]), None)
            if answer is None:
                out.append(Proposal([]))
                continue
            done = len(s.tokens) - len(next(p for p in self.answers if list(p) == s.tokens[:len(p)]))
            path = list(answer[done:done + n_draft])
            self.steps += 1
            wrong = self.steps % (n_draft + 1)  # == n_draft: no error, the whole path is right
            if wrong < len(path):
                path[wrong] = (path[wrong] + 1) % 49152
            out.append(Proposal(path))
        return out


@pytest.fixture(scope="module")
def prompts():
    ps = dev_prompts()
    return ps[::4]  # 15 of the 60 dev prompts, every category


@pytest.fixture(scope="module")
def oracle_engine(model_path):
    """An engine like conftest's `engine`, with this module's drafters (they join before it starts;
    each test gives the oracle the plain answers). Fixed blocks only: it needs no cost curve."""
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=4, n_threads=2),
                      drafters=(OracleDrafter(), FailingDrafter()))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def plain(engine, prompts):
    """prompt id -> (prompt tokens, plain greedy output tokens)."""
    out = {}
    for p in prompts:
        ids = engine.tokenize_prompt(engine.render_chat(p["messages"]))
        out[p["id"]] = (ids, engine.complete(ids, sampling=GREEDY, max_tokens=p["max_tokens"]).tokens)
    return out


def run_all(engine, prompts, spec: SpecParams, concurrent: bool) -> dict[str, Completion]:
    results = {}
    if concurrent:  # submitted together: the engine speculates for all of them in each step
        handles = {p["id"]: engine.generate(engine.render_chat(p["messages"]), sampling=GREEDY,
                                            max_tokens=p["max_tokens"], speculative=spec) for p in prompts}
        return {k: Completion.collect(iter(h)) for k, h in handles.items()}
    for p in prompts:
        results[p["id"]] = engine.complete(engine.render_chat(p["messages"]), sampling=GREEDY,
                                           max_tokens=p["max_tokens"], speculative=spec)
    return results


def first_difference(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def assert_invariant(plain, results):
    bad = {k: first_difference(plain[k][1], r.tokens) for k, r in results.items()}
    bad = {k: v for k, v in bad.items() if v is not None}
    assert not bad, f"prompt -> first differing token position: {bad}"


@pytest.mark.parametrize("block", [2, 4, 8])
@pytest.mark.parametrize("concurrent", [False, True], ids=["1seq", "4seq"])
def test_lookup_is_lossless(engine, prompts, plain, block, concurrent):
    results = run_all(engine, prompts, SpecParams(mode="lookup", block=block), concurrent)
    assert_invariant(plain, results)
    assert sum(r.usage.speculation.verifies for r in results.values()) > 0  # it did speculate


@pytest.mark.parametrize("block", [2, 4, 8, 16])
@pytest.mark.parametrize("concurrent", [False, True], ids=["1seq", "4seq"])
def test_partial_acceptance_and_rollback_at_every_position(oracle_engine, prompts, plain, block, concurrent):
    oracle = oracle_engine.drafters["oracle"]
    oracle.answers, oracle.steps = {tuple(ids): out for ids, out in plain.values()}, 0
    results = run_all(oracle_engine, prompts, SpecParams(mode="oracle", block=block), concurrent)
    assert_invariant(plain, results)
    stats = [r.usage.speculation for r in results.values()]
    accepted_at = [s.acceptance_by_position for s in stats if s.verifies]
    assert max(len(a) for a in accepted_at) == block - 1  # full-length paths were verified
    assert any(0 < x < 1 for a in accepted_at for x in a)  # acceptance stopped at inner positions
    tau = sum(s.tau * s.verifies for s in stats) / sum(s.verifies for s in stats)
    assert tau > 1.0


def test_llama_build_is_batch_invariant(engine):
    """Measured at load: verify batches of 2..16 rows give the single-token logits bit for bit
    (llamafile's sgemm breaks that; scripts/setup.sh builds without it). CUDA does not."""
    assert engine.speculation.exactness.exact, f"{engine.speculation.exactness.why} (run scripts/setup.sh)"
    assert engine.speculation.enabled and "bit-identical" in engine.speculation.exactness.why


def test_exactness_probe_leaves_the_context_as_it_found_it(model_path):
    """The engine probes before its worker starts, on a sequence requests will use: nothing
    of the probe may remain in the KV cache."""
    import llama_cpp

    from engine.llama.context import Context, ContextConfig
    from engine.llama.model import Model
    from engine.speculative.exactness import verify_is_exact

    model = Model(model_path)
    ctx = Context(model, ContextConfig(n_ctx_seq=256, n_seq=2, n_batch=64, n_threads=2))
    try:
        exact, why = verify_is_exact(ctx, seq_id=1)
        assert exact, why
        assert all(llama_cpp.llama_memory_seq_pos_max(ctx.memory, s) == -1 for s in (0, 1))
        exact, why = verify_is_exact(ctx, seq_id=1, sizes=(4,))  # again: a clean start each time
        assert exact, why
    finally:
        ctx.close()
        model.close()


class FailingDrafter(Drafter):
    """Fails in propose() on odd calls and in observe() after a while: requests must not notice."""

    name = "failing"

    def __init__(self):
        self.calls = 0
        self.observed = 0

    def observe(self, committed):
        self.observed += 1
        if self.observed > 40:
            from engine.speculative.drafters.dflash import DraftStepError

            raise DraftStepError("lost track (test)")

    def propose(self, seqs, n_draft, unary=False):
        self.calls += 1
        if self.calls % 2:
            from engine.speculative.drafters.dflash import DraftStepError

            raise DraftStepError("no block this time (test)")
        return [Proposal([1, 2, 3][:n_draft]) for _ in seqs]


def test_a_failing_drafter_costs_speculation_not_requests(oracle_engine, prompts, plain):
    failing = oracle_engine.drafters["failing"]
    failing.calls = failing.observed = 0
    results = run_all(oracle_engine, prompts[:4], SpecParams(mode="failing", block=4), concurrent=True)
    assert_invariant(plain, results)
    assert all(r.finish_reason in ("stop", "length") for r in results.values())
    # plain decoding alone would pass the checks above: the drafter must have failed both ways
    assert failing.calls >= 2, f"propose() called {failing.calls} times: it never failed and then proposed"
    assert failing.observed > 40, f"observe() called {failing.observed} times: it never lost a sequence"


@pytest.fixture(scope="module")
def auto_engine(model_path, prompts, tmp_path_factory):
    """An engine in auto mode without a paired draft whose chooser prices paths on a fixed curve on
    which a path's rows cost little beside the step they join, so that it verifies wherever prompt
    lookup offers a copy. On this machine's measured costs the chooser may decode everything plainly
    (it once did in CI), and the test then proved nothing. A slot per prompt: every request is admitted
    before any answer ends, so auto mode picks lookup for all of them before any record of lookup's
    measured gain could turn it off. c(1) is large, so that no request retires lookup before its
    first copy (its plain steps are priced at c(1) until it has timed a few of its own)."""
    cache = tmp_path_factory.mktemp("auto") / "verify-cost.json"
    curve = CostModel(2, ggml.build_id())
    for _ in range(WINDOW):
        for rows in range(1, CURVE_ROWS + 1):
            curve.observe(rows, 1, 1000.0)  # flat: a path's rows in a ubatch of their own cost one c(1)
            for seqs in SEQ_BUCKETS[1:]:
                curve.observe(rows, seqs, 100_000.0)  # the shared step: a path's c(1) adds 1% to it
    curve.save(cache)
    assert len(prompts) <= 16
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=16, n_threads=2, cost_cache=str(cache)))
    try:
        sp = eng.speculation
        assert sp.curve_ready.is_set() and sp.costs.cost(1) == 1000.0, "the fixed curve was not loaded"
        eng.speculation.costs.observe = lambda rows, seqs, ms: None  # the curve stays fixed: decodes teach it nothing
        yield eng
    finally:
        eng.close()


def test_auto_mode_with_the_chooser_is_lossless(auto_engine, prompts, plain):
    """auto without a paired draft: prompt lookup, the path length chosen per step (or plain) by the
    chooser, which must have verified some paths for this to test speculation."""
    results = run_all(auto_engine, prompts, SpecParams(mode="auto"), concurrent=True)
    assert_invariant(plain, results)
    assert all(r.usage.speculation.mode == "lookup" for r in results.values())
    stats = [r.usage.speculation for r in results.values()]
    assert sum(s.verifies for s in stats) > 0, "the chooser never verified a path: nothing speculative was tested"
    assert sum(s.plain_steps for s in stats) > 0  # and decoded plainly where lookup had nothing to offer
