"""The DFlash 2 draft writer: configs, tensor checks, and that llama.cpp loads what it writes."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from engine.llama.model import Model
from engine.llama import ext
from gguf_tools import check_gguf
from gguf_tools.dflash import (DraftConfig, default_target_layers, pick_mask_token, random_tensors, tensor_shapes,
                               write_dflash_draft, write_random_draft)


@pytest.fixture(scope="module")
def cfg(model_path) -> DraftConfig:
    return DraftConfig.for_target(model_path)


def test_default_taps_and_mask_token(model_path, cfg):
    assert default_target_layers(30) == (2, 9, 15, 21, 28)
    assert all(t < 8 for t in default_target_layers(8))
    meta = check_gguf(model_path, arrays=("tokenizer.",)).metadata
    assert pick_mask_token(meta) == 16  # "<empty_output>": a control token SmolLM2 chat never uses
    assert meta["tokenizer.ggml.tokens"][16] == b"<empty_output>"
    assert (cfg.n_embd, cfg.n_vocab, cfg.target_n_layer) == (576, 49152, 30)
    assert cfg.target_layers == (2, 9, 15, 21, 28) and cfg.mask_token_id == 16


def test_config_refuses_what_llama_cpp_would_refuse(cfg):
    from dataclasses import replace
    for bad in (dict(target_layers=(2, 30)), dict(target_layers=()), dict(conv_group_size=100),
                dict(n_embd=64), dict(mask_token_id=49152), dict(block_size=1), dict(n_head_kv=2),
                dict(swa_layers=(True, False)), dict(sliding_window=8, swa_layers=(True,)),
                dict(sliding_window=8, swa_layers=(False, False)), dict(sliding_window=-1), dict(logit_scale=0.0),
                dict(embedding_scale=float("nan")), dict(final_logit_softcapping=0.0), dict(hidden_act="relu")):
        with pytest.raises(ValueError):
            replace(cfg, **bad).validate()


def test_tensors_are_checked_before_writing(tmp_path, model_path, cfg):
    tensors = random_tensors(cfg, seed=1)
    tensors["fc.weight"] = tensors["fc.weight"][:, :-1]
    with pytest.raises(ValueError, match="fc.weight"):
        write_dflash_draft(tmp_path / "bad.gguf", cfg, tensors, model_path)
    tensors = random_tensors(cfg, seed=1)
    tensors["token_embd.weight"] = np.zeros((4, 576), np.float32)
    with pytest.raises(ValueError, match="unexpected"):
        write_dflash_draft(tmp_path / "bad.gguf", cfg, tensors, model_path)
    assert not (tmp_path / "bad.gguf").exists()


def test_random_tensors_are_seeded_and_identity_conv(cfg):
    a, b = random_tensors(cfg, seed=3), random_tensors(cfg, seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    base = a["blk.0.attn_conv_base"]  # [2, kernel, n_embd]
    assert base.shape == (2, 4, 576) and np.all(base[:, 0] == 1) and np.all(base[:, 1:] == 0)
    assert tensor_shapes(cfg)["blk.1.ffn_conv_proj.weight"] == (2 * 4 * 576 // 64, 576)


def test_written_draft_loads_as_dflash2(tmp_path, model_path):
    path = tmp_path / "draft.gguf"
    cfg = write_random_draft(path, model_path, seed=0, target_layers=(1, 5, 29), block_size=8, matrix_dtype="f16")
    summary = check_gguf(path)
    names = {t.name for t in summary.tensors}
    assert not names & {"token_embd.weight", "output.weight", "d2t"}  # borrowed from the target
    meta = summary.metadata
    assert summary.architecture == "dflash" and meta["dflash.attention.causal"] is False
    assert meta["dflash.selector_top_k"] == 16 and meta["dflash.block_size"] == 8
    draft = Model(path)
    try:
        assert draft.info.architecture == "dflash" and draft.info.n_embd == 576
        assert ext.llama_model_dflash_selector_top_k(draft.ptr) == 16
        assert ext.target_layer_ids(draft.ptr) == [1, 5, 29]
        assert llama_cpp.llama_vocab_mask(draft.vocab) == cfg.mask_token_id == 16
        assert draft.n_vocab == 49152 and draft.token_text(2) == "<|im_end|>"
    finally:
        draft.close()


def test_reduced_vocabulary_draft_loads(tmp_path, model_path, cfg):
    keep = np.arange(0, 49152, 7, dtype=np.int64)
    path = tmp_path / "d2t.gguf"
    write_random_draft(path, model_path, seed=2, keep_ids=keep)
    shapes = {t.name: (t.shape, t.type_name) for t in check_gguf(path).tensors}
    assert shapes["d2t"] == ((len(keep),), "I64") and shapes["output.weight"][0] == (576, len(keep))
    with pytest.raises(ValueError, match="d2t"):
        write_dflash_draft(path, cfg, random_tensors(cfg, keep_ids=keep[::-1].copy()), model_path)
    draft = Model(path)
    draft.close()


def test_options_write_their_keys_and_defaults_write_none(tmp_path, model_path, cfg):
    """Each optional setting lands under the key dflash.cpp reads; the defaults write nothing, so a draft
    written without options is byte-identical to one written before the options existed."""
    from dataclasses import replace
    tensors = random_tensors(cfg, seed=2)
    write_dflash_draft(tmp_path / "a.gguf", cfg, tensors, model_path)
    meta = check_gguf(tmp_path / "a.gguf").metadata
    assert not [k for k in meta if k.startswith("dflash.") and any(w in k for w in ("sliding", "scale", "softcap",
                                                                                        "activation"))]
    explicit = replace(cfg, sliding_window=0, swa_layers=(), logit_scale=None, final_logit_softcapping=None,
                       embedding_scale=None, attention_scale=None, attention_value_scale=None, hidden_act="silu")
    write_dflash_draft(tmp_path / "b.gguf", explicit, tensors, model_path)
    assert (tmp_path / "a.gguf").read_bytes() == (tmp_path / "b.gguf").read_bytes()

    opt = replace(cfg, sliding_window=512, swa_layers=(False, True), logit_scale=0.25, final_logit_softcapping=30.0,
                  embedding_scale=2.0, attention_scale=0.1, attention_value_scale=0.5, hidden_act="gelu")
    write_dflash_draft(tmp_path / "c.gguf", opt, tensors, model_path)
    meta = check_gguf(tmp_path / "c.gguf", arrays=("dflash.attention.sliding_window_pattern",)).metadata
    assert meta["dflash.attention.sliding_window"] == 512
    assert meta["dflash.attention.sliding_window_pattern"] == [False, True]
    for key, want in [("logit_scale", 0.25), ("final_logit_softcapping", 30.0), ("embedding_scale", 2.0),
                      ("attention.scale", 0.1), ("attention.value_scale", 0.5)]:
        assert meta[f"dflash.{key}"] == pytest.approx(want), key
    assert meta["dflash.hidden_activation"] == "gelu"
    draft = Model(tmp_path / "c.gguf")  # llama.cpp accepts every key (a bad pattern or activation throws)
    draft.close()
