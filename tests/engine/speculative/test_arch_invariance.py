"""Lossless speculation on every architecture the catalog offers, each on its tiny random target
(gguf_tools.random_targets): dense qwen3, hybrid recurrent qwen35 and qwen35moe (Gated DeltaNet
state, rolled back through llama.cpp's per-sequence snapshots), sliding-window gemma4 and
muse-glimmer (a 32-token window the prompts cross).

Per architecture, greedy output under speculation is token-identical to plain decoding:
prompt lookup, DFlash 2 (walk and dp) and DFlash v1, blocks 2/4/8, four sequences at once and
one at a time, a chat's second turn (prefix reuse) and a JSON-schema grammar; plus a chi-square
test at temperature 1 on the hybrid qwen35. The drafts are random, so DFlash paths are mostly
rejected (the deepest rollbacks), and random models rarely repeat themselves, so prompt lookup
seldom finds a path. Every other depth comes from an oracle drafter: it proposes plain decoding's
own continuation with one wrong token at a position that cycles, so each verify accepts a known
number of tokens and rolls back the rest, at every depth a block allows.
"""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import dev_prompts
from engine import Completion, Engine, EngineConfig, SamplingParams
from engine.grammar.schema import compile_response_format
from engine.speculative.drafters.base import Drafter, Proposal
from engine.speculative.params import SpecParams
from gguf_tools.dflash import write_random_draft
from gguf_tools.random_targets import architectures, write_random_target
from test_spec_sampling import FixedPathDrafter, chi_square, critical

GREEDY = SamplingParams(temperature=0)
MAX_TOKENS = 40
N_CTX = 512
ARCHS = [a for a in architectures()]
SCHEMA = compile_response_format({"type": "json_schema", "json_schema": {"name": "order", "schema": {
    "type": "object", "properties": {"customer": {"type": "string"}, "quantity": {"type": "integer"},
                                     "rush": {"type": "boolean"}},
    "required": ["customer", "quantity", "rush"]}}})


class Tiny:
    """One architecture's tiny target, its plain engine and engines with a DFlash 2 and a v1 draft."""

    def __init__(self, arch: str, folder, model_path: str):
        self.arch = arch
        self.path = write_random_target(folder / f"tiny-{arch}.gguf", arch, tokenizer_from=model_path)
        self.engines: dict[str, Engine] = {}
        for kind in ("dflash2", "dflash1"):
            draft = folder / f"{kind}.gguf"
            extra = {"selector_top_k": 4, "selector_rank": 8} if kind == "dflash2" else {}
            write_random_draft(draft, self.path, seed=3, kind=kind, block_size=8, n_layer=1, **extra)
            # the drafters a test gives a path or the plain answers join before the engine starts
            self.engines[kind] = self._load((FixedPathDrafter([]),), draft=str(draft))
            assert "dflash" in self.engines[kind].drafters, self.engines[kind].speculation.draft_error
        self.engines["plain"] = self._load((OracleDrafter([]),), spec_mode="off")

    def _load(self, drafters, **kw) -> Engine:
        return Engine.load(str(self.path), EngineConfig(n_ctx=N_CTX, n_parallel=4, n_threads=2, **kw),
                           drafters=drafters)

    def close(self) -> None:
        for eng in self.engines.values():
            eng.close()


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, tmp_path_factory, model_path):
    t = Tiny(request.param, tmp_path_factory.mktemp(request.param), model_path)
    yield t
    t.close()


@pytest.fixture(scope="module")
def prompts():
    return dev_prompts()[1::10]  # 6 prompts, one per category; each longer than the 32-token window


@pytest.fixture(scope="module")
def plain(tiny, prompts):
    eng = tiny.engines["plain"]
    return {p["id"]: eng.chat(p["messages"], sampling=GREEDY, max_tokens=MAX_TOKENS).tokens for p in prompts}


def run(eng: Engine, prompts, spec: SpecParams, concurrent: bool = True, **kw) -> dict[str, Completion]:
    if concurrent:
        hs = {p["id"]: eng.generate(eng.render_chat(p["messages"]), sampling=GREEDY, max_tokens=MAX_TOKENS,
                                    speculative=spec, **kw) for p in prompts}
        return {k: Completion.collect(iter(h)) for k, h in hs.items()}
    return {p["id"]: eng.chat(p["messages"], sampling=GREEDY, max_tokens=MAX_TOKENS, speculative=spec, **kw)
            for p in prompts}


