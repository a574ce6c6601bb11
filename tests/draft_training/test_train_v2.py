"""Training recipe v2 (docs/training.md), one switch at a time: the KL to the
target's top-k against a brute-force reference, D-PACE weights by hand, factorised codebooks
(exported tables = emb @ P, lossless in the engine), init_from an existing draft (its tensors
back out unchanged), the warm start from the target's layers (and the RoPE row order it
undoes), the passes-sized schedule, best.pt with the patience stop, and resume from a work
folder copied elsewhere. On a tiny capture with the real target, as test_pipeline.py."""

from __future__ import annotations

import functools
import math
import shutil
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from draft_training import train as train_mod  # noqa: E402
from draft_training.card import model_card  # noqa: E402
from draft_training.capture import CaptureConfig, capture  # noqa: E402
from draft_training.evaluate import online_eval  # noqa: E402
from draft_training.loss import dpace_weights, draft_loss, topk_kl  # noqa: E402
from draft_training.model import CODEBOOK_TABLES, DFlashDraft, proj_name  # noqa: E402
from draft_training.target import read_target_tensors  # noqa: E402
from draft_training.recipe import V1, TrainConfig, steps_for_passes  # noqa: E402
from draft_training.train import BEST, CHECKPOINT, Trainer  # noqa: E402
from draft_training.warm_start import load_warm_start, unpermute_rope  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402
from tests.draft_training.tiny import PROMPTS, SHIPPED, TAPS  # noqa: E402

TINY = TrainConfig(n_keep=512, n_seqs=2, n_anchors=4, eval_seqs=2, warmup_steps=2, checkpoint_every_s=1e9,
                   eval_every_s=0)
quiet = dict(log=lambda m: None)


@pytest.fixture(scope="module")
def data(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("capture")
    capture(model_path, PROMPTS, out, CaptureConfig(target_layers=TAPS, n_seq=3, max_new=20, shard_tokens=150,
                                                    val_every=3))
    return out


# -- loss -------------------------------------------------------------------------------


def brute_kl(lg, ids, lp, t2d):
    """The bucket KL of loss.topk_kl, one slot at a time with Python floats."""
    q = np.exp(lg - lg.max()) / np.exp(lg - lg.max()).sum()
    p_in, q_in = [], []
    for t, logp in zip(ids, lp):
        if t >= 0 and t2d[t] >= 0:
            p_in.append(math.exp(logp))
            q_in.append(q[t2d[t]])
    p_rest, q_rest = 1 - sum(p_in), 1 - sum(q_in)
    kl = sum(p * math.log(p / qq) for p, qq in zip(p_in, q_in))
    return kl + (p_rest * math.log(p_rest / q_rest) if p_rest > 0 else 0.0)


def test_topk_kl_matches_brute_force_and_is_zero_at_the_teacher():
    rng = np.random.default_rng(0)
    V, Vd = 12, 7
    keep = np.array([0, 2, 3, 5, 7, 8, 11])
    t2d = np.full(V, -1)
    t2d[keep] = np.arange(Vd)
    lg = rng.standard_normal((3, Vd)).astype(np.float32)
    ids = np.array([[0, 2, 4, -1], [11, 1, 3, 5], [7, 8, 0, 2]])  # 4 and 1 are outside the draft vocabulary
    probs = rng.dirichlet(np.ones(V), size=3)
    lp = np.log(np.take_along_axis(probs, ids.clip(0), 1)).astype(np.float32)
    lp[0, 3] = 0.0  # no teacher id there
    got = topk_kl(torch.tensor(lg), torch.tensor(ids), torch.tensor(lp), torch.tensor(t2d)).numpy()
    want = [brute_kl(lg[i].astype(np.float64), ids[i], lp[i], t2d) for i in range(3)]
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5)
    # a draft equal to the teacher on the buckets: KL 0 and no gradient
    row = ids[2]
    lgt = np.full(Vd, -30.0, np.float32)
    p = np.exp(lp[2].astype(np.float64))
    lgt[t2d[row]] = np.log(p)
    lgt[t2d[keep[-1]]] = np.log(1 - p.sum())  # id 11 carries the rest
    x = torch.tensor(lgt[None], requires_grad=True)
    kl = topk_kl(x, torch.tensor(row[None]), torch.tensor(lp[2:3]), torch.tensor(t2d))
    kl.sum().backward()
    assert abs(kl.item()) < 1e-4 and float(x.grad.abs().max()) < 1e-3


