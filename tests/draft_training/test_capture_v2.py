"""Capture v2 on the real target, in miniature: top-k log-probs and argmax stored by the same
decodes (equal to a lone decode's), sampled answers whose argmax is still the greedy one,
batch labels (unchanged for greedy answers, masked off the argmax chain for sampled ones),
format-1 folders read, upgraded and backfilled, a work folder copied elsewhere resuming,
several folders read as one, and self-written prompts."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from draft_training.batches import block_labels, make_batch  # noqa: E402
from draft_training.capture import CaptureConfig, capture  # noqa: E402
from draft_training.shards import Shards, derived_argmax  # noqa: E402
from draft_training.topk import add_topk, top_logprobs  # noqa: E402
from engine.llama.context import Context, ContextConfig  # noqa: E402
from engine.llama.model import Model  # noqa: E402
from tests.draft_training.tiny import PROMPTS as ALL_PROMPTS, TAPS  # noqa: E402

KT = 32
PROMPTS = ALL_PROMPTS[:4]
MORE = [{"id": "p9", "messages": [{"role": "user", "content": "Quote 40 mugs with our logo."}]}]
V2 = CaptureConfig(target_layers=TAPS, n_seq=3, max_new=16, shard_tokens=150, val_every=3, top_logprobs=KT,
                   samples=1, temperature=0.6, sample_seed=1)
GREEDY_ONLY = CaptureConfig(target_layers=TAPS, n_seq=3, max_new=16, shard_tokens=150, val_every=3, top_logprobs=0)


@pytest.fixture(scope="module")
def v2(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("capture-v2")
    return out, capture(model_path, PROMPTS, out, V2)


def all_seqs(shards):
    return shards.seqs["train"] + shards.seqs["val"]


def lone_logits(model_path, tokens, rows):
    """Logits of one sequence decoded one token per decode, alone: {row: [V] float32}."""
    m = Model(model_path)
    ctx = Context(m, ContextConfig(n_ctx_seq=256, n_seq=1, n_batch=64, n_threads=2))
    out = {}
    try:
        for pos in range(max(rows) + 1):
            ctx.batch.clear()
            ctx.batch.add(int(tokens[pos]), pos, 0, True)
            ctx.decode(ctx.batch)
            if pos in rows:
                out[pos] = ctx.logits([0])[0].copy()
        return out
    finally:
        ctx.close()
        m.close()


def test_manifest_records_what_each_shard_holds(v2):
    out, man = v2
    assert man["format"] == 2 and man["topk"] == KT and len(man["shards"]) >= 2
    assert all(sh["topk"] == KT for sh in man["shards"])
    shards = Shards(out)
    n_train = len({shards._index[s]["keys"][q].split(".")[0] for s, q in shards.seqs["train"]})
    assert man["n_sampled"] == sum(sh["n_sampled"] for sh in man["shards"]) == n_train * V2.samples
    assert not any(shards.sampled(s, q) for s, q in shards.seqs["val"]) and shards.seqs["val"]
    assert sorted(man["done"]) == sorted(set(man["done"]))


@pytest.mark.timeout(120)
def test_topk_and_argmax_equal_a_lone_decode_also_on_sampled_answers(model_path, v2):
    out, _ = v2
    shards = Shards(out)
    sampled = [(s, q) for s, q in shards.seqs["train"] if shards.sampled(s, q)]
    assert sampled
    sh, q = sampled[0]
    toks, _, n_prompt = shards.get(sh, q)
    g, (ids, lp) = shards.argmax(sh, q), shards.topk(sh, q)
    rows = list(range(n_prompt - 1, len(toks) - 1))
    assert (g[:n_prompt - 1] == -1).all() and g[-1] == -1 and (ids[:n_prompt - 1] == -1).all()
    assert not (toks[n_prompt:] == g[n_prompt - 1:-1]).all()  # really sampled somewhere (T 0.6, seeded)
    lone = lone_logits(model_path, toks, set(rows))
    for r in rows:
        x = lone[r].astype(np.float64)
        want_lp = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
        assert g[r] == int(np.argmax(x)) == ids[r, 0]  # argmax = the greedy token on the sampled prefix
        assert list(ids[r]) == list(np.argsort(-x, kind="stable")[:KT])
        np.testing.assert_allclose(lp[r].astype(np.float64), want_lp[ids[r]], rtol=2e-3, atol=2e-3)
    # and on a prefill-sized [n, V] block the numpy top-k equals a sort
    ids2, lp2 = top_logprobs(np.stack([lone[r] for r in rows[:4]]), KT)
    assert np.array_equal(ids2, ids[rows[:4]]) and np.array_equal(lp2, lp[rows[:4]])


def old_labels(toks, anchors, block):
    """The label rule before capture v2: the trajectory's next tokens, -1 past the end."""
    n = len(toks)
    return np.array([[toks[a + k] if a + k < n else -1 for k in range(1, block)] for a in anchors])


