"""`flashdesk convert-draft`: a synthetic DFlash 2 checkpoint in the published z-lab layout
(config.json with `DFlash2DraftModel` + `dflash_config`, safetensors under the published
names, BF16 like the published files) converts to a GGUF on which llama.cpp computes the
same candidate lattice as the PyTorch draft of draft_training/ with the same weights, with
and without the published options (sliding window, output multiplier, soft-cap, embedding
and value scales, GELU); and every refusal (a draft for another target, features llama.cpp's
graph lacks, missing or unknown tensors, an existing output) is a ConvertError that says why.
Plain DFlash (v1) checkpoints and what flashdesk cannot run: test_convert_draft_v1.py.

The published names and config (tiny_drafts.py) are written out on purpose, independently of
the converter's own table.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.numpy import save_file as save_numpy
from tiny_drafts import published_config, published_name

import gguf_tools.dflash.convert as cd
from gguf_tools import check_gguf
from gguf_tools.cli import add_parsers
from gguf_tools.convert.errors import ConvertError
from gguf_tools.dflash import DraftConfig, random_tensors
from gguf_tools.dflash.convert import convert_draft

WIDTH = 8  # anchor + 7 slots, as tests/draft_training/test_parity.py


def draft_weights(cfg: DraftConfig, seed: int) -> dict[str, np.ndarray]:
    """Random GGUF-named weights whose norms and conv bases are not the identity, so a swapped
    or mis-mapped norm or conv tensor changes the lattice."""
    t = random_tensors(cfg, seed=seed, conv_std=0.05)
    rng = np.random.default_rng(seed + 1)
    for k, v in t.items():
        if k.endswith("norm.weight"):
            t[k] = rng.uniform(0.5, 1.5, v.shape).astype(np.float32)
        elif k.endswith("conv_base"):
            t[k] = v + (0.1 * rng.standard_normal(v.shape)).astype(np.float32)
    return t


def write_config(d, config: dict) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def cfg(model_path) -> DraftConfig:
    return DraftConfig.for_target(model_path, block_size=WIDTH)


@pytest.fixture(scope="module")
def f32_ckpt(tmp_path_factory, cfg):
    """An F32 checkpoint whose names carry llama.cpp's optional `model.` prefix: (folder, GGUF-named weights)."""
    d = tmp_path_factory.mktemp("f32_ckpt")
    t = draft_weights(cfg, seed=3)
    write_config(d, published_config(cfg))
    save_numpy({"model." + published_name(k): v for k, v in t.items()}, str(d / "model.safetensors"))
    return d, t


def variant(tmp_path, src, change=None, *, tensors: dict | None = None):
    """A copy of checkpoint `src` with its config changed by `change(config)` and/or other tensors."""
    d = tmp_path / "variant"
    config = json.loads((src / "config.json").read_text())
    if change:
        change(config)
    write_config(d, config)
    if tensors is None:
        (d / "model.safetensors").symlink_to(src / "model.safetensors")
    else:
        save_numpy(tensors, str(d / "model.safetensors"))
    return d


def gguf_tensors(path) -> dict[str, np.ndarray]:
    """Each tensor's values (a bf16 or q8_0 one unpacked to float32), d2t as stored."""
    return {t.name: np.asarray(t.data) if t.tensor_type.name in ("F32", "F16", "I64")
            else dequantize(t.data, t.tensor_type) for t in GGUFReader(path).tensors}


