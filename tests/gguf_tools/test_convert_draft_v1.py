"""`flashdesk convert-draft` of a plain DFlash (v1) checkpoint: config.json with `DFlashDraftModel`
(no conv or selector settings, `block_size` at the top level, as z-lab's Qwen3 DFlash releases
have it), BF16 safetensors under the published names, converts to a v1 GGUF (no conv or selector
key or tensor) that llama.cpp loads and that drafts without changing a token; and what flashdesk
cannot run (DSpark, a v1 class with DFlash 2 settings or tensors) is a ConvertError that says why.
The checkpoint helpers are test_convert_draft.py's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from safetensors.numpy import save_file as save_numpy
from test_convert_draft import WIDTH, draft_weights, gguf_tensors, variant, write_config
from tiny_drafts import published_config, published_name, published_v1_config
from tiny_hf import write_checkpoint

from gguf_tools import check_gguf
from gguf_tools.convert.errors import ConvertError
from gguf_tools.dflash import DraftConfig, read_draft
from gguf_tools.dflash.convert import convert_draft


@pytest.fixture(scope="module")
def cfg(model_path) -> DraftConfig:
    return DraftConfig.for_target(model_path, block_size=WIDTH)


@pytest.fixture(scope="module")
def v2_ckpt(tmp_path_factory, cfg):
    """A DFlash 2 checkpoint (F32, published names): (folder, GGUF-named weights)."""
    d = tmp_path_factory.mktemp("v2_ckpt")
    t = draft_weights(cfg, seed=3)
    write_config(d, published_config(cfg))
    save_numpy({published_name(k): v for k, v in t.items()}, str(d / "model.safetensors"))
    return d, t


@pytest.fixture(scope="module")
def v1_ckpt(tmp_path_factory, cfg):
    """A BF16 plain DFlash (v1) checkpoint under the published names: (folder, GGUF-named weights as stored)."""
    v1 = replace(cfg, kind="dflash1")
    d = tmp_path_factory.mktemp("v1_ckpt")
    t = draft_weights(v1, seed=5)
    assert not [k for k in t if "selector" in k or "conv" in k]
    stored = write_checkpoint(d, published_v1_config(v1), {published_name(k): v for k, v in t.items()}, dtype="BF16")
    return d, {k: stored[published_name(k)] for k in t}


def test_plain_dflash_v1_converts_to_a_draft_that_runs_losslessly(v1_ckpt, cfg, model_path, engine, tmp_path):
    """DFlashDraftModel -> a v1 GGUF (no conv or selector key or tensor) with the weights as stored,
    which llama.cpp loads as a draft without a selector and which drafts without changing a token."""
    from engine import Engine, EngineConfig, SamplingParams
    from engine.speculative.params import SpecParams

    src, weights = v1_ckpt
    r = convert_draft(src, model_path, tmp_path / "v1.gguf")
    assert (r.hf_class, r.kind, r.selector_top_k, r.block_size, r.dtype) == ("DFlashDraftModel", "dflash1", 0, WIDTH,
                                                                              "bf16")
    stored = gguf_tensors(r.path)
    assert set(stored) == set(weights)
    for k, v in weights.items():  # BF16 stays bf16, bit for bit (convert.py)
        np.testing.assert_array_equal(stored[k].reshape(v.shape).astype(np.float32), v, err_msg=k)
    meta = check_gguf(r.path).metadata
    assert not [k for k in meta if "selector" in k or "conv" in k]
    read = read_draft(r.path)
    assert read.kind == "dflash1" and read.target_layers == cfg.target_layers and read.selector_top_k == 0

    greedy = SamplingParams(temperature=0)
    msgs = [[{"role": "user", "content": "List three colours of ink for a T-shirt order."}],
            [{"role": "user", "content": "Order 42: 300 blue shirts, size M. Deliver Friday. Reply as JSON."}]]
    plain = [engine.chat(m, sampling=greedy, max_tokens=32).tokens for m in msgs]
    eng = Engine.load(model_path, EngineConfig(n_ctx=1024, n_parallel=2, n_threads=2, draft=str(r.path)))
    try:
        assert eng.drafters["dflash"].kind == "dflash1", eng.speculation.draft_error
        got = [eng.chat(m, sampling=greedy, max_tokens=32, speculative=SpecParams(mode="dflash", block=4))
               for m in msgs]
    finally:
        eng.close()
    assert [c.tokens for c in got] == plain
    assert all(c.usage.speculation.verifies > 0 for c in got)


def test_what_flashdesk_cannot_run_is_refused_naming_what_is_supported(v2_ckpt, v1_ckpt, model_path, tmp_path):
    def dspark(c):
        c["architectures"] = ["Qwen3DSparkModel"]

    with pytest.raises(ConvertError, match=r"DSpark draft.*Supported: DFlash2DraftModel, DFlashDraftModel"):
        convert_draft(variant(tmp_path / "a", v2_ckpt[0], dspark), model_path, tmp_path / "d.gguf")
    with pytest.raises(ConvertError, match="no DFlash draft"):
        convert_draft(variant(tmp_path / "b", v2_ckpt[0], lambda c: c.update(architectures=["LlamaForCausalLM"])),
                      model_path, tmp_path / "d.gguf")
    # a DFlash 2 config under the v1 class name: which kind is ambiguous
    with pytest.raises(ConvertError, match=r"plain DFlash draft \(DFlashDraftModel\) with DFlash 2 settings"):
        convert_draft(variant(tmp_path / "c", v2_ckpt[0], lambda c: c.update(architectures=["DFlashDraftModel"])),
                      model_path, tmp_path / "d.gguf")
    # a v1 config over DFlash 2 weights: the conv and selector tensors have no place in it
    v2_weights = {published_name(k): v for k, v in v2_ckpt[1].items()}
    with pytest.raises(ConvertError, match=r"no place in a 2-layer DFlash v1.*candidate_selector"):
        convert_draft(variant(tmp_path / "e", v1_ckpt[0], tensors=v2_weights), model_path, tmp_path / "d.gguf")
    assert not (tmp_path / "d.gguf").exists()