def test_dpace_weights_by_hand():
    ce = torch.tensor([[0.5, 1.0, 2.0, 0.1], [0.2, math.inf, 0.3, 0.4]])
    real = torch.tensor([[True, True, True, False], [True, True, True, True]])
    a = 0.5
    w = dpace_weights(ce, real, a)
    for r in range(2):
        q = [((1 - a) * math.exp(-c) + a) if ok else 0.0 for c, ok in zip(ce[r].tolist(), real[r].tolist())]
        run = np.cumprod(q)
        want = [run[j:].sum() for j in range(4)]
        assert np.allclose(w[r].numpy(), want, rtol=1e-6)
    assert w[0, 3] == 0  # no label: its product and every later one end
    assert not w.requires_grad


def test_draft_loss_kl_switch(model_path):
    tt = read_target_tensors(model_path)
    from gguf_tools.dflash import DraftConfig, random_tensors

    cfg = DraftConfig.for_target(model_path, target_layers=TAPS, block_size=4, n_layer=1, selector_rank=8)
    keep = np.arange(0, cfg.n_vocab, 7, dtype=np.int64)
    m = DFlashDraft(cfg, tt.emb, tt.head, keep_ids=keep)
    m.load_numpy(random_tensors(cfg, 1))
    t2d = torch.full((cfg.n_vocab,), -1, dtype=torch.long)
    t2d[keep] = torch.arange(len(keep))
    h = torch.randn(1, 2, 4, cfg.n_embd)
    anchor = torch.tensor([[5, 7]])
    labels = torch.tensor([[[int(keep[3]), int(keep[9]), -1], [int(keep[1]), 2, int(keep[4])]]])
    base, m0 = draft_loss(m, h, anchor, labels, t2d)
    ids = torch.stack([labels.clamp(min=0), labels.clamp(min=0) + 1], -1)
    lp = torch.log(torch.tensor([0.7, 0.2])).expand_as(ids).contiguous()
    off, _ = draft_loss(m, h, anchor, labels, t2d, kl_weight=0.5)  # no teacher data: off by itself
    on, m1 = draft_loss(m, h, anchor, labels, t2d, kl_weight=0.5, teacher_ids=ids, teacher_lp=lp)
    assert torch.equal(base, off) and "kl" not in m0 and m1["kl"] > 0
    assert torch.allclose(on, base + 0.5 * m1["kl"], rtol=1e-5)
    dp, _ = draft_loss(m, h, anchor, labels, t2d, position_weights="dpace")
    assert torch.isfinite(dp) and not torch.equal(dp, base)


# -- model ------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_factorised_codebooks_export_tables_and_run_losslessly(model_path, data, tmp_path):
    t = Trainer(model_path, data, tmp_path / "train", replace(TINY, codebooks="factorised"), **quiet)
    for _ in range(2):
        t.train_step()
    names = set(t.model.p.keys())
    assert not {n.replace(".", "__") for n in CODEBOOK_TABLES} & names  # no [V, R] parameter in training
    out = t.model.export_numpy()
    for name in CODEBOOK_TABLES:
        want = (t.model.emb @ t.model.w(proj_name(name))).detach().numpy()
        assert out[name].shape == (t.dcfg.n_vocab, t.dcfg.selector_rank) and np.allclose(out[name], want)
        assert proj_name(name) not in out
    # rows at the scale of the free random init (entries of variance 1/R)
    fresh = DFlashDraft(t.dcfg, t.model.emb.numpy(), t.model.emb.numpy(), codebooks="factorised")
    fresh.init_codebooks(0)
    rms = float(fresh.export_numpy()[CODEBOOK_TABLES[0]].std())
    assert 0.5 / math.sqrt(t.dcfg.selector_rank) < rms < 2 / math.sqrt(t.dcfg.selector_rank)
    path = tmp_path / "draft.gguf"
    t.export(path)
    res = online_eval(model_path, path, PROMPTS[:1], block=TINY.block, max_tokens=12, selectors=("walk",))
    assert res["mismatches"] == [] and all(s["verifies"] > 0 for s in res["selectors"].values())