class OracleDrafter(Drafter):
    """Proposes what plain decoding wrote next, wrong at one position that cycles with the sequence
    length (all right once per cycle): accepted = that position, the rest rolled back."""

    name = "oracle"

    def __init__(self, sequences: list[list[int]]):
        self.sequences = sequences  # prompt + plain output, one per prompt

    def propose(self, seqs, n_draft, unary=False):
        out = []
        for sv in seqs:
            h = list(sv.tokens)
            ref = next((s for s in self.sequences if s[:len(h)] == h), None)
            if ref is None:
                out.append(Proposal())
                continue
            path = list(ref[len(h):len(h) + n_draft])
            wrong = len(h) % (n_draft + 1)  # == n_draft: nothing wrong this time
            if wrong < len(path):
                path[wrong] = (path[wrong] + 1) % 49152
            out.append(Proposal(path))
        return out


def assert_same(plain: dict, got: dict[str, Completion], what: str, verified: bool = True) -> Counter:
    bad = {k: next((i for i, (a, b) in enumerate(zip(plain[k], c.tokens)) if a != b), len(c.tokens))
           for k, c in got.items() if c.tokens != plain[k]}
    assert not bad, f"{what}: prompt -> first differing token: {bad}"
    stats = [c.usage.speculation for c in got.values()]
    total = Counter()
    for s in stats:
        total.update({k: getattr(s, k) for k in ("verifies", "drafted", "accepted")})
    assert total["verifies"] > 0 or not verified, f"{what}: nothing was verified"
    return total


def test_speculation_is_possible_on_it(tiny):
    for kind in ("dflash2", "dflash1"):
        eng = tiny.engines[kind]
        assert eng.speculation.exactness.exact and eng.speculation.enabled, eng.speculation.exactness.why


@pytest.mark.parametrize("block", [2, 4, 8])
def test_lookup_is_lossless_4seq(tiny, prompts, plain, block):
    assert_same(plain, run(tiny.engines["dflash2"], prompts, SpecParams(mode="lookup", block=block)),
                f"{tiny.arch} lookup B={block}", verified=False)  # random text seldom repeats: few lookups


@pytest.mark.parametrize("block", [2, 4, 8, 16])
@pytest.mark.parametrize("concurrent", [True, False], ids=["4seq", "1seq"])
def test_every_rollback_depth_is_lossless(tiny, prompts, plain, block, concurrent):
    eng = tiny.engines["plain"]
    eng.drafters["oracle"].sequences = [eng.tokenize_prompt(eng.render_chat(p["messages"])) + plain[p["id"]]
                                        for p in prompts]
    got = run(eng, prompts, SpecParams(mode="oracle", block=block), concurrent)
    total = assert_same(plain, got, f"{tiny.arch} oracle B={block}")
    assert 0 < total["accepted"] < total["drafted"], total


@pytest.mark.parametrize("selector", ["walk", "dp"])
@pytest.mark.parametrize("block", [2, 4, 8])
def test_dflash2_is_lossless_4seq(tiny, prompts, plain, selector, block):
    spec = SpecParams(mode="dflash", selector=selector, block=block)
    got = run(tiny.engines["dflash2"], prompts, spec)
    total = assert_same(plain, got, f"{tiny.arch} DFlash 2 {selector} B={block}")
    assert total["accepted"] < total["drafted"]  # a random draft: rejected tails were rolled back


@pytest.mark.parametrize("block", [2, 4, 8])
def test_dflash1_is_lossless_4seq(tiny, prompts, plain, block):
    got = run(tiny.engines["dflash1"], prompts, SpecParams(mode="dflash", block=block))
    assert_same(plain, got, f"{tiny.arch} DFlash v1 B={block}")
    assert all(c.usage.speculation.selector is None for c in got.values())  # top-1 per slot, no lattice


@pytest.mark.parametrize("engine_kind,mode", [("dflash2", "lookup"), ("dflash2", "dflash"), ("dflash1", "dflash")])
def test_one_sequence_at_a_time_is_lossless(tiny, prompts, plain, engine_kind, mode):
    got = run(tiny.engines[engine_kind], prompts, SpecParams(mode=mode, block=8), concurrent=False)
    assert_same(plain, got, f"{tiny.arch} {engine_kind} {mode}, one sequence")


