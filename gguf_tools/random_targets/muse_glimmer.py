"""A tiny random Muse Glimmer (`muse-glimmer`) target: the catalog's Muse Glimmer 30B, shrunk.

What it keeps of the real model: sliding-window attention on 3 of every 4 layers (rope there,
no positional encoding on the full layers), a small window (32) so that 100-token prompts
cross it, a sigmoid gate on the attention output before o_proj, QK-norm, Gemma-style
pre/post norms around attention and FFN, a dense SwiGLU FFN (no MoE in this architecture),
an untied output head with its output multiplier (`logit_scale`) and final tanh softcapping.
Its memory is llama.cpp's iSWA KV cache (a full-attention cache plus a sliding one), as
Gemma's; nothing recurrent. Not trained, not a converter.

References (llama-cpp-python 0.3.36's vendor/llama.cpp): src/models/muse-glimmer.cpp
(load_arch_hparams, load_arch_tensors, graph), src/llama-arch.cpp (key and tensor names),
src/llama-model.cpp (generic hparams, load_swa_pattern, iSWA memory), conversion/muse_glimmer.py
(what real files carry).
"""

from __future__ import annotations

from gguf import GGUFValueType

from .layout import Layout, Typed

N_EMBD = 64
N_LAYER = 4
SWA_LAYERS = (True, True, True, False)  # llama.cpp's default period (4) if the array were absent
WINDOW = 32  # tokens a sliding layer sees
N_HEAD, N_HEAD_KV, HEAD_DIM = 2, 1, 32  # one head dim for all layers in this architecture
N_FF = 128


def layout(n_vocab: int) -> Layout:
    hparams: dict[str, object] = {
        "context_length": 4096,
        "embedding_length": N_EMBD,
        "block_count": N_LAYER,
        "feed_forward_length": N_FF,
        "attention.head_count": N_HEAD,
        "attention.head_count_kv": N_HEAD_KV,
        "attention.key_length": HEAD_DIM,
        "attention.value_length": HEAD_DIM,
        "attention.layer_norm_rms_epsilon": 1e-5,  # required
        "attention.sliding_window": WINDOW,  # required
        # optional (else every 4th layer is full); the converter writes it from layer_types
        "attention.sliding_window_pattern": Typed(list(SWA_LAYERS), GGUFValueType.ARRAY, GGUFValueType.BOOL),
        "rope.freq_base": 10_000.0,  # the sliding layers' too (no rope.freq_base_swa: it defaults to this)
        "logit_scale": 1.0,  # required: the output multiplier, applied before the softcap
        "final_logit_softcapping": 30.0,  # logits here are ~N(0, 2.4^2): the cap does not flatten them
    }
    # NumPy shapes (rows, cols) = llama.cpp ne reversed.
    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    t: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (n_vocab, N_EMBD),
        "output_norm.weight": (N_EMBD,),
        "output.weight": (n_vocab, N_EMBD),  # required: no tied-embedding fallback in muse-glimmer.cpp
    }
    for i in range(N_LAYER):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (N_EMBD,)
        t[b + "attn_q.weight"] = (q_dim, N_EMBD)
        t[b + "attn_k.weight"] = (kv_dim, N_EMBD)
        t[b + "attn_v.weight"] = (kv_dim, N_EMBD)
        t[b + "attn_q_norm.weight"] = (HEAD_DIM,)  # real files: qk_scale_factor; ones here
        t[b + "attn_k_norm.weight"] = (HEAD_DIM,)
        t[b + "attn_gate.weight"] = (q_dim, N_EMBD)  # sigmoid gate on the attention output, from attn_norm
        t[b + "attn_output.weight"] = (N_EMBD, q_dim)
        t[b + "post_attention_norm.weight"] = (N_EMBD,)
        t[b + "ffn_norm.weight"] = (N_EMBD,)
        t[b + "ffn_gate.weight"] = (N_FF, N_EMBD)
        t[b + "ffn_up.weight"] = (N_FF, N_EMBD)
        t[b + "ffn_down.weight"] = (N_EMBD, N_FF)
        t[b + "post_ffw_norm.weight"] = (N_EMBD,)
    return Layout(hparams, t)


LAYOUTS = {"muse-glimmer": layout}
