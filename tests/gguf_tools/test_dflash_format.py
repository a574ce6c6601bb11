"""The DFlash draft format read back: `read_draft` returns what the writer wrote (DFlash 2
and plain DFlash v1), refuses what is no draft we can run with every problem named, and `fits` names
each way a draft misses a target.
No llama.cpp here: the engine's use of the same calls is tests/engine/speculative/test_dflash_refusals.py."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from gguf import GGUFWriter

from gguf_tools import check_gguf
from gguf_tools.dflash import (CAPTURE_ARCHS, DraftConfig, TargetFacts, capture_refusal, fits, kind_of, kind_words,
                               random_tensors, read_draft, tensor_shapes, vocab_digest, write_dflash_draft)


@pytest.fixture(scope="module")
def cfg(model_path) -> DraftConfig:
    return DraftConfig.for_target(model_path, block_size=8)


@pytest.fixture(scope="module")
def smollm2(model_path) -> TargetFacts:
    m = check_gguf(model_path, arrays=("tokenizer.ggml.tokens",)).metadata
    return TargetFacts("llama", m["llama.embedding_length"], m["llama.block_count"], len(m["tokenizer.ggml.tokens"]),
                       vocab_digest(m["tokenizer.ggml.tokens"]))


def write_gguf(path, keys: dict[str, int | float], tensors: tuple[str, ...]) -> None:
    """A dflash GGUF with only `keys` (uint32 for ints, float32 for floats) and zero tensors."""
    w = GGUFWriter(str(path), "dflash")
    for key, value in keys.items():
        (w.add_float32 if isinstance(value, float) else w.add_uint32)(key, value)
    for name in tensors:
        w.add_tensor(name, np.zeros((2, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def as_config(d) -> DraftConfig:
    return DraftConfig(**{f.name: getattr(d, f.name) for f in fields(DraftConfig)})


@pytest.mark.parametrize("options", [{}, dict(sliding_window=512, swa_layers=(False, True), logit_scale=0.25,
                                             final_logit_softcapping=30.0, embedding_scale=2.0, attention_scale=0.5,
                                             attention_value_scale=0.5, hidden_act="gelu", causal=True),
                                     dict(sliding_window=64)])
def test_read_draft_reads_back_what_was_written(tmp_path, model_path, cfg, options):
    want = replace(cfg, **options)
    path = tmp_path / "d.gguf"
    write_dflash_draft(path, want, random_tensors(want), model_path)
    got = read_draft(path)
    assert as_config(got) == replace(want, target_n_layer=None)  # a draft does not record its target's depth
    assert got.path == str(path) and got.n_vocab_draft is None and len(got.vocab_digest) == 64


def test_a_reduced_vocabulary_is_read_from_d2t(tmp_path, model_path, cfg):
    path = tmp_path / "d2t.gguf"
    write_dflash_draft(path, cfg, random_tensors(cfg, keep_ids=np.arange(0, 49152, 6, dtype=np.int64)), model_path)
    assert read_draft(path).n_vocab_draft == 8192


def test_no_dflash2_draft_is_refused_with_every_problem(tmp_path, model_path):
    with pytest.raises(ValueError, match="'llama' model, not a DFlash draft"):
        read_draft(model_path)
    write_gguf(tmp_path / "v1.gguf", {"dflash.block_size": 16}, ("fc.weight",))  # DFlash v1, hardly any keys
    with pytest.raises(ValueError) as e:
        read_draft(tmp_path / "v1.gguf")
    msg = str(e.value)
    for bit in ("dflash.embedding_length is missing", "dflash.target_layers is missing", "no tokenizer"):
        assert bit in msg, msg
    assert "selector" not in msg and "conv" not in msg, msg  # a plain DFlash draft has neither

    path = tmp_path / "bare.gguf"  # selector present, hardly any keys, one mistyped
    write_gguf(path, {"dflash.selector_top_k": 16, "dflash.block_count": 2.0},
               ("selector_predecessor.weight", "selector_successor.weight", "selector_hidden.weight"))
    with pytest.raises(ValueError) as e:
        read_draft(path)
    msg = str(e.value)
    for bit in ("dflash.embedding_length is missing", "dflash.block_count is 2.0, not an integer",
                "dflash.target_layers is missing", "no tokenizer", "tokenizer.ggml.mask_token_id is missing"):
        assert bit in msg, msg


def test_fits_names_each_mismatch(tmp_path, model_path, cfg, smollm2):
    path = tmp_path / "d.gguf"
    write_dflash_draft(path, cfg, random_tensors(cfg), model_path)
    draft = read_draft(path)
    assert fits(draft, smollm2) == []
    assert "n_embd is 576 but the target's is 960" in fits(draft, replace(smollm2, n_embd=960))[0]
    assert "[2, 9, 15, 21, 28], but the target has 24 layers" in fits(draft, replace(smollm2, n_layer=24))[0]
    assert "another tokenizer" in fits(draft, replace(smollm2, vocab_digest="0" * 64))[0]
    assert fits(draft, replace(smollm2, architecture="qwen2")) == [capture_refusal("qwen2")]
    assert capture_refusal("llama") is None and "llama" in CAPTURE_ARCHS
    assert "'qwen2' cannot publish layer inputs" in capture_refusal("qwen2")


SELECTOR_KEYS = ("dflash.conv_kernel_size", "dflash.conv_group_size", "dflash.selector_rank", "dflash.selector_top_k")


@pytest.mark.parametrize("options", [{}, dict(sliding_window=64, logit_scale=0.5, causal=True)])
def test_a_dflash1_draft_is_written_and_read_back(tmp_path, model_path, cfg, options):
    """A plain DFlash (v1) draft: the same keys and tensors as DFlash 2 but no conv or selector
    key or tensor; it reads back as kind "dflash1" with its selector fields 0."""
    want = replace(cfg, kind="dflash1", **options)
    assert (want.selector_top_k, want.selector_rank, want.conv_kernel_size, want.conv_group_size) == (0, 0, 0, 0)
    path = tmp_path / "v1.gguf"
    write_dflash_draft(path, want, random_tensors(want), model_path)
    s = check_gguf(path)
    names = {t.name for t in s.tensors}
    assert names == set(tensor_shapes(want)) and kind_of(names) == "dflash1"
    assert not [n for n in names if "selector" in n or "conv" in n]
    assert not set(SELECTOR_KEYS) & set(s.metadata)
    got = read_draft(path)
    assert got.kind == "dflash1" and got.selector_top_k == 0 and got.block_size == 8
    assert as_config(got) == replace(want, target_n_layer=None)
    v2 = read_draft(_v2(tmp_path, model_path, cfg))
    assert v2.kind == "dflash2" and v2.selector_top_k == 16


def _v2(tmp_path, model_path, cfg):
    path = tmp_path / "v2.gguf"
    write_dflash_draft(path, cfg, random_tensors(cfg), model_path)
    return path


def test_what_flashdesk_cannot_run_is_refused_clearly(tmp_path, model_path, cfg):
    v1 = replace(cfg, kind="dflash1")
    path = tmp_path / "v1-d2t.gguf"  # llama.cpp loads it; the v1 drafter does not handle a reduced vocabulary
    write_dflash_draft(path, v1, random_tensors(v1, keep_ids=np.arange(0, 49152, 6, dtype=np.int64)), model_path)
    with pytest.raises(ValueError, match=r"plain DFlash \(v1\) draft with a reduced vocabulary \(d2t\)"):
        read_draft(path)
    write_gguf(tmp_path / "dspark.gguf", {"dflash.block_size": 16}, ("fc.weight", "markov_w1.weight"))
    with pytest.raises(ValueError, match="is a DSpark draft"):
        read_draft(tmp_path / "dspark.gguf")
    # selector parts without selector_hidden: llama.cpp would report K candidates and build no lattice
    write_gguf(tmp_path / "half.gguf", {"dflash.selector_top_k": 16}, ("fc.weight", "selector_predecessor.weight"))
    with pytest.raises(ValueError, match="parts of a DFlash 2 candidate selector.*selector_predecessor"):
        read_draft(tmp_path / "half.gguf")
    write_gguf(tmp_path / "nohidden.gguf", {}, ("selector_hidden.weight",))  # DFlash 2 without its codebooks
    with pytest.raises(ValueError, match="selector lacks selector_predecessor.weight, selector_successor.weight"):
        read_draft(tmp_path / "nohidden.gguf")
    bad = replace(v1, kind="dflash3")
    assert "kind must be one of dflash2, dflash1" in bad.problems()


def test_kinds_in_words():
    assert kind_of(["fc.weight", "selector_hidden.weight"]) == "dflash2" and kind_of(["fc.weight"]) == "dflash1"
    assert kind_of(["markov_w1.weight", "selector_hidden.weight"]) == "dspark"
    assert kind_words("dflash2", 16) == "DFlash 2 (K=16 candidates)"
    assert kind_words("dflash1").startswith("DFlash v1")
