"""A tiny random Gemma 4 (`gemma4`) target: the layout of the catalog's Gemma 4 26B-A4B, shrunk.

What it keeps of the real model, because rollback, capture and cache code depend on it:
- sliding-window attention interleaved with full attention (3 sliding layers, then 1 full),
  with a small window (32) so that 100-token prompts cross it;
- the two KV layouts: sliding layers have narrower heads (key_length_swa) than full layers
  (key_length), their own rope width and base, and full layers share K as V (no attn_v, as
  the 26B's `attention_k_eq_v`) and use "proportional" rope through `rope_freqs`;
- the MoE FFN of the 26B on every layer: a dense "shared" GELU MLP plus routed experts, with
  the router's per-channel scale and the per-expert output scale;
- Gemma's norms around everything (pre/post attention, pre/post FFN, q/k norms, V rms-normed),
  the layer output scalar, tied embeddings and final logit softcapping.
What it drops: per-layer token embeddings (E2B/E4B only; `embedding_length_per_layer_input` 0)
and KV-shared layers (`attention.shared_kv_layers` 0, as in the 26B). Not trained, not a converter.

Real Gemma 4 files store `attention.head_count_kv` as an array per layer (sliding vs full
layers differ); here it is one scalar, so that `DraftConfig.for_target` can read it.

References (llama-cpp-python 0.3.36's vendor/llama.cpp): src/models/gemma4.cpp (load_arch_hparams,
load_arch_tensors, graph), src/llama-arch.cpp (key and tensor names), src/llama-model.cpp
(generic hparams, iSWA memory), conversion/gemma.py (Gemma4Model: what real files carry).
"""

from __future__ import annotations

import numpy as np
from gguf import GGUFValueType

from .layout import Layout, Typed

N_EMBD = 64
N_LAYER = 4
SWA_LAYERS = (True, True, True, False)  # the 26B's period: 5 sliding, 1 full; shrunk to 3 + 1
WINDOW = 32  # tokens a sliding layer sees (the 26B: 1024)
N_HEAD, N_HEAD_KV = 2, 1
HEAD_FULL, HEAD_SWA = 32, 16  # full layers' heads are wider (the 26B: 512 vs 256)
PARTIAL_ROTARY_FULL = 0.25  # full layers rotate a quarter of each head (the rest gets freq factor 1e30)
N_FF = 128  # the dense (shared-expert) MLP
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 4, 2, 32  # the 26B: 128 experts, 8 used
SOFTCAP = 30.0  # the real value; logits here are ~N(0, 2.4^2), far below it, so it flattens nothing
# Gain of the post-attention and post-FFN norms. With ones, the residual stays dominated by the
# input embedding (scaled by sqrt(n_embd)), and the tied head then predicts the input token
# again: greedy text repeats one token forever. A gain of 4 lets the layers outweigh it.
POST_NORM_GAIN = 4.0