@pytest.mark.timeout(300)
@pytest.mark.skipif(not SHIPPED.exists(), reason="no shipped SmolLM2 draft in engine/drafts")
def test_init_from_the_shipped_draft_gives_its_tensors_back(model_path, data, tmp_path):
    _, src = load_warm_start(SHIPPED)
    t = Trainer(model_path, data, tmp_path / "free", replace(TINY, codebooks="free", init_from=str(SHIPPED)), **quiet)
    assert t.cfg.n_keep == len(src["d2t"]) and t.cfg.block == 8 and t.cfg.init_from == SHIPPED.name
    assert np.array_equal(t.model.keep_ids, src["d2t"])
    out = t.model.export_numpy()
    assert set(out) == set(src)
    for k, v in src.items():  # the source is f16: what comes back must be the same numbers
        assert np.allclose(out[k], v, rtol=2e-3, atol=1e-6), k
    # factorised: the projection is the least-squares fit of each table (normal equations hold)
    f = Trainer(model_path, data, tmp_path / "fact", replace(TINY, codebooks="factorised", init_from=str(SHIPPED)),
                **quiet)
    e = f.model.emb.double()
    for name in CODEBOOK_TABLES:
        p = f.model.w(proj_name(name)).detach().double()
        resid = e @ p - torch.as_tensor(src[name], dtype=torch.float64)
        assert float((e.T @ resid).abs().max()) < 1e-3 * float((e.T @ e).abs().max())


@functools.lru_cache(maxsize=1)
def _reader(model_path):
    return {t.name: t for t in GGUFReader(model_path).tensors}


def _target_array(model_path, name):
    t = _reader(model_path)[name]
    return np.asarray(dequantize(t.data, t.tensor_type), np.float32).reshape([int(n) for n in reversed(t.shape)])


