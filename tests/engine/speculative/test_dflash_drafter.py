"""DFlashDrafter end to end on the real SmolLM2 target with a random DFlash 2 draft:
capture -> KV injection -> block decode -> lattice, on one and several sequences (and the
select stage's walk through it, against upstream's walk written out)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.speculative.drafters.base import SeqView
from engine.speculative.drafters.dflash import DFlashDrafter, DraftStepError
from engine.speculative.select import path_from
from gguf_tools.dflash import write_random_draft

K = 16
PROMPTS = ["The quick brown fox jumps over the lazy dog because",
           "Order 42: print 300 blue T-shirts, size M, logo on the back, deliver by"]


@pytest.fixture(scope="module")
def target(model_path):
    m = Model(model_path)
    yield m
    m.close()


@pytest.fixture(scope="module")
def draft_path(tmp_path_factory, model_path):
    path = tmp_path_factory.mktemp("dflash") / "draft.gguf"
    write_random_draft(path, model_path, seed=0)
    return str(path)


# One thread: under CPU contention (parallel test runs) ggml's 2-thread barrier spins and a decode
# gets ~10x slower; with one thread the file stays a few seconds either way.
@contextmanager
def rig(target, draft_path, n_seq=2, **kw):
    ctx = Context(target, ContextConfig(n_ctx_seq=256, n_seq=n_seq, n_batch=64, n_threads=1))
    drafter = DFlashDrafter(draft_path, target, **kw)
    try:
        drafter.attach(ctx)
        yield ctx, drafter
    finally:
        drafter.close()
        ctx.close()


def prefill(ctx, drafter, prompts: dict[int, list[int]]) -> None:
    """Decode the prompts on the target (one batch) and let the drafter observe every row."""
    b = ctx.batch
    b.clear()
    committed = []
    for seq_id, toks in prompts.items():
        for pos, tok in enumerate(toks):
            committed.append((seq_id, pos, b.add(tok, pos, seq_id, pos == len(toks) - 1)))
    ctx.decode(b)
    drafter.observe(committed)


def view(seq_id, toks, anchor=42):
    return SeqView(seq_id, toks + [anchor], len(toks))


def reference_walk(lattice: np.ndarray) -> list[int]:
    """Upstream's greedy walk written out plainly: predecessor 0, argmax, first max wins."""
    out, pred = [], 0
    for row in lattice[1:]:
        scores = row[K + pred * K:K + (pred + 1) * K]
        best = 0
        for b in range(1, K):
            if scores[b] > scores[best]:
                best = b
        out.append(int(row[best]))
        pred = best
    return out


def walked(p) -> list[int]:
    """The select stage's walk through a proposal's lattice (a path of B-1 tokens)."""
    return path_from(p.lattice, len(p.lattice.rows) - 1, "walk").tokens


def check_lattice(lat: np.ndarray, width: int, n_vocab: int) -> None:
    assert lat.shape == (width, 576) and lat.dtype == np.float32
    assert np.all(lat[0] == 0)  # the anchor slot carries no prediction
    ids = lat[1:, :K]  # [B-1, K]
    assert np.all(ids == np.round(ids)) and ids.min() >= 0 and ids.max() < n_vocab
    assert all(len(set(r.tolist())) == K for r in ids)  # top-K ids are distinct
    assert np.all(lat[1:, K + K * K:] == 0)  # padding after K + K*K
    slot1 = lat[1, K:K + K * K].reshape(K, K)  # [pred, cand]: one predecessor only (the anchor)
    assert np.all(slot1 == slot1[0])
    assert np.isfinite(lat[1:, K:K + K * K]).all()


def test_one_sequence_block(target, draft_path):
    toks = target.tokenize(PROMPTS[0])
    with rig(target, draft_path, n_seq=1) as (ctx, drafter):
        prefill(ctx, drafter, {0: toks})
        assert drafter.draft_pos_max(0) == len(toks) - 1
        (p,) = drafter.propose([view(0, toks)], 7)
        lat = p.lattice.rows
        check_lattice(lat, 8, target.n_vocab)
        assert p.path == [] and p.lattice.top_k == K  # a lattice, no path: selecting is the select stage's
        assert walked(p) == reference_walk(lat) and len(walked(p)) == 7
        assert p.draft_ms > 0 and p.n_blocks == 1
        assert drafter.draft_pos_max(0) == len(toks) + 7  # the block sits in the draft KV until observed
        again = drafter.propose([view(0, toks)], 7)[0]  # the stale block is replaced, not appended
        assert np.array_equal(again.lattice.rows, lat)
        (q,) = drafter.propose([view(0, toks)], 15)  # the longest block: block_size 16
        check_lattice(q.lattice.rows, 16, target.n_vocab)


