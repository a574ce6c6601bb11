"""Llama (and SmolLM, Mistral-style) checkpoints: GGUF metadata, expected tensors, transforms.

Facts this module encodes (checked against the pinned llama.cpp by the tests, which
compare its logits with a NumPy forward pass of the same HF weights):
- llama.cpp runs `llama` with "normal" RoPE, rotating adjacent pairs (2i, 2i+1) of each
  head; HF's Llama rotates (i, i + head_dim/2) (`rotate_half`). So the rows of q_proj and
  k_proj (and their biases) are reordered per head from [first halves | second halves] to
  interleaved pairs; k_proj has n_head_kv heads. Attention scores are unchanged.
- HF Linear weights are [out, in]; GGUF's ne order is the reverse, which is exactly what
  llama.cpp expects ({n_embd, n_out}), so no transpose.
- Tied embeddings: no `output.weight`; llama.cpp falls back to `token_embd`.
- rope_scaling "linear" -> rope.scaling.type/factor; "llama3" -> a `rope_freqs` tensor of
  per-frequency divisors (llama.cpp divides each rotation frequency by it).

Not here: the tokenizer (`tokenizer`), reading or encoding tensors.
"""

from __future__ import annotations

import math

import numpy as np
from gguf import MODEL_ARCH, GGUFWriter, RopeScalingType

from .hf_config import HFModel

GGUF_ARCH = MODEL_ARCH.LLAMA


def write_hparams(w: GGUFWriter, m: HFModel) -> None:
    w.add_context_length(m.n_ctx)
    w.add_embedding_length(m.n_embd)
    w.add_block_count(m.n_layer)
    w.add_feed_forward_length(m.n_ff)
    w.add_head_count(m.n_head)
    w.add_head_count_kv(m.n_head_kv)
    w.add_rope_freq_base(m.rope_theta)
    w.add_layer_norm_rms_eps(m.rms_eps)
    w.add_rope_dimension_count(m.head_dim)
    if m.arch != "llama" or m.head_dim * m.n_head != m.n_embd:
        # llama.cpp assumes n_embd / n_head unless told: say it whenever it differs (and always for qwen3).
        w.add_key_length(m.head_dim)
        w.add_value_length(m.head_dim)
    if m.rope_scaling is not None and m.rope_scaling.type == "linear":
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(m.rope_scaling.factor)


def expected_tensors(m: HFModel) -> dict[str, tuple[tuple[int, ...], bool]]:
    """GGUF name -> (NumPy shape, required) for every tensor this architecture may hold."""
    e, v, f, d = m.n_embd, m.n_vocab, m.n_ff, m.head_dim
    q, kv = m.n_head * d, m.n_head_kv * d
    out: dict[str, tuple[tuple[int, ...], bool]] = {
        "token_embd.weight": ((v, e), True),
        "output_norm.weight": ((e,), True),
    }
    if not m.tie_embeddings:
        out["output.weight"] = ((v, e), True)
    for i in range(m.n_layer):
        b = f"blk.{i}."
        out |= {
            b + "attn_norm.weight": ((e,), True),
            b + "attn_q.weight": ((q, e), True),
            b + "attn_k.weight": ((kv, e), True),
            b + "attn_v.weight": ((kv, e), True),
            b + "attn_output.weight": ((e, q), True),
            b + "ffn_norm.weight": ((e,), True),
            b + "ffn_gate.weight": ((f, e), True),
            b + "ffn_up.weight": ((f, e), True),
            b + "ffn_down.weight": ((e, f), True),
            # Optional biases (attention_bias / mlp_bias configs); llama.cpp loads them if present.
            b + "attn_q.bias": ((q,), False),
            b + "attn_k.bias": ((kv,), False),
            b + "attn_v.bias": ((kv,), False),
            b + "attn_output.bias": ((e,), False),
            b + "ffn_gate.bias": ((f,), False),
            b + "ffn_up.bias": ((f,), False),
            b + "ffn_down.bias": ((e,), False),
        }
    return out


def rotary_to_interleaved(x: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of q/k (weight [n_heads * head_dim, n_in] or bias [n_heads * head_dim]) from HF's
    half-split rotary order to adjacent pairs: new row 2i+j of a head = old row j*head_dim/2 + i."""
    half = x.shape[0] // n_heads // 2
    return x.reshape(n_heads, 2, half, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def transform(gguf_name: str, x: np.ndarray, m: HFModel) -> np.ndarray:
    if gguf_name.endswith((".attn_q.weight", ".attn_q.bias")):
        return rotary_to_interleaved(x, m.n_head)
    if gguf_name.endswith((".attn_k.weight", ".attn_k.bias")):
        return rotary_to_interleaved(x, m.n_head_kv)
    return x


def llama3_rope_divisors(m: HFModel) -> np.ndarray:
    """[head_dim / 2] float32: llama.cpp divides frequency i by entry i. Llama 3.1's scheme keeps
    high frequencies (short wavelengths), divides low ones by `factor`, and blends in between."""
    rs = m.rope_scaling
    assert rs is not None and rs.type == "llama3"
    freqs = 1.0 / m.rope_theta ** (np.arange(0, m.head_dim, 2, dtype=np.float64) / m.head_dim)
    wavelen = 2 * math.pi / freqs
    low_wavelen = rs.original_context / rs.low_freq_factor  # longer than this: divided by factor
    high_wavelen = rs.original_context / rs.high_freq_factor  # shorter than this: unchanged
    smooth = (rs.original_context / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    blended = 1.0 / ((1 - smooth) / rs.factor + smooth)
    div = np.where(wavelen < high_wavelen, 1.0, np.where(wavelen > low_wavelen, rs.factor, blended))
    return div.astype(np.float32)


def extra_tensors(m: HFModel) -> dict[str, np.ndarray]:
    """Tensors computed from config.json rather than read from the checkpoint."""
    if m.rope_scaling is not None and m.rope_scaling.type == "llama3":
        return {"rope_freqs.weight": llama3_rope_divisors(m)}
    return {}
