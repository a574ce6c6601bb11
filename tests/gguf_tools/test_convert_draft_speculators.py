"""`flashdesk convert-draft` of a draft made with vLLM's `speculators` library (speculators_model_type
dflash2 or dflash, the decoder in transformer_layer_config, taps as aux_hidden_state_layer_ids, the
verifier's embeddings and head saved beside the draft's own tensors): it converts to the very GGUF the
same weights give in z-lab's layout (same keys, taps and tensors), its in-block attention and window
are carried over, and what llama.cpp's DFlash graph cannot run is a ConvertError that says why.
Checkpoints: tiny_drafts.py; target: the Hub stand-in's tiny llama (hub_models.py).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from gguf import GGUFReader
from hub_models import N_FF, N_HEAD, write_target
from safetensors.numpy import save_file
from tiny_drafts import write_draft_checkpoint

from gguf_tools.convert.errors import ConvertError
from gguf_tools.dflash import DraftConfig
from gguf_tools.dflash.convert import convert_draft


@pytest.fixture(scope="module")
def target(tmp_path_factory, model_path):
    return write_target(tmp_path_factory.mktemp("target") / "Tiny-Q8_0.gguf", model_path)


@pytest.fixture(scope="module")
def cfg(target) -> DraftConfig:
    # capture id 1 (= HF layer 0, speculators aux id 1): the one tap a 2-layer target allows
    return DraftConfig.for_target(target, target_layers=(1,), block_size=4, n_layer=2, n_head=N_HEAD,
                                  n_head_kv=N_HEAD, n_ff=N_FF, selector_top_k=4, selector_rank=8, conv_group_size=16,
                                  conv_kernel_size=2)


def gguf(path) -> tuple[dict, dict]:
    r = GGUFReader(path)
    fields = {k: f.contents() for k, f in r.fields.items() if k.startswith("dflash.")}
    return fields, {t.name: np.asarray(t.data) for t in r.tensors}


@pytest.mark.parametrize("kind", ["dflash2", "dflash1"])
def test_a_speculators_draft_converts_to_the_same_gguf_as_its_zlab_twin(target, cfg, tmp_path, kind):
    c = replace(cfg, kind=kind)
    spec = write_draft_checkpoint(tmp_path / "spec", c, "speculators", seed=4)
    zlab = write_draft_checkpoint(tmp_path / "zlab", c, "z-lab", seed=4)
    r = convert_draft(spec, target, tmp_path / "spec.gguf")
    convert_draft(zlab, target, tmp_path / "zlab.gguf")
    assert (r.layout, r.kind, r.target_layers, r.block_size) == ("speculators", kind, (1,), 4)
    assert r.hf_class == {"dflash2": "DFlash2DraftModel", "dflash1": "DFlashDraftModel"}[kind]
    (fs, ts), (fz, tz) = gguf(tmp_path / "spec.gguf"), gguf(tmp_path / "zlab.gguf")
    assert fs == fz and fs["dflash.target_layers"] == [1]  # aux ids are llama.cpp's capture ids already
    assert ts.keys() == tz.keys() and all(np.array_equal(ts[k], tz[k]) for k in ts)
    assert not [k for k in ts if "token_embd" in k or k == "output.weight"]  # the verifier's copies stay out


def rewrite(src, dst, change=None, tensors: dict | None = None):
    """A copy of checkpoint `src` with its config changed by `change(config)` and/or tensors added."""
    dst.mkdir(parents=True)
    config = json.loads((src / "config.json").read_text())
    if change:
        change(config)
    (dst / "config.json").write_text(json.dumps(config))
    if tensors is None:
        (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    else:
        from safetensors.numpy import load_file
        save_file(load_file(str(src / "model.safetensors")) | tensors, str(dst / "model.safetensors"))
    return dst


def slide(config, non_causal, types=("sliding_attention", "sliding_attention")):
    config["transformer_layer_config"] |= {"layer_types": list(types), "use_sliding_window": True,
                                           "sliding_window": 64}
    config["sliding_window_non_causal"] = non_causal


def test_the_window_and_the_in_block_attention_are_carried_over(target, cfg, tmp_path):
    src = write_draft_checkpoint(tmp_path / "src", cfg, "speculators")
    both_ways = rewrite(src, tmp_path / "a", lambda c: slide(c, True, ("sliding_attention", "full_attention")))
    fields, _ = gguf(convert_draft(both_ways, target, tmp_path / "a.gguf").path)
    assert fields["dflash.attention.sliding_window"] == 64 and fields["dflash.attention.causal"] is False
    assert fields["dflash.attention.sliding_window_pattern"] == [True, False]
    causal = rewrite(src, tmp_path / "b", lambda c: slide(c, False))  # speculators' default: causal sliding layers
    fields, _ = gguf(convert_draft(causal, target, tmp_path / "b.gguf").path)
    assert fields["dflash.attention.causal"] is True and fields["dflash.attention.sliding_window"] == 64


def test_what_llamacpp_cannot_run_is_refused_with_the_reason(target, cfg, tmp_path):
    src = write_draft_checkpoint(tmp_path / "src", cfg, "speculators")
    n = iter(range(100))

    def refused(match, change=None, tensors=None):
        d = rewrite(src, tmp_path / f"v{next(n)}", change, tensors)
        with pytest.raises(ConvertError, match=match):
            convert_draft(d, target, tmp_path / "out.gguf")

    d2t = {"d2t": np.arange(1000, dtype=np.int64), "t2d": np.ones(cfg.n_vocab, dtype=np.bool_)}
    refused(r"reduced vocabulary of 1000 tokens.*full vocabulary", lambda c: c.update(draft_vocab_size=1000), d2t)
    refused(r"sample_from_anchor is on", lambda c: c.update(sample_from_anchor=True))
    refused(r"causally inside a block.*one setting for all layers",
            lambda c: slide(c, False, ("sliding_attention", "full_attention")))
    refused(r"speculators 'eagle3' draft.*only DFlash 2 and DFlash",
            lambda c: c.update(speculators_model_type="eagle3", speculators_config={"algorithm": "eagle3"}))
    refused(r"speculators DSpark", lambda c: c.update(speculators_model_type="dspark",
                                                      speculators_config={"algorithm": "dspark"}))
    refused(r"disagree", lambda c: c.update(speculators_config={"algorithm": "dflash"}))
    refused(r"taps the embeddings \(id 0\)", lambda c: c.update(aux_hidden_state_layer_ids=[0]))
    refused(r"taps target layers \[1\]", lambda c: c.update(aux_hidden_state_layer_ids=[2]))  # the final state
    refused(r"transformer_layer_config, which is missing", lambda c: c.pop("transformer_layer_config"))
    refused(r"target_hidden_size 128 differs", lambda c: c.update(target_hidden_size=128))
    refused(r"attention biases", lambda c: c["transformer_layer_config"].update(attention_bias=True))
    refused(r"no place in a 2-layer DFlash 2.*d2t", tensors={"d2t": np.arange(4, dtype=np.int64)})
    assert not (tmp_path / "out.gguf").exists()