def lattices_agree(got: np.ndarray, cand: np.ndarray, scores: np.ndarray, lg: np.ndarray, anchor: int, K: int):
    """llama.cpp lattice rows `got` [WIDTH, E] vs the PyTorch draft's cand [B-1, K], scores
    [B-1, K, K] and logits lg [B-1, V]: same candidates up to swaps tied at the K-th place,
    scores within 1% of their scale (the tolerance and its reasons: test_parity.py)."""
    for slot in range(1, WIDTH):
        ids_got, ids_ref = got[slot, :K].astype(np.int64), cand[slot - 1]
        kth = np.sort(lg[slot - 1])[-K]
        for t in set(ids_got) ^ set(ids_ref):
            assert abs(lg[slot - 1, t] - kth) <= 5e-3 * np.abs(lg[slot - 1, ids_ref]).max(), f"slot {slot}: {t}"
        common = np.intersect1d(ids_got, ids_ref)
        assert len(common) >= K - 2, f"slot {slot}: only {len(common)} common candidates"
        prev_got = np.array([anchor]) if slot == 1 else got[slot - 1, :K].astype(np.int64)
        prev_ref = np.array([anchor]) if slot == 1 else cand[slot - 2]
        preds = np.intersect1d(prev_got, prev_ref)

        def pick(s, prev_ids, ids):  # [K(a), K(b)] restricted to preds x common, by token id
            rows = [int(np.flatnonzero(prev_ids == a)[0]) for a in preds] if slot > 1 else [0]
            return s[np.ix_(rows, [int(np.flatnonzero(ids == b)[0]) for b in common])]

        s_got = pick(got[slot, K:K + K * K].reshape(K, K), prev_got, ids_got)
        s_ref = pick(scores[slot - 1], prev_ref, ids_ref)
        err = np.abs(s_got - s_ref).max() / np.abs(s_ref).max()
        assert err <= 1e-2, f"slot {slot}: scores differ by {err:.2e} of their scale"


def torch_draft(model_path, cfg: DraftConfig):
    """The PyTorch draft with bf16-exact random weights (the published files are BF16)."""
    import torch

    from draft_training.model import DFlashDraft
    from draft_training.target import read_target_tensors

    tt = read_target_tensors(model_path)
    draft = DFlashDraft(cfg, tt.emb, tt.head)
    draft.load_numpy(draft_weights(cfg, seed=11))
    with torch.no_grad():
        for p in draft.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return draft


def publish(draft, config: dict, hf) -> dict[str, np.ndarray]:
    """Write `draft` as a published BF16 checkpoint in folder `hf`; returns its GGUF-named weights."""
    import torch
    from safetensors.torch import save_file

    weights = draft.export_numpy()  # GGUF names, float32 (bf16-exact)
    write_config(hf, config)
    save_file({published_name(k): torch.from_numpy(v).to(torch.bfloat16) for k, v in weights.items()},
              str(hf / "model.safetensors"))
    return weights


def torch_lattice(draft, feats, P: int, anchor: int):
    """The PyTorch draft's candidates [B-1, K], scores [B-1, K, K] and logits [B-1, V] for one block."""
    import torch

    c = draft.cfg
    with torch.no_grad():
        g = draft.inject(torch.as_tensor(feats)[None])  # [1, P, E]
        block = torch.tensor([[[anchor] + [c.mask_token_id] * (WIDTH - 1)]])  # [1, 1, B]
        h = draft.hidden(g, torch.arange(P)[None], torch.ones(1, P, dtype=torch.bool), block, torch.tensor([[P]]))
        cand, scores = draft.lattice(h[0, 0], torch.tensor(anchor))
        lg = draft.logits(h[0, 0, 1:])
    return cand.numpy(), scores.numpy(), lg.numpy()