def rope_normal(x, pos, base):
    """llama.cpp's normal RoPE: pairs (2i, 2i+1). x [T, H, D]."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = pos[:, None, None] * inv  # [T, 1, D/2]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(ang) - b * np.sin(ang)
    out[..., 1::2] = a * np.sin(ang) + b * np.cos(ang)
    return out


def test_unpermuted_rows_under_neox_rope_give_llama_cpps_scores():
    from draft_training.model import rope_neox

    rng = np.random.default_rng(0)
    H, D, E, T = 3, 8, 16, 5
    wq, wk, x = rng.standard_normal((H * D, E)), rng.standard_normal((H * D, E)), rng.standard_normal((T, E))
    pos = np.arange(T, dtype=np.float64)
    q = rope_normal((x @ wq.T).reshape(T, H, D), pos, 100.0)
    k = rope_normal((x @ wk.T).reshape(T, H, D), pos, 100.0)
    want = np.einsum("thd,shd->hts", q, k)
    qn = rope_neox(torch.tensor((x @ unpermute_rope(wq, H).T).reshape(T, H, D)), torch.tensor(pos), 100.0).numpy()
    kn = rope_neox(torch.tensor((x @ unpermute_rope(wk, H).T).reshape(T, H, D)), torch.tensor(pos), 100.0).numpy()
    assert np.allclose(np.einsum("thd,shd->hts", qn, kn), want, atol=1e-9)


@pytest.mark.timeout(120)
def test_warm_start_copies_the_deepest_target_layers(model_path, data, tmp_path):
    t = Trainer(model_path, data, tmp_path / "w", replace(TINY, warm_start="target", codebooks="free"), **quiet)
    m, c = t.model, t.dcfg
    for i, layer in enumerate((28, 29)):
        for n in ("attn_v.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
                  "attn_norm.weight", "ffn_norm.weight"):
            assert np.array_equal(m.w(f"blk.{i}.{n}").detach().numpy(), _target_array(model_path, f"blk.{layer}.{n}"))
        assert np.array_equal(m.w(f"blk.{i}.attn_q.weight").detach().numpy(),
                              unpermute_rope(_target_array(model_path, f"blk.{layer}.attn_q.weight"), c.n_head))
        assert np.array_equal(m.w(f"blk.{i}.attn_k.weight").detach().numpy(),
                              unpermute_rope(_target_array(model_path, f"blk.{layer}.attn_k.weight"), c.n_head_kv))
        assert (m.w(f"blk.{i}.attn_q_norm.weight") == 1).all() and (m.w(f"blk.{i}.attn_k_norm.weight") == 1).all()
    assert np.array_equal(m.w("enc.output_norm.weight").detach().numpy(),
                          _target_array(model_path, "blk.28.attn_norm.weight"))
    fc = m.export_numpy()["fc.weight"]  # what llama.cpp sees: feat_scale folded in
    e = c.n_embd
    assert np.allclose(fc[:, 4 * e:], np.eye(e), atol=1e-6) and not fc[:, :4 * e].any()
    assert np.allclose(m.w("output_norm.weight").detach().numpy(), 0.2 * read_target_tensors(model_path).output_norm)
    assert (m.w("blk.0.attn_conv_base")[:, 0] == 1).all() and not m.w("blk.0.attn_conv_base")[:, 1:].any()


# -- schedule ---------------------------------------------------------------------------


@pytest.mark.timeout(200)
def test_passes_size_the_schedule(model_path, data, tmp_path):
    assert steps_for_passes(2.0, 1000, 8, 24) == math.ceil(2000 / 192)
    t = Trainer(model_path, data, tmp_path / "s", replace(TINY, passes=0.5), **quiet)
    n = t.n_train_anchors
    assert t.pass_steps == math.ceil(0.5 * n / (TINY.n_seqs * TINY.n_anchors))
    t.budget_s, t.step_time, t.step, t.elapsed = 100.0, 2.0, 3, 10.0
    assert t.budget_steps() == 3 + 45 and t.schedule_steps() == min(t.pass_steps, 48)
    t.step_time = 100.0
    assert t.schedule_steps() == 3  # the budget fits nothing more: the cosine is at its end
    assert t.lr_factor() == pytest.approx(TINY.min_lr_frac)
    logs = []
    u = Trainer(model_path, data, tmp_path / "r", replace(TINY, passes=0.5), log=logs.append)
    u.run(600)
    assert u.step == u.pass_steps and "passes done" in u.stopped
    assert any("steps per pass" in x for x in logs)
    assert u.passes_done == pytest.approx(u.step * TINY.n_seqs * TINY.n_anchors / n)
    v1 = Trainer(model_path, data, tmp_path / "v1", replace(V1, n_keep=512, n_seqs=2, n_anchors=4, eval_seqs=2,
                                                           warmup_steps=2, eval_every_s=0), **quiet)
    assert v1.pass_steps is None and v1.cfg.codebooks == "free" and v1.cfg.kl_weight == 0
    v1.run(3.0)  # v1: the time budget alone ends it
    assert v1.elapsed >= 3.0 and v1.stopped is None and not (tmp_path / "v1" / BEST).exists()


@pytest.mark.timeout(200)
def test_best_checkpoint_and_patience_stop(model_path, data, tmp_path, monkeypatch):
    taus = iter([1.5, 1.8, 1.805, 1.7, 2.5])

    def fake_eval(self, n_seqs=None, chunk=48):
        return {"tau": {"walk": next(taus), "top1": 1.0}, "slot_accept": {}, "n_seqs": 1}

    monkeypatch.setattr(Trainer, "evaluate", fake_eval)
    cfg = replace(TINY, passes=None, eval_every_steps=1, patience=2, min_delta=0.01)
    t = Trainer(model_path, data, tmp_path / "b", cfg, **quiet)
    t.run(600)
    # step 1: 1.5 best; step 2: 1.8 best; step 3: 1.805 best but < min_delta (stale 1); step 4: 1.7 (stale 2): stop
    assert t.step == 4 and "plateau" in t.stopped
    best = torch.load(tmp_path / "b" / BEST, weights_only=False)
    assert best["step"] == 3 and t.best["tau"] == 1.805 and t.best_eval["tau"]["walk"] == 1.805
    path = tmp_path / "best.gguf"
    t.export(path)  # the best weights, not the last ones
    got = {r.name: np.asarray(r.data) for r in GGUFReader(path).tensors}
    want = best["params"]["blk__0__attn_q__weight"].numpy()
    assert np.allclose(got["blk.0.attn_q.weight"], want, atol=1e-3)
    assert not np.allclose(want, t.model.w("blk.0.attn_q.weight").detach().numpy())


@pytest.mark.timeout(200)
def test_resume_from_a_copied_work_folder(model_path, data, tmp_path):
    a = tmp_path / "a"
    cfg = replace(TINY, passes=None, feature_noise=0.05)
    t = Trainer(model_path, data, a / "train", cfg, **quiet)
    for _ in range(3):
        t.train_step()
    t.budget_s = 60.0
    t.save()
    saved = {k: v.detach().clone() for k, v in t.model.p.items()}
    blob = (a / "train" / CHECKPOINT).read_bytes()
    assert str(tmp_path).encode() not in blob and str(data).encode() not in blob  # no absolute paths inside
    b = tmp_path / "elsewhere"
    shutil.copytree(a / "train", b / "train")
    shutil.copytree(data, b / "data")
    shutil.copy(model_path, b / "target.gguf")
    for _ in range(2):  # the original goes on first: the copy must take the very same next steps
        t.train_step()
    u = Trainer(b / "target.gguf", b / "data", b / "train", replace(TrainConfig(), threads=1), resume=True, **quiet)
    assert u.step == 3 and u.cfg == replace(cfg, threads=1)  # the saved recipe; where it runs from the caller
    for k, v in saved.items():
        assert torch.equal(v, u.model.p[k])
    for _ in range(2):  # data order, feature noise and optimizer state came along
        u.train_step()
    assert u.step == 5
    for k, v in t.model.p.items():  # (1 vs 2 threads: float sums in another order)
        assert torch.allclose(v, u.model.p[k], atol=1e-5), k


def test_teacher_data_reaches_the_loss(model_path, data, tmp_path, monkeypatch):
    """With teacher fields on the batch the trainer adds the KL; with kl_weight 0 it does not."""
    real = train_mod.sample_batch

    def with_teacher(*a, **k):
        b = real(*a, **k)
        ids = torch.stack([b.labels, b.labels.clamp(min=0) + 1], -1)
        b.teacher_ids, b.teacher_lp = ids, torch.log(torch.tensor([0.6, 0.3])).expand(ids.shape).contiguous()
        return b

    monkeypatch.setattr(train_mod, "sample_batch", with_teacher)
    on = Trainer(model_path, data, tmp_path / "on", replace(TINY, kl_weight=0.5), **quiet).train_step()
    off = Trainer(model_path, data, tmp_path / "off", replace(TINY, kl_weight=0.0), **quiet).train_step()
    assert on["kl"] > 0 and "kl" not in off


# -- card -------------------------------------------------------------------------------


def test_card_reports_switches_categories_and_ab():
    cfg = {**TrainConfig().__dict__, "init_from": "smollm2-dflash2.gguf", "position_weights": "dpace",
           "kl_weight": 0.5, "codebooks": "factorised"}
    report = {"target": "smollm2", "draft_bytes": 9e6,
              "data": {"n_answer_tokens": 411000, "n_tokens": 600000, "bytes": 2.4e9, "seconds": 4380},
              "train": {"steps": 1200, "seconds": 3600, "config": cfg, "passes_done": 1.7,
                        "hardware": "CPU (2 threads)", "stopped": "plateau", "best_step": 1100,
                        "draft_config": {"name": "d", "n_layer": 2, "block_size": 8, "selector_top_k": 16,
                                         "selector_rank": 32, "target_layers": [2, 9, 15, 21, 28]}},
              "offline": {"tau": {"walk": 2.1, "top1": 2.0}, "n_seqs": 24},
              "online": {"selectors": {"walk": {"tau": 1.9, "slot_accept": [0.5] * 7}}, "n_prompts": 10, "block": 8,
                         "mismatches": [], "categories": {"zh-TW": {"walk": 1.4}, "chat": {"walk": 2.2}}},
              "ab": [{"change": "kl_weight 0.5", "a": 2.0, "b": 2.1, "metric": "offline walk tau"}]}
    card = model_card(report)
    for text in ("dpace", "kl_weight 0.5", "factorised", "1.70 passes", "CPU (2 threads)", "seed 0",
                 "smollm2-dflash2.gguf", "zh-TW", "| kl_weight 0.5 | 2.0 | 2.1 | offline walk tau |", "411,000"):
        assert text in card, text
