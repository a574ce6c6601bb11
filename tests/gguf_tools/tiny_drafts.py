"""Tiny DFlash draft checkpoints in each layout flashdesk converts, for the converter and pull tests:
z-lab's DFlash 2 (`DFlash2DraftModel` + `dflash_config`) and DFlash v1 (`DFlashDraftModel`), and vLLM
speculators' dflash2 / dflash (`speculators_model_type`, decoder in `transformer_layer_config`).

The names and keys are written out here on purpose, independently of the converter's own tables.
Facts: z-lab/dflash tests/fixtures/dflash2-safetensors-header.json and dflash2-config.json; the vendored
llama.cpp's gguf-py tensor_mapping.py; vllm-project/speculators src/speculators/models/dflash/ (branch
dflash2) and src/speculators/model.py (the verifier's `embed_tokens` / `lm_head` saved with the draft).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from gguf_tools.dflash import DFLASH1, DraftConfig, random_tensors

_GLOBAL = {"fc.weight": "fc.weight", "enc.output_norm.weight": "hidden_norm.weight",
           "output_norm.weight": "norm.weight",
           "selector_predecessor.weight": "candidate_selector.predecessor_codebook",
           "selector_successor.weight": "candidate_selector.successor_codebook",
           "selector_hidden.weight": "candidate_selector.hidden_projection.weight"}
_LAYER = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
          "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
          "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
          "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
          "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
          "ffn_down.weight": "mlp.down_proj.weight", "attn_conv_base": "attention_conv.base_kernel",
          "attn_conv_proj.weight": "attention_conv.kernel_projection.weight", "ffn_conv_base": "mlp_conv.base_kernel",
          "ffn_conv_proj.weight": "mlp_conv.kernel_projection.weight"}


def published_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    _, i, rest = gguf_name.split(".", 2)
    return f"layers.{i}.{_LAYER[rest]}"


def published_config(cfg: DraftConfig) -> dict:
    """config.json as a published DFlash 2 checkpoint has it (keys of z-lab's dflash2-config.json)."""
    return {
        "architectures": ["DFlash2DraftModel"], "attention_bias": False, "attention_dropout": 0.0, "is_causal": False,
        "dflash_config": {"block_size": cfg.block_size, "conv_group_size": cfg.conv_group_size,
                          "conv_kernel_size": cfg.conv_kernel_size, "mask_token_id": cfg.mask_token_id,
                          "selector_rank": cfg.selector_rank, "selector_top_k": cfg.selector_top_k,
                          "target_layer_ids": [t - 1 for t in cfg.target_layers]},
        "dtype": "bfloat16", "head_dim": cfg.head_dim, "hidden_act": "silu", "hidden_size": cfg.n_embd,
        "initializer_range": 0.02, "intermediate_size": cfg.n_ff, "layer_types": ["full_attention"] * cfg.n_layer,
        "max_position_embeddings": cfg.context_length, "model_type": "qwen3", "num_attention_heads": cfg.n_head,
        "num_hidden_layers": cfg.n_layer, "num_key_value_heads": cfg.n_head_kv,
        "num_target_layers": cfg.target_n_layer, "rms_norm_eps": cfg.rms_eps,
        "rope_parameters": {"rope_theta": cfg.rope_freq_base, "rope_type": "default"}, "sliding_window": None,
        "tie_word_embeddings": False, "use_cache": False, "use_sliding_window": False, "vocab_size": cfg.n_vocab,
    }


def published_v1_config(cfg: DraftConfig) -> dict:
    """config.json of a published plain DFlash checkpoint: class DFlashDraftModel, block_size at the
    top level, no conv or selector settings (as z-lab's Qwen3 DFlash releases have it)."""
    c = published_config(cfg)
    c["architectures"] = ["DFlashDraftModel"]
    c["block_size"] = c["dflash_config"].pop("block_size")
    for k in ("conv_group_size", "conv_kernel_size", "selector_rank", "selector_top_k"):
        del c["dflash_config"][k]
    return c


def speculators_config(cfg: DraftConfig, **top) -> dict:
    """config.json as speculators saves a dflash2 (cfg.kind "dflash2") or dflash draft; `top` overrides
    top-level keys. `aux_hidden_state_layer_ids` are llama.cpp's capture ids (z-lab ids + 1)."""
    algo = "dflash" if cfg.kind == DFLASH1 else "dflash2"
    c = {
        "architectures": ["DFlashSpeculator" if algo == "dflash" else "DFlash2DraftModel"],
        "speculators_model_type": algo, "aux_hidden_state_layer_ids": list(cfg.target_layers),
        "block_size": cfg.block_size, "draft_vocab_size": cfg.n_vocab, "mask_token_id": cfg.mask_token_id,
        "sample_from_anchor": False, "sliding_window_non_causal": False, "target_hidden_size": None,
        "speculators_config": {"algorithm": algo, "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": cfg.block_size - 1}],
                               "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "org/tiny"}},
        "transformer_layer_config": {
            "attention_bias": False, "head_dim": cfg.head_dim, "hidden_act": "silu", "hidden_size": cfg.n_embd,
            "intermediate_size": cfg.n_ff, "layer_types": ["full_attention"] * cfg.n_layer,
            "max_position_embeddings": cfg.context_length, "model_type": "qwen3", "num_attention_heads": cfg.n_head,
            "num_hidden_layers": cfg.n_layer, "num_key_value_heads": cfg.n_head_kv, "rms_norm_eps": cfg.rms_eps,
            "rope_parameters": {"rope_theta": cfg.rope_freq_base, "rope_type": "default"}, "sliding_window": None,
            "use_sliding_window": False, "vocab_size": cfg.n_vocab},
        "dtype": "bfloat16", "speculators_version": "0.5.0",
    }
    if algo == "dflash2":
        c |= {"conv_kernel_size": cfg.conv_kernel_size, "conv_group_size": cfg.conv_group_size,
              "selector_rank": cfg.selector_rank, "selector_top_k": cfg.selector_top_k}
    return c | top


def write_draft_checkpoint(folder: Path, cfg: DraftConfig, layout: str, seed: int = 0,
                           weights: dict[str, np.ndarray] | None = None) -> Path:
    """config.json + model.safetensors of a random draft (`weights`: GGUF-named, else random) in
    `layout` "z-lab" or "speculators"; a speculators one carries the verifier's embeddings and head too."""
    folder.mkdir(parents=True, exist_ok=True)
    t = random_tensors(cfg, seed=seed) if weights is None else weights
    if layout == "z-lab":
        config = published_v1_config(cfg) if cfg.kind == DFLASH1 else published_config(cfg)
        tensors = {published_name(k): v for k, v in t.items()}
    elif layout == "speculators":
        config = speculators_config(cfg)
        rng = np.random.default_rng(seed + 1)
        copies = rng.standard_normal((2, cfg.n_vocab, cfg.n_embd)).astype(np.float16)  # the verifier's, frozen
        tensors = {published_name(k): v for k, v in t.items()} | {"embed_tokens.weight": copies[0],
                                                                 "lm_head.weight": copies[1]}
    else:
        raise ValueError(f"no layout {layout!r}")
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