@pytest.mark.timeout(240)
def test_published_dflash2_converts_to_the_torch_drafts_lattice(model_path, cfg, tmp_path):
    pytest.importorskip("torch")
    from tests.draft_training.test_parity import llama_lattice  # the engine's DFlashDrafter, one block

    draft = torch_draft(model_path, cfg)
    hf = tmp_path / "Tiny-DFlash2"
    weights = publish(draft, published_config(cfg), hf)

    seen = []
    r = convert_draft(hf, model_path, progress=lambda done, total: seen.append((done, total)))
    # a BF16 source stays bf16: f16 would overflow on a large target's features (convert.py)
    assert r.path == hf / "Tiny-DFlash2-bf16.gguf" and r.path.is_file() and r.dtype == "bf16"
    assert r.hf_class == "DFlash2DraftModel" and r.target_layers == cfg.target_layers and r.n_tensors == len(weights)
    assert seen and seen[-1][0] == seen[-1][1] == r.source_bytes
    assert not (hf / "Tiny-DFlash2-bf16.gguf.partial").exists()
    # every tensor lands under its GGUF name with its values, bit for bit
    stored = gguf_tensors(r.path)
    assert set(stored) == set(weights)
    for k, v in weights.items():
        np.testing.assert_array_equal(stored[k].astype(np.float32).reshape(v.shape), v, err_msg=k)
    meta = check_gguf(r.path, arrays=("dflash.",)).metadata
    assert tuple(meta["dflash.target_layers"]) == cfg.target_layers
    assert meta["dflash.block_size"] == WIDTH and meta["dflash.selector_top_k"] == cfg.selector_top_k
    assert meta["tokenizer.ggml.mask_token_id"] == cfg.mask_token_id
    assert not {"dflash.attention.sliding_window", "dflash.logit_scale", "dflash.final_logit_softcapping",
                "dflash.embedding_scale", "dflash.attention.value_scale", "dflash.hidden_activation"} & set(meta)

    # the lattice against PyTorch's float32 one, from the same weights stored as f32: llama.cpp computes a
    # bf16 matrix's product on bf16-rounded inputs, about 1% of the scores' scale away (bench/draft_precision.py
    # measures what each precision does to acceptance)
    r32 = convert_draft(hf, model_path, tmp_path / "f32.gguf", dtype="f32")
    got, feats, toks, anchor = llama_lattice(model_path, r32.path, cfg, "Order 31: sixty banners, glossy, by Monday to",
                                             " the")
    lattices_agree(got, *torch_lattice(draft, feats, len(toks), anchor), anchor, cfg.selector_top_k)


# z-lab's own DFlash 2 release uses a 2048-token window, output_multiplier ~0.196 and softcap 20; here a
# window of 6 (< the 8-slot block and the ~25-token prompt, so it hides context rows *and* the anchor
# from the last slots) on layer 0 only, and a softcap small enough to bend these logits
OPTIONS = dict(sliding_window=6, swa_layers=(True, False), logit_scale=0.196, final_logit_softcapping=2.5,
               embedding_scale=3.0, attention_value_scale=0.6, hidden_act="gelu_pytorch_tanh")


def options_config(cfg: DraftConfig) -> dict:
    """published_config with every option, under the keys the published model code reads."""
    c = published_config(cfg)
    c.update(use_sliding_window=True, sliding_window=OPTIONS["sliding_window"], hidden_act=OPTIONS["hidden_act"],
             layer_types=["sliding_attention", "full_attention"])
    c["dflash_config"].update(output_multiplier=OPTIONS["logit_scale"],
                              final_logit_softcapping=OPTIONS["final_logit_softcapping"],
                              input_embedding_scale=OPTIONS["embedding_scale"],
                              attention_value_scale=OPTIONS["attention_value_scale"])
    return c