def test_greedy_labels_are_unchanged(v2):
    out, _ = v2
    shards = Shards(out)
    greedy = [(s, q) for s, q in all_seqs(shards) if not shards.sampled(s, q)]
    assert greedy
    for sh, q in greedy:
        toks, _, n_prompt = shards.get(sh, q)
        anc = np.arange(n_prompt, len(toks) - 1)
        assert np.array_equal(block_labels(toks, shards.argmax(sh, q), anc, 8), old_labels(toks, anc, 8))
        assert np.array_equal(shards.argmax(sh, q), derived_argmax(toks, n_prompt))
    b = make_batch(shards, greedy[:2], [np.arange(shards.length(*sq)[1], shards.length(*sq)[1] + 3)
                                        for sq in greedy[:2]], 8, mask_id=16)
    for i, (sh, q) in enumerate(greedy[:2]):
        toks = shards.get(sh, q)[0]
        assert np.array_equal(b.labels[i].numpy(), old_labels(toks, b.anchor_pos[i].numpy(), 8))


def test_sampled_labels_are_masked_off_the_argmax_chain():
    toks = np.array([10, 11, 12, 13, 14, 15, 16])  # n_prompt 2; the answer deviates at position 4
    g = np.array([-1, 12, 13, 99, 15, 16, -1])  # argmax[3] = 99 but token 4 = 14 (sampled)
    lab = block_labels(toks, g, np.array([2, 3, 4]), 5)
    assert lab.tolist() == [[13, 99, -1, -1],  # slot 1 always; slot 3 needs token 4 == argmax 3
                            [99, -1, -1, -1],
                            [15, 16, -1, -1]]  # back on the chain after the deviation; -1 past the end


def test_sampled_batch_teacher_rows(v2):
    out, _ = v2
    shards = Shards(out)
    seqs = [(s, q) for s, q in shards.seqs["train"] if shards.sampled(s, q)][:2]
    anchors = [np.arange(shards.length(*sq)[1], shards.length(*sq)[0] - 1)[:6] for sq in seqs]
    n = min(len(a) for a in anchors)
    anchors = [a[:n] for a in anchors]
    b = make_batch(shards, seqs, anchors, 8, mask_id=16)
    assert b.teacher_ids.shape == (*b.labels.shape, KT) and b.teacher_ids.dtype == torch.long
    assert b.teacher_lp.dtype == torch.float32
    for i, (sh, q) in enumerate(seqs):
        toks, g, (ids, lp) = shards.get(sh, q)[0], shards.argmax(sh, q), shards.topk(sh, q)
        for j, a in enumerate(anchors[i]):
            chain = True
            for k in range(1, 8):
                r = a + k - 1
                want = int(g[r]) if r < len(toks) and chain else -1
                assert int(b.labels[i, j, k - 1]) == want
                if want >= 0:
                    assert b.teacher_ids[i, j, k - 1].tolist() == ids[r].tolist()
                    assert b.teacher_ids[i, j, k - 1, 0] == want
                    assert torch.equal(b.teacher_lp[i, j, k - 1], torch.from_numpy(lp[r].astype(np.float32)))
                else:
                    assert (b.teacher_ids[i, j, k - 1] == -1).all() and (b.teacher_lp[i, j, k - 1] == 0).all()
                chain = chain and r + 1 < len(toks) and int(toks[r + 1]) == int(g[r])


def as_format_1(folder):
    """Rewrite a greedy capture without top-k as the format-1 folder an older flashdesk wrote."""
    man = json.loads((folder / "manifest.json").read_text())
    man["format"] = 1
    for key in ("topk", "n_sampled"):
        man.pop(key)
    for sh in man["shards"]:
        sh.pop("topk"), sh.pop("n_sampled")
        idx = dict(np.load(folder / (sh["name"] + ".index.npz")))
        old = {k: v for k, v in idx.items() if k not in ("argmax", "sampled")}
        np.savez(folder / (sh["name"] + ".index.npz"), **old)
    (folder / "manifest.json").write_text(json.dumps(man))