@pytest.mark.parametrize("engine_kind,mode", [("dflash2", "lookup"), ("dflash2", "dflash"), ("dflash1", "dflash")])
def test_a_chats_second_turn_is_lossless(tiny, prompts, engine_kind, mode):
    """Turn 1, then turn 2 (turn 1's messages, its answer, a new question) in the same slot: the second
    prompt starts with what the first request left in the cache, which the engine may reuse."""
    first = prompts[0]["messages"]
    spec, plain_eng, eng = SpecParams(mode=mode, block=4), tiny.engines["plain"], tiny.engines[engine_kind]
    answer = plain_eng.chat(first, sampling=GREEDY, max_tokens=MAX_TOKENS).text
    second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
    want = plain_eng.chat(second, sampling=GREEDY, max_tokens=MAX_TOKENS).tokens
    a = eng.chat(first, sampling=GREEDY, max_tokens=MAX_TOKENS, speculative=spec)
    assert a.text == answer
    b = eng.chat(second, sampling=GREEDY, max_tokens=MAX_TOKENS, speculative=spec)
    assert b.tokens == want, f"{tiny.arch}: the second turn differs (reused {b.usage.cached_tokens} prompt tokens)"
    # at least turn 1's prompt; where prompts are cut at fixed positions (engine/chunks.py), its whole chunks
    assert b.usage.cached_tokens >= eng.chunks.reusable(len(eng.tokenize_prompt(eng.render_chat(first)))) > 0
    print(f"{tiny.arch} {engine_kind}/{mode}: second turn reused {b.usage.cached_tokens} prompt tokens")


@pytest.mark.parametrize("engine_kind,mode", [("dflash2", "lookup"), ("dflash2", "dflash"), ("dflash1", "dflash")])
def test_lossless_under_a_json_schema(tiny, prompts, engine_kind, mode):
    msgs = [{"role": "user", "content": "Order: 40 mugs for Lin's Bakery, rush. Answer in JSON."}]
    plain_eng, eng = tiny.engines["plain"], tiny.engines[engine_kind]
    ids = plain_eng.tokenize_prompt(plain_eng.render_chat(msgs))
    want = plain_eng.complete(ids, sampling=GREEDY, max_tokens=64, grammar=SCHEMA.grammar).tokens
    for block in (2, 8):
        got = eng.complete(ids, sampling=GREEDY, max_tokens=64, grammar=SCHEMA.grammar,
                           speculative=SpecParams(mode=mode, block=block))
        assert got.tokens == want, f"{tiny.arch} {mode} B={block} under a grammar"


N_DRAWS = 300


def test_sampling_on_a_recurrent_target_matches_plain_sampling(tiny):
    """Temperature 1, top_k 3: the first tokens drawn plainly and through verify + rollback of the
    hybrid target's recurrent state (a fixed path, accepted sometimes) are the same distribution."""
    if tiny.arch != "qwen35":
        pytest.skip("run on one recurrent target")
    eng = tiny.engines["dflash2"]
    prompt = eng.render_chat([{"role": "user", "content": "Name a colour."}])
    greedy = eng.complete(prompt, sampling=GREEDY, max_tokens=3).tokens
    eng.drafters["fixed"].path = greedy[1:]

    def draws(spec, seed0):
        return [eng.complete(prompt, max_tokens=3, speculative=spec,
                             sampling=SamplingParams(temperature=1.0, top_k=3, seed=seed0 + i)).tokens
                for i in range(N_DRAWS)]

    plain = draws(SpecParams(mode="off"), 0)
    spec = draws(SpecParams(mode="fixed", block=3), 100_000)
    for pos in (1, 2):
        a, b = Counter(t[pos] for t in plain if len(t) > pos), Counter(t[pos] for t in spec if len(t) > pos)
        assert len(a) >= 2, "the target must spread its choices for this test to mean anything"
        stat, dof = chi_square(a, b)
        assert stat < critical(dof), f"position {pos}: chi2 {stat:.1f} ({dof} dof); plain {a}, spec {b}"
