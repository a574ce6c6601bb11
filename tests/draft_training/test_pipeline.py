"""The training pipeline end to end on the real target, in miniature: capture (features equal
to a lone decode, answers equal to plain greedy decoding, resume, refusals), a few training
steps with checkpoint/resume, export, and the exported draft running losslessly in the
engine; then the whole `flashdesk train-draft` command with a seconds-long budget."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from draft_training.batches import sample_batch  # noqa: E402
from draft_training.cli import parse_budget, parse_count  # noqa: E402
from draft_training.capture import CaptureConfig, CaptureRefused, capture, looping  # noqa: E402
from draft_training.shards import Shards  # noqa: E402
from draft_training.evaluate import online_eval  # noqa: E402
from draft_training.recipe import TrainConfig  # noqa: E402
from draft_training.train import Trainer  # noqa: E402
from engine import native  # noqa: E402
from engine.llama.chat_template import ChatTemplate  # noqa: E402
from engine.llama.context import Context, ContextConfig  # noqa: E402
from engine.llama.model import Model  # noqa: E402
from engine.llama import ext  # noqa: E402
from engine.speculative.drafters.dflash import inspect_draft  # noqa: E402
from tests.draft_training.tiny import PROMPTS, SHIPPED, TAPS  # noqa: E402

TINY = TrainConfig(n_keep=512, n_seqs=2, n_anchors=4, eval_seqs=2, warmup_steps=2, checkpoint_every_s=1e9,
                   eval_every_s=1e9)


@pytest.fixture(scope="module")
def captured(model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("capture")
    cfg = CaptureConfig(target_layers=TAPS, n_seq=3, max_new=20, shard_tokens=150, val_every=3)
    man = capture(model_path, PROMPTS, out, cfg)
    return out, cfg, man


def lone_decode(model_path, tokens, n_prompt, n_new):
    """Plain greedy decoding of one sequence, one token per decode: (answer, features [n, n_enc])."""
    m = Model(model_path)
    ctx = Context(m, ContextConfig(n_ctx_seq=256, n_seq=1, n_batch=64, n_threads=2))
    try:
        for lid in TAPS:
            ext.llama_set_embeddings_layer_inp(ctx.ptr, lid, True)
        f32p = ctypes.POINTER(ctypes.c_float)
        seq, feats = list(tokens[:n_prompt]), []
        for pos in range(n_prompt + n_new - 1):
            ctx.batch.clear()
            ctx.batch.add(seq[pos], pos, 0, True)
            ctx.decode(ctx.batch)
            feats.append(np.concatenate([np.ctypeslib.as_array(
                ctypes.cast(ext.llama_get_embeddings_layer_inp(ctx.ptr, lid), f32p), shape=(576,)).copy()
                for lid in TAPS]))
            if pos >= n_prompt - 1:
                logits = np.ctypeslib.as_array(ctx.logits_ptr(0), shape=(1, m.n_vocab))
                seq.append(int(native.argmax_rows(logits)[0]))
        return seq[n_prompt:], np.stack(feats)
    finally:
        ctx.close()
        m.close()


@pytest.mark.timeout(300)
def test_capture_equals_lone_plain_decoding(model_path, captured):
    out, cfg, man = captured
    shards = Shards(out)
    assert man["n_tokens"] == sum(s["n_tokens"] for s in man["shards"]) > 0
    assert len(man["shards"]) >= 2 and len(man["done"]) == len(PROMPTS)
    assert shards.seqs["train"] and shards.seqs["val"]
    m = Model(model_path)
    want_prompt = m.tokenize(ChatTemplate(m).render(PROMPTS[0]["messages"]))
    m.close()
    for sh, q in (shards.seqs["train"] + shards.seqs["val"]):
        toks, feats, n_prompt = shards.get(sh, q)
        if list(toks[:n_prompt]) != want_prompt:
            continue
        answer, lone = lone_decode(model_path, list(toks), n_prompt, len(toks) - n_prompt)
        assert list(toks[n_prompt:]) == answer  # batched with other sequences == alone, greedy
        assert np.array_equal(np.asarray(feats[:-1]), lone.astype(np.float16))  # the same features, bit for bit
        assert not np.asarray(feats[-1]).any()  # the last token was never decoded
        break
    else:
        pytest.fail("the first prompt's sequence is missing from the shards")


def test_capture_resumes_and_refuses(model_path, captured, tmp_path):
    out, cfg, man = captured
    again = capture(model_path, PROMPTS, out, cfg)  # everything answered already: nothing new
    assert again["shards"] == man["shards"]
    with pytest.raises(CaptureRefused, match="other settings"):
        capture(model_path, PROMPTS[:1], out, CaptureConfig(target_layers=(2, 9)))
    with pytest.raises(CaptureRefused, match="outside"):
        capture(model_path, PROMPTS[:1], tmp_path / "x", CaptureConfig(target_layers=(2, 30)))


def test_looping_detector():
    assert looping([1, 2, 3] * 30)
    assert looping(list(range(50)) + list(range(100, 116)) * 3)  # a 16-token span, the third time
    assert not looping(list(range(50)) + list(range(100, 116)) * 2)  # twice is no loop yet
    assert not looping(list(range(100, 117)) * 3)  # a span longer than 16
    assert not looping(list(range(100)))
    assert not looping([7] + [0] * 6 + [5])  # the digits of 7000000 are no loop
    assert looping([5] * 40) and not looping([5] * 23)  # short spans must cover loop_min tokens


def test_batches_follow_the_engine(captured):
    out, cfg, _ = captured
    shards = Shards(out)
    b = sample_batch(shards, np.random.default_rng(0), "train", 2, 4, 8, mask_id=16)
    for i in range(2):
        for j in range(4):
            a = int(b.anchor_pos[i, j])
            assert a < int(b.ctx_ok[i].sum()) + 1  # the context covers every anchor's prefix
            assert b.tokens[i, j, 1:].eq(16).all()
    assert (b.labels >= -1).all()


@pytest.mark.timeout(300)
def test_train_resume_export_lossless(model_path, captured, tmp_path):
    out, _, _ = captured
    t = Trainer(model_path, out, tmp_path / "train", TINY, log=lambda m: None)
    for _ in range(3):
        m = t.train_step()
    assert np.isfinite(m["loss"]) and set(m) >= {"block_ce", "selector_ce", "top1_acc", "in_top_k"}
    ev = t.evaluate()
    assert set(ev["tau"]) == {"top1", "walk", "viterbi", "dp"} and ev["n_seqs"] > 0
    for sel, tau in ev["tau"].items():
        # a barely trained draft may accept nothing (tau 1); it cannot commit more than a block per
        # verify, and a trajectory that accepted a token had an anchor whose first slot was accepted
        assert 1.0 <= tau <= TINY.block, (sel, tau)  # NaN, from no anchors at all, fails here too
        assert tau == 1.0 or ev["slot_accept"][sel][0] > 0, (sel, tau, ev["slot_accept"][sel])
    t.budget_s = 60.0
    t.save()
    t2 = Trainer(model_path, out, tmp_path / "train", TINY, resume=True, log=lambda m: None)
    assert t2.step == 3
    for k, v in t.model.p.items():
        assert torch.equal(v, t2.model.p[k])
    path = tmp_path / "draft.gguf"
    t2.export(path)
    target = Model(model_path)
    info = inspect_draft(str(path), target)
    target.close()
    assert info.n_vocab_draft == 512 and info.block_size == TINY.block
    evp = [{**PROMPTS[0], "category": "work order"}, {**PROMPTS[1], "category": "zh reply"}]
    res = online_eval(model_path, path, evp, block=TINY.block, max_tokens=16, selectors=("walk", "top1"))
    assert res["mismatches"] == []  # lossless with a (barely) trained draft
    assert all(s["verifies"] > 0 for s in res["selectors"].values())
    assert set(res["categories"]) == {"work order", "zh reply"}
    assert all(set(c) == {"walk", "top1"} and min(c.values()) >= 1.0 for c in res["categories"].values())


@pytest.mark.timeout(600)
def test_train_draft_command(model_path, tmp_path):
    from server.cli import main

    evp = tmp_path / "eval.jsonl"
    evp.write_text("\n".join(json.dumps({**p, "max_tokens": 12}) for p in PROMPTS[:2]))
    mine = tmp_path / "mine.txt"
    mine.write_text("Quote 40 mugs with our logo.\nReply to Harbor Cafe about the late menus.\n")
    work = tmp_path / "work"
    args = ["--home", str(tmp_path / "home"), "train-draft", "--target", model_path, "--work", str(work),
            "--budget", "4s", "--tokens", "200", "--builtin", "6", "--prompts", str(mine), "--vocab", "256",
            "--eval-prompts", str(evp)]
    assert main(args) == 0
    report = json.loads((work / "report.json").read_text())
    assert report["data"]["n_answer_tokens"] >= 200 and report["train"]["steps"] >= 1
    assert report["online"]["mismatches"] == []
    assert all((work / f).stat().st_size > 0 for f in ("draft.gguf", "acceptance.png", "learning.png", "MODEL_CARD.md"))
    assert main(args) == 2  # the work folder holds a run: refuse without --resume
    resumed = [x for x in args if x not in ("--eval-prompts", str(evp))] + ["--resume"]
    assert main(resumed) == 0  # resume: nothing left to capture, the budget is spent: evaluate and export again


@pytest.mark.timeout(600)
def test_train_draft_continues_a_draft(model_path, tmp_path):
    """`--init-from` continues a draft: measured before it moves (start_eval), the card says so;
    with self-written prompts (kept for a resume) and sampled answers in the mix."""
    from server.cli import main

    home = ["--home", str(tmp_path / "home"), "train-draft", "--target", model_path]
    assert main(home + ["--work", str(tmp_path / "none"), "--init-from", "paired"]) == 2  # a bare file: none paired
    assert main(home + ["--work", str(tmp_path / "none"), "--init-from", str(tmp_path / "nope.gguf")]) == 2
    work = tmp_path / "work"
    mine = tmp_path / "mine.txt"  # the first line's key falls in the held-out split (is_val): something to measure
    mine.write_text("Quote 13 mugs with our logo.\nReply to Harbor Cafe about the late menus.\n")
    args = home + ["--work", str(work), "--budget", "3s", "--tokens", "150", "--builtin", "0", "--self-prompts", "1",
                   "--prompts", str(mine), "--samples", "1", "--passes", "0", "--init-from", str(SHIPPED), "--no-pair"]
    assert main(args) == 0
    written = (work / "self-prompts.jsonl").read_text("utf-8").splitlines()
    assert len(written) == 1 and json.loads(written[0])["category"] == "self"
    report = json.loads((work / "report.json").read_text())
    t = report["train"]
    assert t["config"]["init_from"] == SHIPPED.name and t["config"]["passes"] is None
    assert t["draft_config"]["n_layer"] == 2 and set(t["start_eval"]["tau"]) == {"top1", "walk", "viterbi", "dp"}
    assert report["data"]["n_sampled"] >= 1
    assert f"{SHIPPED.name} before training" in (work / "MODEL_CARD.md").read_text("utf-8")
    assert main(args + ["--resume"]) == 0  # the same self-written prompts: nothing new to capture
    assert (work / "self-prompts.jsonl").read_text("utf-8").splitlines() == written


def test_budget_and_count_parsing():
    assert parse_budget("2h") == 7200 and parse_budget("1h30m") == 5400 and parse_budget("45") == 45
    assert parse_count("1M") == 1_000_000 and parse_count("500k") == 500_000
    with pytest.raises(Exception):
        parse_budget("soon")


def test_ctrl_c_during_capture_keeps_finished_answers(model_path, tmp_path):
    cfg = CaptureConfig(target_layers=TAPS, n_seq=2, max_new=12, shard_tokens=1 << 20)
    calls = []

    def interrupt(n):
        calls.append(n)
        if n >= 30:  # a few answers are finished by now, none flushed (the shard is far from full)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        capture(model_path, PROMPTS, tmp_path, cfg, progress=interrupt)
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert 1 <= len(man["done"]) < len(PROMPTS) and man["n_answer_tokens"] > 0
    again = capture(model_path, PROMPTS, tmp_path, cfg)  # resume answers only the rest
    assert sorted(again["done"]) == sorted(set(again["done"])) and len(again["done"]) == len(PROMPTS)


def test_capture_renders_prompts_with_the_catalogs_template_variables(model_path, tmp_path, monkeypatch):
    """The draft learns from prompts as the server renders them (Qwen3: enable_thinking=false)."""
    import draft_training.capture as capture_mod

    seen = []

    class Recording(ChatTemplate):
        def __init__(self, model, variables=None):
            seen.append(variables)
            super().__init__(model, variables)

    monkeypatch.setattr(capture_mod, "ChatTemplate", Recording)
    cfg = CaptureConfig(target_layers=TAPS, n_seq=1, max_new=2, chat_template_vars={"enable_thinking": False})
    capture(model_path, PROMPTS[:1], tmp_path, cfg)
    assert seen == [{"enable_thinking": False}]