def test_deterministic_across_runs(target, draft_path):
    toks = target.tokenize(PROMPTS[1])
    lats = []
    for _ in range(2):
        with rig(target, draft_path, n_seq=1) as (ctx, drafter):
            prefill(ctx, drafter, {0: toks})
            lats.append(drafter.propose([view(0, toks)], 7)[0].lattice.rows)
    assert np.array_equal(lats[0], lats[1])


def test_several_sequences_in_one_draft_pass(target, draft_path):
    a, b = (target.tokenize(p) for p in PROMPTS)
    with rig(target, draft_path, n_seq=4) as (ctx, drafter):
        prefill(ctx, drafter, {0: a, 1: a, 2: b, 3: a})
        props = drafter.propose([view(3, a), view(0, a), view(2, b), view(1, a)], 7)
        assert [p.n_blocks for p in props] == [4] * 4
        lats = [p.lattice.rows for p in props]
        for lat, p in zip(lats, props):
            check_lattice(lat, 8, target.n_vocab)
            assert walked(p) == reference_walk(lat)
        assert np.array_equal(lats[0], lats[1]) and np.array_equal(lats[0], lats[3])  # same history, same lattice
        assert not np.array_equal(lats[0], lats[2])
        alone = drafter.propose([view(1, a)], 7)[0].lattice.rows
        assert np.array_equal(alone, lats[3])  # drafting beside others changes nothing
        # more blocks than fit one ubatch (64 // 16 = 4 per decode) still works: split into decodes
        big = drafter.propose([view(s, a if s != 2 else b) for s in range(4)], 15)
        assert all(p.lattice.rows.shape[0] == 16 for p in big)


def test_verify_rollback_and_forget(target, draft_path):
    toks = target.tokenize(PROMPTS[0])
    n = len(toks)
    with rig(target, draft_path, n_seq=2) as (ctx, drafter):
        prefill(ctx, drafter, {0: toks, 1: toks})
        (p,) = drafter.propose([view(0, toks)], 5)
        # verify [anchor] + path on the target, commit the anchor and 2 path tokens
        b = ctx.batch
        b.clear()
        path = walked(p)
        rows = [b.add(t, n + j, 0, True) for j, t in enumerate([42] + path)]
        ctx.decode(b)
        ctx.forget(0, n + 3)  # target rollback of the rejected rows
        drafter.observe([(0, n + j, rows[j]) for j in range(3)])
        assert drafter.draft_pos_max(0) == n + 2  # block removed, 3 committed rows injected
        assert drafter.draft_pos_max(1) == n - 1  # the other sequence is untouched
        nxt = drafter.propose([SeqView(0, toks + [42] + path[:2] + [7], n + 3)], 5)[0]
        assert len(walked(nxt)) == 5
        drafter.forget(0)
        assert drafter.ctx.pos_max(0) == -1
        assert drafter.draft_pos_max(1) == n - 1
        skipped = drafter.propose([view(0, toks)], 5)[0]  # nothing observed: no path, no error
        assert skipped.path == [] and skipped.lattice is None and skipped.skipped


def test_long_prefill_is_injected_in_chunks(target, draft_path):
    toks = target.tokenize(" ".join(PROMPTS * 6))[:60]
    with rig(target, draft_path, n_seq=1, n_ubatch=16) as (ctx, drafter):
        assert drafter.n_ubatch == 16 and len(toks) > drafter.n_ubatch
        prefill(ctx, drafter, {0: toks})
        assert drafter.draft_pos_max(0) == len(toks) - 1
        assert len(walked(drafter.propose([view(0, toks)], 15)[0])) == 15


def test_sampled_path_through_a_real_lattice(target, draft_path):
    """At temperature > 0 the select stage draws the path and returns the proposal q it drew
    each token from; at 0 its walk is upstream's."""
    toks = target.tokenize(PROMPTS[0])
    with rig(target, draft_path, n_seq=1) as (ctx, drafter):
        prefill(ctx, drafter, {0: toks})
        p = drafter.propose([view(0, toks)], 6)[0]
        u = np.random.default_rng(5).random(6, dtype=np.float32)
        drawn = path_from(p.lattice, 6, "walk", 0.8, uniforms=u)
        assert drawn.cand_ids.shape == (6, K) and drawn.cand_q.shape == (6, K)
        assert np.allclose(drawn.cand_q.sum(axis=1), 1.0, atol=1e-5)
        assert all(tok in drawn.cand_ids[t].tolist() for t, tok in enumerate(drawn.tokens))
        greedy = path_from(p.lattice, 6, "walk")
        assert greedy.cand_ids is None and greedy.cand_q is None  # a point mass
        assert greedy.tokens == reference_walk(p.lattice.rows)


