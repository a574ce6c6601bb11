"""Plain DFlash (v1) drafts: no candidate selector, the block decode gives the draft's logits per
slot and the drafter proposes each slot's top-1 as a path (like prompt lookup), which the loop
verifies as a point mass.

First greedy invariance in the engine (blocks 2/4/8, one and four concurrent sequences, auto
mode, a selector asked for but not applicable), then temperature > 0, then the drafter itself:
paths (never lattices) read from the right logits rows, checked against a DFlash 2 draft with
the same weights and identity convolutions (whose `top1` path must be the same), and the
refusals of what the v1 drafter cannot run. The draft is random, so acceptance is low: what
is tested is that drafting, injection, verification and rollback never change a token.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_dflash_drafter import PROMPTS, prefill, rig, view
from test_dflash_invariance import GREEDY, MAX_TOKENS, run

from conftest import TEST_CTX, dev_prompts, dflash_engine_on
from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.drafters.dflash import DFlashDrafter, DraftRefused
from engine.speculative.params import SpecParams
from engine.speculative.select import select
from engine.speculative.state import DrafterRecord
from engine.models.store import ModelStore, no_progress
from gguf_tools.dflash import DraftConfig, random_tensors, read_draft, write_dflash_draft, write_random_draft

@pytest.fixture(scope="module")
def v1_path(tmp_path_factory, model_path) -> str:
    path = tmp_path_factory.mktemp("dflash1") / "random-dflash1.gguf"
    write_random_draft(path, model_path, seed=7, kind="dflash1")
    return str(path)


@pytest.fixture(scope="module")
def v1_engine(model_path, v1_path):
    with dflash_engine_on(model_path, v1_path) as eng:
        yield eng


@pytest.fixture(scope="module")
def prompts():
    return dev_prompts()[1::10]  # 6 prompts, one per category


@pytest.fixture(scope="module")
def plain(engine, prompts):
    return {p["id"]: engine.chat(p["messages"], sampling=GREEDY, max_tokens=MAX_TOKENS).tokens for p in prompts}


# -- the engine: lossless -----------------------------------------------------------------

@pytest.mark.parametrize("block", [2, 4, 8])
def test_dflash1_is_lossless_4seq(v1_engine, prompts, plain, block):
    assert v1_engine.drafters["dflash"].kind == "dflash1"
    got = run(v1_engine, prompts, SpecParams(mode="dflash", block=block), concurrent=True)
    bad = {k: c.tokens for k, c in got.items() if c.tokens != plain[k]}
    assert not bad, f"speculative output differs for {sorted(bad)}"
    stats = [c.usage.speculation for c in got.values()]
    assert all(s.mode == "dflash" and s.selector is None for s in stats)  # no lattice: no selector
    assert sum(s.verifies for s in stats) > 0 and all(s.select_ms == 0 for s in stats)
    assert max(len(s.drafted_at) for s in stats) == block - 1  # a fixed block drafts B-1 slots


def test_dflash1_is_lossless_1seq_and_a_selector_does_not_apply(v1_engine, prompts, plain):
    got = run(v1_engine, prompts, SpecParams(mode="dflash", block=8, selector="viterbi"), concurrent=False)
    assert {k: c.tokens for k, c in got.items()} == plain
    assert all(c.usage.speculation.selector is None and c.usage.speculation.verifies > 0
               for c in got.values())


def test_auto_mode_with_a_dflash1_draft_is_lossless(v1_engine, prompts, plain):
    v1_engine.speculation.policy.records["dflash"] = DrafterRecord()  # untried: auto gives the draft its chance
    got = run(v1_engine, prompts, SpecParams(mode="auto"), concurrent=True)
    assert {k: c.tokens for k, c in got.items()} == plain
    modes = [got[p["id"]].usage.speculation.mode for p in prompts]
    assert modes[:4] == ["dflash"] * 4 and set(modes) <= {"dflash", "lookup"}


def test_dflash1_samples_at_temperature(v1_engine, prompts):
    """At T > 0 the deterministic v1 path goes through rejection sampling as a point mass: the
    answers complete, within the vocabulary, with verifies on every one of them."""
    hot = SamplingParams(temperature=0.8, top_p=0.95)
    got = run(v1_engine, prompts[:4], SpecParams(mode="dflash", block=4), concurrent=True, sampling=hot)
    for c in got.values():
        assert 0 < len(c.tokens) <= MAX_TOKENS and all(0 <= t < 49152 for t in c.tokens)
        assert c.usage.speculation.mode == "dflash" and c.usage.speculation.verifies > 0


# -- the drafter: paths from the right rows -----------------------------------------------

def test_dflash1_proposes_paths_not_lattices(target_model, v1_path):
    a, b = (target_model.tokenize(p) for p in PROMPTS)
    with rig(target_model, v1_path, n_seq=4) as (ctx, drafter):
        assert drafter.kind == "dflash1" and drafter.info.top_k == 0 and drafter.ctx.lattice_rows() is None
        prefill(ctx, drafter, {0: a, 1: a, 2: b, 3: a})
        props = drafter.propose([view(3, a), view(0, a), view(2, b), view(1, a)], 7, unary=True)
        for p in props:
            assert p.lattice is None and len(p.path) == 7 and p.n_blocks == 4 and p.draft_ms > 0
            assert all(isinstance(t, int) and 0 <= t < target_model.n_vocab for t in p.path)
        assert props[0].path == props[1].path == props[3].path  # same history, same path
        for j, p in enumerate(props):  # the logits of this decode stay readable until the next one
            want = [int(np.argmax(drafter.ctx.logits_row(j * 8 + t))) for t in range(1, 8)]
            assert p.path == want
        alone = drafter.propose([view(1, a)], 7)[0]
        assert alone.path == props[3].path  # drafting beside others changes nothing
        longest = drafter.propose([view(s, a if s != 2 else b) for s in range(4)], 15)  # block_size 16
        assert all(len(p.path) == 15 for p in longest)
        assert drafter.draft_pos_max(0) == len(a) + 15  # the block sits in the draft KV until observed


def test_dflash1_path_is_the_top1_of_a_dflash2_draft_with_the_same_weights(tmp_path, target_model, model_path):
    """DFlash 2 with identity convolutions and no dynamic part computes the same logits as the
    plain DFlash draft with the same weights; its top1 path (the best candidate's logit per
    slot) must then be exactly the v1 path, which proves the v1 rows are not shifted."""
    v2cfg = DraftConfig.for_target(model_path, block_size=8)
    w2 = random_tensors(v2cfg, seed=11, conv_std=0.0)
    v1cfg = DraftConfig.for_target(model_path, block_size=8, kind="dflash1")
    w1 = {k: v for k, v in w2.items() if not (k.startswith("selector_") or "_conv_" in k)}
    write_dflash_draft(tmp_path / "v2.gguf", v2cfg, w2, model_path)
    write_dflash_draft(tmp_path / "v1.gguf", v1cfg, w1, model_path)
    toks = target_model.tokenize(PROMPTS[1])
    out = {}
    for kind in ("v1", "v2"):
        with rig(target_model, str(tmp_path / f"{kind}.gguf"), n_seq=1) as (ctx, drafter):
            prefill(ctx, drafter, {0: toks})
            (p,) = drafter.propose([view(0, toks)], 7, unary=kind == "v2")
            logits = np.stack([drafter.ctx.logits_row(t).copy() for t in range(1, 8)])  # [7, n_vocab]
            out[kind] = (p, logits)
    (p1, lg1), (p2, lg2) = out["v1"], out["v2"]
    np.testing.assert_allclose(lg1, lg2, rtol=0, atol=1e-4)
    top1 = select(p2.lattice.rows, 7, 16, "top1", unary=p2.lattice.unary)
    assert p1.path == top1.ids.tolist() == np.argmax(lg2, axis=1).tolist()


# -- refusals -------------------------------------------------------------------------------

def refused(path, target, *words: str) -> None:
    with pytest.raises(DraftRefused) as info:
        DFlashDrafter(str(path), target)
    msg = str(info.value)
    assert "HINT" in msg and all(w in msg for w in words), msg


def test_what_the_dflash1_drafter_cannot_run_is_refused(tmp_path, target_model, model_path):
    cfg = DraftConfig.for_target(model_path, kind="dflash1")
    keep = np.arange(0, 49152, 4, dtype=np.int64)
    write_dflash_draft(tmp_path / "d2t.gguf", cfg, random_tensors(cfg, keep_ids=keep), model_path)
    refused(tmp_path / "d2t.gguf", target_model, "reduced vocabulary (d2t)")
    deep = DraftConfig.for_target(model_path, kind="dflash1", target_n_layer=64, target_layers=(2, 9, 40))
    write_dflash_draft(tmp_path / "deep.gguf", deep, random_tensors(deep), model_path)
    refused(tmp_path / "deep.gguf", target_model, "[2, 9, 40]", "30 layers")
    narrow = tmp_path / "narrow.gguf"
    write_random_draft(narrow, model_path, kind="dflash1", n_embd=320, n_head=5, n_head_kv=5, n_ff=640)
    refused(narrow, target_model, "n_embd is 320", "576")


def test_an_engine_with_a_refused_draft_runs_without_it(tmp_path, model_path):
    cfg = DraftConfig.for_target(model_path, kind="dflash1", target_n_layer=64, target_layers=(2, 40))
    write_dflash_draft(tmp_path / "deep.gguf", cfg, random_tensors(cfg), model_path)
    eng = Engine.load(model_path, EngineConfig(n_ctx=TEST_CTX, n_parallel=1, n_threads=2,
                                               draft=str(tmp_path / "deep.gguf")))
    try:
        assert "dflash" not in eng.drafters and "30 layers" in eng.speculation.draft_error
    finally:
        eng.close()


def test_a_dflash1_draft_pairs_through_the_store(tmp_path, model_path, v1_path):
    """ModelStore.pair checks a draft with inspect_draft: a v1 draft fits, one it cannot run does not."""
    s = ModelStore(tmp_path / "home")
    s.import_file(model_path, "shop", progress=no_progress)
    m = s.pair("shop", v1_path, progress=no_progress)
    assert m.draft == "draft.gguf" and read_draft(m.draft_path).kind == "dflash1"
    cfg = DraftConfig.for_target(model_path, kind="dflash1")
    write_dflash_draft(tmp_path / "d2t.gguf", cfg, random_tensors(cfg, keep_ids=np.arange(0, 49152, 4)), model_path)
    with pytest.raises(DraftRefused, match="d2t"):
        s.pair("shop", tmp_path / "d2t.gguf", progress=no_progress)
    assert open(s.get("shop").draft_path, "rb").read() == open(v1_path, "rb").read()  # the paired one stays