@pytest.mark.timeout(600)
def test_format_1_is_read_upgraded_and_backfilled(model_path, v2, tmp_path):
    live_dir, _ = v2
    old = tmp_path / "old"
    capture(model_path, PROMPTS, old, GREEDY_ONLY)
    as_format_1(old)
    shards = Shards(old)
    assert shards.seqs["train"] and all(shards.topk(s, q) is None for s, q in all_seqs(shards))
    for s, q in all_seqs(shards):
        toks, _, n_prompt = shards.get(s, q)
        assert np.array_equal(shards.argmax(s, q), derived_argmax(toks, n_prompt))
    b = make_batch(shards, shards.seqs["train"][:1], [np.array([shards.length(*shards.seqs["train"][0])[1]])], 8, 16)
    assert b.teacher_ids is None and b.teacher_lp is None

    stats = add_topk(model_path, old, k=KT)
    man = json.loads((old / "manifest.json").read_text())
    assert man["format"] == 2 and man["topk"] == KT and all(sh["topk"] == KT for sh in man["shards"])
    assert stats["shards"] == len(man["shards"]) and stats["argmax_mismatch"] <= 1  # near-ties aside
    assert stats["rows"] == man["n_answer_tokens"]  # the prompt's last row + every answer row but the last
    assert add_topk(model_path, old, k=KT)["shards"] == 0  # resumable: nothing left to do

    # backfilled top-k == the top-k the live capture stored for the same greedy answers
    back, live = Shards(old), Shards(live_dir)
    live_by_key = {str(live._index[s]["keys"][q]): (s, q) for s, q in all_seqs(live)}
    compared = 0
    for s, q in all_seqs(back):
        key = str(back._index[s]["keys"][q])
        ls, lq = live_by_key[key]
        toks, _, n_prompt = back.get(s, q)
        assert np.array_equal(toks, live.get(ls, lq)[0])  # greedy answers of the same prompt
        (bi, bl), (li, ll) = back.topk(s, q), live.topk(ls, lq)
        rows = slice(n_prompt - 1, len(toks) - 1)
        assert (bi[rows, 0] == li[rows, 0]).mean() == 1.0
        assert (bi[rows] == li[rows]).mean() > 0.99  # order of near-ties in the tail aside
        same = bi[rows] == li[rows]
        np.testing.assert_allclose(bl[rows][same].astype(np.float32), ll[rows][same].astype(np.float32),
                                   rtol=2e-3, atol=2e-3)
        assert (bi[len(toks) - 1] == -1).all() and (bi[:n_prompt - 1] == -1).all()
        compared += 1
    assert compared == len(PROMPTS)

    # capture v2 into the (upgraded) old folder appends shards with top-k
    n_old = len(man["shards"])
    man2 = capture(model_path, PROMPTS + MORE, old, V2)
    assert len(man2["shards"]) > n_old and all(sh["topk"] == KT for sh in man2["shards"])
    assert man2["n_sampled"] >= 1 and len(Shards(old).seqs["train"]) > len(shards.seqs["train"])


@pytest.mark.timeout(120)
def test_a_copied_work_folder_resumes_elsewhere(model_path, v2, tmp_path):
    out, man = v2
    text = (out / "manifest.json").read_text()
    assert str(out) not in text and "/tmp" not in text  # no absolute paths
    moved = tmp_path / "elsewhere" / "data"
    shutil.copytree(out, moved)
    again = capture(model_path, PROMPTS + MORE, moved, V2)
    new = set(again["done"]) - set(man["done"])
    assert new and all(k.startswith(tuple(new)[0].split(".")[0]) for k in new)  # only MORE's answers
    assert again["shards"][:len(man["shards"])] == man["shards"]
    shards = Shards(moved)
    assert all(shards.topk(s, q) is not None for s, q in all_seqs(shards))


def test_several_folders_read_as_one(v2, tmp_path):
    out, man = v2
    twin = tmp_path / "twin"
    shutil.copytree(out, twin)
    both = Shards([out, twin])
    one = Shards(out)
    assert len(both.seqs["train"]) == 2 * len(one.seqs["train"])
    assert both.manifest["n_answer_tokens"] == 2 * man["n_answer_tokens"]
    s, q = both.seqs["train"][len(one.seqs["train"])]  # the first of the twin
    assert np.array_equal(both.get(s, q)[0], one.get(*one.seqs["train"][0])[0])
    foreign = tmp_path / "foreign"
    shutil.copytree(out, foreign)
    m = json.loads((foreign / "manifest.json").read_text())
    m["target_layers"] = [2, 9]
    (foreign / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match="target_layers"):
        Shards([out, foreign])


def test_pre_query_keeps_the_templates_system_prompt(model_path):
    from draft_training.self_prompts import pre_query
    from engine.llama.chat_template import ChatTemplate

    m = Model(model_path)
    try:
        t = ChatTemplate(m)
        head = pre_query(t)
        assert t.render([{"role": "user", "content": "Hi there"}]).startswith(head + "Hi there")
        assert "system" in head and head.rstrip().endswith("user")  # SmolLM2's default system turn, then the user's
    finally:
        m.close()


@pytest.mark.timeout(600)
def test_self_prompts_are_deterministic_whatever_the_batching(model_path):
    from draft_training.self_prompts import self_prompts

    a = self_prompts(model_path, 2, seed=3, zh_share=0.0, n_seq=4, max_tokens=48)
    b = self_prompts(model_path, 2, seed=3, zh_share=0.0, n_seq=2, max_tokens=48)
    assert a == b and len(a) == 2
    for p in a:
        assert p["category"] == "self" and p["lang"] == "en" and p["messages"][0]["role"] == "user"
        assert len(p["messages"][0]["content"]) >= 16