def test_misuse_is_refused_before_llama_cpp(target, draft_path):
    toks = target.tokenize(PROMPTS[0])
    ctx = Context(target, ContextConfig(n_ctx_seq=256, n_seq=2, n_batch=64, n_threads=1))
    drafter = DFlashDrafter(draft_path, target)
    try:
        with pytest.raises(DraftStepError, match="not attached"):
            drafter.observe([(0, 0, 0)])
        drafter.attach(ctx)
        with pytest.raises(DraftStepError, match="already attached"):
            drafter.attach(ctx)
        with pytest.raises(DraftStepError, match="has not decoded"):  # no target decode yet: would abort
            drafter.observe([(0, 0, 0)])
        prefill(ctx, drafter, {0: toks})
        for bad in ([(0, 1, 1), (0, 3, 3)], [(0, 0, 64)], [(2, 0, 0)], [(1, 0, 0)]):
            with pytest.raises(DraftStepError):
                drafter.observe(bad)
        for n_draft in (0, 16, 40):  # the block would exceed block_size (16) or be empty
            with pytest.raises(DraftStepError, match="n_draft"):
                drafter.propose([view(0, toks)], n_draft)
        with pytest.raises(DraftStepError):
            drafter.propose([view(0, toks), view(0, toks)], 4)
        with pytest.raises(DraftStepError):
            drafter.propose([view(0, toks, anchor=49152)], 4)
        with pytest.raises(DraftStepError):
            drafter.forget(5)
        late_block = drafter.propose([SeqView(0, toks + [42], drafter.n_ctx_seq - 2)], 4)[0]
        assert late_block.lattice is None and "no room" in late_block.skipped
        assert len(walked(drafter.propose([view(0, toks)], 4)[0])) == 4  # still healthy
    finally:
        drafter.close()
        ctx.close()
    late = Context(target, ContextConfig(n_ctx_seq=256, n_seq=1, n_batch=64, n_threads=1))
    late.batch.clear()
    late.batch.add(toks[0], 0, 0, True)
    late.decode(late.batch)
    drafter = DFlashDrafter(draft_path, target)
    try:
        with pytest.raises(DraftStepError, match="before the target's first decode"):
            drafter.attach(late)
    finally:
        drafter.close()
        late.close()


def test_reduced_vocabulary_candidates_are_kept_ids(tmp_path, target, model_path):
    keep = np.unique(np.concatenate([np.arange(0, 49152, 5), [42]])).astype(np.int64)
    path = tmp_path / "d2t.gguf"
    write_random_draft(path, model_path, seed=4, keep_ids=keep)
    toks = target.tokenize(PROMPTS[1])
    with rig(target, str(path), n_seq=1) as (ctx, drafter):
        assert drafter.info.n_vocab_draft == len(keep)
        prefill(ctx, drafter, {0: toks})
        p = drafter.propose([view(0, toks)], 7)[0]
        check_lattice(p.lattice.rows, 8, target.n_vocab)
        assert np.isin(p.lattice.rows[1:, :K].astype(np.int64), keep).all()
        assert set(walked(p)) <= set(keep.tolist())


def test_unary_logits_for_top1(target, draft_path):
    """With unary=True each slot's candidates come with the draft's own logits of them: they
    are the top-K of that slot's logits, and the top1 path takes each slot's best one."""
    from engine.speculative.select import select

    a, b = target.tokenize(PROMPTS[0]), target.tokenize(PROMPTS[1])
    with rig(target, draft_path, n_seq=2) as (ctx, drafter):
        prefill(ctx, drafter, {0: a, 1: b})
        props = drafter.propose([view(0, a), view(1, b)], 5, unary=True)
        for j, p in enumerate(props):  # the logits of this decode stay readable until the next one
            u = p.lattice.unary
            assert u.shape == (5, K) and u.dtype == np.float32 and np.isfinite(u).all()
            for t in range(5):
                logits = drafter.ctx.logits_row(j * 6 + t + 1)
                cand = p.lattice.rows[t + 1, :K].astype(np.int64)
                assert np.array_equal(u[t], logits[cand])
                assert u[t].min() >= np.delete(logits, cand).max()  # the K best of the slot
            top1 = select(p.lattice.rows, 5, K, "top1", unary=u)
            want = [int(p.lattice.rows[t + 1, int(np.argmax(u[t]))]) for t in range(5)]
            assert top1.ids.tolist() == want
        plain = drafter.propose([view(0, a)], 5)[0]
        assert plain.lattice.unary is None