@pytest.mark.timeout(240)
def test_published_options_convert_to_the_torch_drafts_lattice(model_path, cfg, tmp_path):
    """Window, logit multiplier, soft-cap, embedding and value scales and GELU survive conversion: llama.cpp's
    lattice matches the PyTorch draft with the same options and fails the same comparison against the
    PyTorch draft without any one of them (so a converter that dropped one would fail here)."""
    pytest.importorskip("torch")
    from tests.draft_training.test_parity import llama_lattice

    assert cfg.n_layer == 2
    ocfg = replace(cfg, **OPTIONS)
    draft = torch_draft(model_path, ocfg)
    hf = tmp_path / "Tiny-DFlash2-swa"
    publish(draft, options_config(cfg), hf)
    r = convert_draft(hf, model_path)
    meta = check_gguf(r.path, arrays=("dflash.",)).metadata
    assert meta["dflash.attention.sliding_window"] == 6
    assert meta["dflash.attention.sliding_window_pattern"] == [True, False]
    assert meta["dflash.hidden_activation"] == "gelu_pytorch_tanh"
    for key, want in [("logit_scale", 0.196), ("final_logit_softcapping", 2.5), ("embedding_scale", 3.0),
                      ("attention.value_scale", 0.6)]:
        assert meta[f"dflash.{key}"] == pytest.approx(want, rel=1e-6), key

    text = "Order 31: sixty banners, glossy, by Monday to the depot in Lyon, and forty flags by Friday for"
    got, feats, toks, anchor = llama_lattice(model_path, r.path, ocfg, text, " the")
    P, K = len(toks), cfg.selector_top_k
    assert P > 3 * OPTIONS["sliding_window"]
    ref = torch_lattice(draft, feats, P, anchor)
    lattices_agree(got, *ref, anchor, K)
    for name, off in [("sliding_window", 0), ("swa_layers", ()), ("logit_scale", None),
                      ("final_logit_softcapping", None), ("embedding_scale", None), ("attention_value_scale", None),
                      ("hidden_act", "silu")]:
        if name == "swa_layers":  # the window on both layers instead of layer 0 only
            other = replace(ocfg, swa_layers=())
        else:
            other = replace(ocfg, **{name: off}, **({"swa_layers": ()} if name == "sliding_window" else {}))
        draft.cfg = other  # llama.cpp's lattice must not pass for the draft without this option
        with pytest.raises(AssertionError):
            lattices_agree(got, *torch_lattice(draft, feats, P, anchor), anchor, K)
    draft.cfg = ocfg


def test_f32_checkpoint_with_model_prefix_round_trips(f32_ckpt, model_path, tmp_path):
    src, weights = f32_ckpt
    r = convert_draft(src, model_path, tmp_path / "d.gguf")
    assert r.dtype == "f32" and r.n_params == sum(v.size for v in weights.values())
    stored = gguf_tensors(r.path)
    for k, v in weights.items():
        np.testing.assert_array_equal(stored[k].reshape(v.shape), v, err_msg=k)


@pytest.mark.parametrize("change, says", [
    (lambda c: c.update(hidden_size=1024), "hidden_size is 1024 but the target's n_embd is 576"),
    (lambda c: c.update(vocab_size=151936), "vocab_size is 151936"),
    (lambda c: c.update(num_target_layers=36), "target with 36 layers"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 8, 29]), r"target has 30 layers"),
    (lambda c: c["dflash_config"].update(mask_token_id=None), "mask_token_id"),
], ids=["hidden-size", "vocab", "num-target-layers", "tap-out-of-range", "no-mask-token"])
def test_draft_for_another_target_is_refused(f32_ckpt, model_path, tmp_path, change, says):
    with pytest.raises(ConvertError, match=says):
        convert_draft(variant(tmp_path, f32_ckpt[0], change), model_path, tmp_path / "d.gguf")


@pytest.mark.parametrize("change, says", [
    (lambda c: c.update(attention_bias=True), "attention_bias"),
    (lambda c: c.update(hidden_act="relu2"), "activation 'relu2'"),
    (lambda c: c.update(use_sliding_window=True, sliding_window=2048, layer_types=None), "ambiguous"),
    (lambda c: c.update(layer_types=["sliding_attention"] * c["num_hidden_layers"]), "ambiguous"),
    (lambda c: c.update(use_sliding_window=True, sliding_window=None,
                        layer_types=["sliding_attention"] * c["num_hidden_layers"]), "no positive integer"),
    (lambda c: c["dflash_config"].update(output_multiplier=0), "output_multiplier"),
], ids=["bias", "activation", "window-without-layer-types", "window-switched-off", "no-window-size",
        "zero-multiplier"])