def _rope_freqs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Proportional rope as the converter writes it: factor 1 for rotated pairs, 1e30 (no rotation) after."""
    n_rot = int(shape[0] * PARTIAL_ROTARY_FULL)  # shape[0] = head_dim / 2 rotation pairs
    return np.array([1.0] * n_rot + [1e30] * (shape[0] - n_rot))


def _ones(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.ones(shape)


def _post_norm(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, POST_NORM_GAIN)


def layout(n_vocab: int) -> Layout:
    hparams: dict[str, object] = {
        "context_length": 4096,
        "embedding_length": N_EMBD,
        "block_count": N_LAYER,
        "feed_forward_length": N_FF,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD_KV,
        "attention.key_length": HEAD_FULL,  # full layers; for_target takes the draft's head_dim from it
        "attention.value_length": HEAD_FULL,
        "attention.key_length_swa": HEAD_SWA,  # required by gemma4.cpp
        "attention.value_length_swa": HEAD_SWA,  # required, and must equal key_length_swa
        "attention.layer_norm_rms_epsilon": 1e-6,
        "attention.sliding_window": WINDOW,  # required
        # required (get_arr without default): one bool per layer, True = sliding
        "attention.sliding_window_pattern": Typed(list(SWA_LAYERS), GGUFValueType.ARRAY, GGUFValueType.BOOL),
        "attention.shared_kv_layers": 0,  # optional; 0 keeps a KV cache on every layer
        "embedding_length_per_layer_input": 0,  # required; 0 = no per-layer embeddings
        "rope.freq_base": 1_000_000.0,  # full layers
        "rope.freq_base_swa": 10_000.0,  # sliding layers (llama.cpp's default would be 10000 too)
        "rope.dimension_count": HEAD_FULL,  # proportional: all dims, rope_freqs switches most off
        "rope.dimension_count_swa": HEAD_SWA,
        "final_logit_softcapping": SOFTCAP,
        "expert_count": N_EXPERT,
        "expert_used_count": N_EXPERT_USED,
        "expert_feed_forward_length": N_FF_EXP,
    }
    # NumPy shapes (rows, cols) = llama.cpp ne reversed; experts are the outermost axis.
    t: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (n_vocab, N_EMBD),  # also the output head (no output.weight: tied)
        "output_norm.weight": (N_EMBD,),
        "rope_freqs.weight": (HEAD_FULL // 2,),  # one per model, used by the full layers
    }
    for i, swa in enumerate(SWA_LAYERS):
        hd = HEAD_SWA if swa else HEAD_FULL
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (N_EMBD,)
        t[b + "attn_q.weight"] = (N_HEAD * hd, N_EMBD)
        t[b + "attn_k.weight"] = (N_HEAD_KV * hd, N_EMBD)
        if swa:  # full layers have no attn_v: llama.cpp uses K as V (the 26B's attention_k_eq_v)
            t[b + "attn_v.weight"] = (N_HEAD_KV * hd, N_EMBD)
        t[b + "attn_output.weight"] = (N_EMBD, N_HEAD * hd)
        t[b + "attn_q_norm.weight"] = (hd,)
        t[b + "attn_k_norm.weight"] = (hd,)
        t[b + "post_attention_norm.weight"] = (N_EMBD,)
        t[b + "layer_output_scale.weight"] = (1,)
        # the dense MLP, which the MoE layers run as their shared expert
        t[b + "ffn_norm.weight"] = (N_EMBD,)
        t[b + "ffn_gate.weight"] = (N_FF, N_EMBD)
        t[b + "ffn_up.weight"] = (N_FF, N_EMBD)
        t[b + "ffn_down.weight"] = (N_EMBD, N_FF)
        t[b + "post_ffw_norm.weight"] = (N_EMBD,)
        # the routed experts; the router reads rms_norm(x) / sqrt(n_embd) * scale
        t[b + "ffn_gate_inp.weight"] = (N_EXPERT, N_EMBD)
        t[b + "ffn_gate_inp.scale"] = (N_EMBD,)
        t[b + "pre_ffw_norm_2.weight"] = (N_EMBD,)
        t[b + "post_ffw_norm_1.weight"] = (N_EMBD,)
        t[b + "post_ffw_norm_2.weight"] = (N_EMBD,)
        t[b + "ffn_gate_exps.weight"] = (N_EXPERT, N_FF_EXP, N_EMBD)
        t[b + "ffn_up_exps.weight"] = (N_EXPERT, N_FF_EXP, N_EMBD)
        t[b + "ffn_down_exps.weight"] = (N_EXPERT, N_EMBD, N_FF_EXP)
        t[b + "ffn_down_exps.scale"] = (N_EXPERT,)  # the router's per-expert scale, as converted
    fill = {"rope_freqs.weight": _rope_freqs}
    for i in range(N_LAYER):
        fill[f"blk.{i}.layer_output_scale.weight"] = _ones
        fill[f"blk.{i}.ffn_down_exps.scale"] = _ones
        fill[f"blk.{i}.post_attention_norm.weight"] = _post_norm
        fill[f"blk.{i}.post_ffw_norm.weight"] = _post_norm
        # the router's input is scaled by 1/sqrt(n_embd): a gain of sqrt(n_embd) brings its
        # logits back to N(0, scale^2 * n_embd) so that experts are picked per token, not uniformly
        fill[f"blk.{i}.ffn_gate_inp.scale"] = lambda rng, shape: np.full(shape, np.sqrt(N_EMBD))
    return Layout(hparams, t, fill)


LAYOUTS = {"gemma4": layout}