def test_features_llama_cpp_lacks_are_refused_not_dropped(f32_ckpt, model_path, tmp_path, change, says):
    with pytest.raises(ConvertError, match=says):
        convert_draft(variant(tmp_path, f32_ckpt[0], change), model_path, tmp_path / "d.gguf")


def test_use_swa_slides_every_layer(f32_ckpt, model_path, tmp_path):
    """DFlash's own switch (dflash_config.use_swa + swa_window_size) puts the window on every layer."""
    r = convert_draft(variant(tmp_path, f32_ckpt[0], lambda c: c["dflash_config"].update(
        use_swa=True, swa_window_size=2048)), model_path, tmp_path / "d.gguf")
    meta = check_gguf(r.path, arrays=("dflash.",)).metadata
    assert meta["dflash.attention.sliding_window"] == 2048
    assert meta["dflash.attention.sliding_window_pattern"] == [True, True]


def test_missing_unknown_and_misshapen_tensors_are_refused(f32_ckpt, model_path, tmp_path):
    src, weights = f32_ckpt
    pub = {published_name(k): v for k, v in weights.items()}
    missing = {k: v for k, v in pub.items() if k != "layers.1.mlp_conv.base_kernel"}
    with pytest.raises(ConvertError, match=r"lacks the tensors for blk\.1\.ffn_conv_base"):
        convert_draft(variant(tmp_path / "m", src, tensors=missing), model_path, tmp_path / "d.gguf")
    n_embd = weights["fc.weight"].shape[0]
    extra = {**pub, "lm_head.weight": np.zeros((4, n_embd), np.float32),
             "layers.0.self_attn.q_proj.bias": np.zeros(n_embd, np.float32)}
    with pytest.raises(ConvertError, match=r"no place.*layers\.0\.self_attn\.q_proj\.bias.*lm_head\.weight"):
        convert_draft(variant(tmp_path / "u", src, tensors=extra), model_path, tmp_path / "d.gguf")
    bad = {**pub, "fc.weight": pub["fc.weight"][:, :576].copy()}
    with pytest.raises(ConvertError, match=r"'fc\.weight' has shape \[576, 576\]"):
        convert_draft(variant(tmp_path / "s", src, tensors=bad), model_path, tmp_path / "d.gguf")
    assert not list(tmp_path.glob("*.gguf*"))


def test_output_goes_through_partial_and_needs_force(f32_ckpt, model_path, tmp_path, monkeypatch):
    out = tmp_path / "d.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(ConvertError, match="already exists.*--force"):
        convert_draft(f32_ckpt[0], model_path, out)
    assert out.read_bytes() == b"keep me"

    written = []
    real = cd.write_dflash_draft

    def failing(path, *a, **k):  # the writer dies half-way: nothing may carry the final name
        written.append(path)
        real(path, *a, **k)
        raise RuntimeError("disk full")

    monkeypatch.setattr(cd, "write_dflash_draft", failing)
    with pytest.raises(RuntimeError):
        convert_draft(f32_ckpt[0], model_path, tmp_path / "new.gguf")
    assert written == [tmp_path / "new.gguf.partial"]
    assert not (tmp_path / "new.gguf").exists() and not (tmp_path / "new.gguf.partial").exists()
    monkeypatch.undo()

    r = convert_draft(f32_ckpt[0], model_path, out, force=True)
    assert r.path == out and out.stat().st_size == r.file_bytes > 1000


def test_cli_converts_and_refuses(f32_ckpt, model_path, tmp_path, capsys):
    p = argparse.ArgumentParser()
    add_parsers(p.add_subparsers())
    out = tmp_path / "cli.gguf"
    a = p.parse_args(["convert-draft", str(f32_ckpt[0]), "--target", model_path, "--out", str(out), "--json"])
    assert a.func(a) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(out) and out.is_file()
    a = p.parse_args(["convert-draft", str(f32_ckpt[0]), "--target", model_path, "--out", str(out)])
    assert a.func(a) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "HINT: pass --force" in err and "Traceback" not in err
