"""Tiny random Qwen targets: `qwen3` (dense), `qwen35` (hybrid), `qwen35moe` (hybrid, MoE) and
`qwen3next` (hybrid, MoE; the pinned llama.cpp keeps no rollback snapshots for it).

Layouts for `write_random_target` (this package's __init__): the keys and tensor shapes the
pinned llama.cpp's loaders ask for, at toy size unless `Dims` gives a real one (the dense pair
only: real.py writes catalog entries' shapes for speed measurements). 4 layers of width 64 with 4 query heads of 16
and 2 KV heads; the Qwen3.5 pair has Gated DeltaNet (linear attention) layers 0-2 and one full
attention layer (3), as their `full_attention_interval` of 4 makes it, so both layer kinds and
the hybrid memory (recurrent state + KV cache) are exercised. Weights are random: these prove
mechanics, never quality. Not a converter and no MTP (nextn) layers. qwen3next has the same
layer plan as qwen35moe but fuses beta/alpha into one `ssm_ba` projection and uses plain NeoX rope;
llama.cpp's `llm_arch_supports_rs_rollback` leaves it out, so `n_rs_seq` is clamped to 0 there and
the engine must refuse to speculate on it (package __init__: REFUSED).

Shapes are NumPy order (rows, cols), i.e. llama.cpp's `ne` reversed: a matmul weight that maps
n_in -> n_out is (n_out, n_in). The output head is tied to `token_embd` (llama.cpp duplicates
it when `output.weight` is absent), which keeps the file near the 6 MB of the f16 embedding.

References (vendor/llama.cpp of llama-cpp-python 0.3.36):
  src/models/qwen3.cpp, qwen35.cpp, qwen35moe.cpp, qwen3next.cpp - load_arch_hparams / load_arch_tensors, graphs
  src/llama-model.cpp   - generic keys (head counts, key_length, rope), hybrid memory layer filters
  src/llama-hparams.cpp - recurrent state sizes (n_embd_r / n_embd_s)
  src/llama-arch.cpp    - key and tensor name strings, llm_arch_supports_rs_rollback
  conversion/qwen.py    - how real files store ssm_a (-exp(A_log)), ssm_dt.bias, mrope sections
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layout import Layout

CTX = 4096
EPS = 1e-6


@dataclass(frozen=True)
class Dims:
    """A Qwen's widths. The defaults are the tiny test size: 4 layers of width 64, 4 query heads of
    16 and 2 KV heads (n_head * head_dim == n_embd, as the DFlash draft assumes). Real shapes
    (gguf_tools/random_targets/real.py) give a catalog entry's own."""

    n_embd: int = 64
    n_layer: int = 4
    n_ff: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    # Gated DeltaNet. llama.cpp sizes k and v heads both by ssm.state_size, so inner_size (d_inner)
    # must be state_size * time_step_rank (the graph divides it back by the v heads).
    ssm_conv: int = 4
    ssm_state: int = 16
    ssm_k_heads: int = 2  # group_count
    ssm_v_heads: int = 4  # time_step_rank
    # qwen35 uses interleaved M-RoPE on a partial rotary width; the sections (t, h, w, extra) sum to
    # n_rot / 2, like the real [11, 11, 10, 0] for n_rot 64. For text all position axes are equal.
    n_rot_35: int = 8
    rope_sections_35: tuple[int, int, int, int] = (2, 1, 1, 0)
    tied: bool = True  # the output matrix is the token embeddings (Qwen3-8B has its own: a second vocab matmul's bytes)

    @property
    def ssm_inner(self) -> int:  # value_dim
        return self.ssm_state * self.ssm_v_heads

    @property
    def ssm_key(self) -> int:  # key_dim
        return self.ssm_state * self.ssm_k_heads

    @property
    def ssm_conv_dim(self) -> int:  # q, k, v channels through the short conv
        return 2 * self.ssm_key + self.ssm_inner


TINY = Dims()
FULL_ATTN_INTERVAL = 4  # layer i is full attention iff (i + 1) % 4 == 0: at tiny size only layer 3

N_EXPERT, N_EXPERT_USED, N_FF_EXP, N_FF_SHEXP = 4, 2, 32, 64


def _common(d: Dims, arch_rope_base: float) -> dict[str, object]:
    """The keys every Qwen here has (and that DraftConfig.for_target reads)."""
    return {
        "context_length": CTX, "embedding_length": d.n_embd, "block_count": d.n_layer,
        "feed_forward_length": d.n_ff, "attention.head_count": d.n_head, "attention.head_count_kv": d.n_head_kv,
        "attention.key_length": d.head_dim, "attention.value_length": d.head_dim,
        "attention.layer_norm_rms_epsilon": EPS, "rope.freq_base": arch_rope_base,
    }


def _embeddings(d: Dims, n_vocab: int) -> dict[str, tuple[int, ...]]:
    own = {} if d.tied else {"output.weight": (n_vocab, d.n_embd)}
    return {"token_embd.weight": (n_vocab, d.n_embd), "output_norm.weight": (d.n_embd,)} | own


def _attention(d: Dims, p: str, q_out: int) -> dict[str, tuple[int, ...]]:
    """Full attention with per-head RMS norms on q and k. `q_out` is n_head * head_dim, doubled in
    qwen35 where each head's query is followed by its output gate in the same projection."""
    return {
        f"{p}.attn_q.weight": (q_out, d.n_embd),
        f"{p}.attn_k.weight": (d.n_head_kv * d.head_dim, d.n_embd),
        f"{p}.attn_v.weight": (d.n_head_kv * d.head_dim, d.n_embd),
        f"{p}.attn_output.weight": (d.n_embd, d.n_head * d.head_dim),
        f"{p}.attn_q_norm.weight": (d.head_dim,),
        f"{p}.attn_k_norm.weight": (d.head_dim,),
    }


def _dense_ffn(d: Dims, p: str) -> dict[str, tuple[int, ...]]:
    return {f"{p}.ffn_gate.weight": (d.n_ff, d.n_embd), f"{p}.ffn_up.weight": (d.n_ff, d.n_embd),
            f"{p}.ffn_down.weight": (d.n_embd, d.n_ff)}


def _moe_ffn(d: Dims, p: str) -> dict[str, tuple[int, ...]]:
    """Softmax-routed experts (stacked: expert first) plus one shared expert whose output is scaled
    by sigmoid(ffn_gate_inp_shexp . x): that gate is a single row, (n_embd,)."""
    return {
        f"{p}.ffn_gate_inp.weight": (N_EXPERT, d.n_embd),
        f"{p}.ffn_gate_exps.weight": (N_EXPERT, N_FF_EXP, d.n_embd),
        f"{p}.ffn_up_exps.weight": (N_EXPERT, N_FF_EXP, d.n_embd),
        f"{p}.ffn_down_exps.weight": (N_EXPERT, d.n_embd, N_FF_EXP),
        f"{p}.ffn_gate_inp_shexp.weight": (d.n_embd,),
        f"{p}.ffn_gate_shexp.weight": (N_FF_SHEXP, d.n_embd),
        f"{p}.ffn_up_shexp.weight": (N_FF_SHEXP, d.n_embd),
        f"{p}.ffn_down_shexp.weight": (d.n_embd, N_FF_SHEXP),
    }


def _delta_net(d: Dims, p: str) -> dict[str, tuple[int, ...]]:
    """A Gated DeltaNet layer. llama.cpp marks attn_qkv / attn_gate optional but its graph
    multiplies by both unconditionally, so both are written."""
    return {
        f"{p}.attn_qkv.weight": (d.ssm_conv_dim, d.n_embd),  # x -> [q | k | v]
        f"{p}.attn_gate.weight": (d.ssm_inner, d.n_embd),  # x -> z, the output gate of the gated norm
        f"{p}.ssm_conv1d.weight": (d.ssm_conv_dim, d.ssm_conv),  # depthwise causal conv, one row per channel
        f"{p}.ssm_dt.bias": (d.ssm_v_heads,),  # added to alpha before softplus
        f"{p}.ssm_a": (d.ssm_v_heads,),  # -exp(A_log): no ".weight" suffix in llama.cpp's name
        f"{p}.ssm_beta.weight": (d.ssm_v_heads, d.n_embd),  # x -> write strength (sigmoid)
        f"{p}.ssm_alpha.weight": (d.ssm_v_heads, d.n_embd),  # x -> decay input
        f"{p}.ssm_norm.weight": (d.ssm_state,),  # per-head RMS norm of the output (weights of ones)
        f"{p}.ssm_out.weight": (d.n_embd, d.ssm_inner),
    }


def _ssm_a(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # HF initialises A_log = log(U(1, 16)); files store -exp(A_log), so the decay exp(g) stays in (0, 1).
    return -rng.uniform(1.0, 16.0, shape)


def _ssm_dt_bias(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # HF's init: dt ~ logU(1e-3, 1e-1), bias = softplus^-1(dt), so softplus(bias) = dt at alpha = 0.
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), shape))
    return dt + np.log(-np.expm1(-dt))


def _is_recurrent(il: int) -> bool:
    return (il + 1) % FULL_ATTN_INTERVAL != 0


def qwen3(n_vocab: int, d: Dims = TINY) -> Layout:
    """Qwen3 dense: pre-norm attention with q/k norms (full rotary on head_dim), SwiGLU FFN."""
    tensors = _embeddings(d, n_vocab)
    for il in range(d.n_layer):
        p = f"blk.{il}"
        tensors |= {f"{p}.attn_norm.weight": (d.n_embd,)} | _attention(d, p, d.n_head * d.head_dim)
        tensors |= {f"{p}.ffn_norm.weight": (d.n_embd,)} | _dense_ffn(d, p)
    return Layout(hparams=_common(d, 1e6), tensors=tensors)


def _qwen35_family(n_vocab: int, moe: bool, d: Dims) -> Layout:
    hparams = _common(d, 1e7) | {
        "rope.dimension_count": d.n_rot_35,
        "rope.dimension_sections": list(d.rope_sections_35),  # required by the loader (int32 array of 4)
        "ssm.conv_kernel": d.ssm_conv, "ssm.state_size": d.ssm_state, "ssm.group_count": d.ssm_k_heads,
        "ssm.time_step_rank": d.ssm_v_heads, "ssm.inner_size": d.ssm_inner,
        "full_attention_interval": FULL_ATTN_INTERVAL,
    }
    if moe:
        hparams |= {"expert_count": N_EXPERT, "expert_used_count": N_EXPERT_USED,
                    "expert_feed_forward_length": N_FF_EXP, "expert_shared_feed_forward_length": N_FF_SHEXP}
    tensors, fill = _embeddings(d, n_vocab), {}
    for il in range(d.n_layer):
        p = f"blk.{il}"
        # the block: x + mixer(attn_norm(x)), then h + ffn(post_attention_norm(h)); no ffn_norm
        tensors |= {f"{p}.attn_norm.weight": (d.n_embd,), f"{p}.post_attention_norm.weight": (d.n_embd,)}
        if _is_recurrent(il):
            tensors |= _delta_net(d, p)
            fill |= {f"{p}.ssm_a": _ssm_a, f"{p}.ssm_dt.bias": _ssm_dt_bias}
        else:
            tensors |= _attention(d, p, 2 * d.n_head * d.head_dim)  # query and gate per head
        tensors |= _moe_ffn(d, p) if moe else _dense_ffn(d, p)
    return Layout(hparams=hparams, tensors=tensors, fill=fill)


def qwen35(n_vocab: int, d: Dims = TINY) -> Layout:
    """Qwen3.5 dense: 3 Gated DeltaNet layers + 1 gated full-attention layer, SwiGLU FFN."""
    return _qwen35_family(n_vocab, False, d)


def qwen35moe(n_vocab: int, d: Dims = TINY) -> Layout:
    """Qwen3.5 MoE: as qwen35, with 4 routed experts (2 used) and a gated shared expert per layer."""
    return _qwen35_family(n_vocab, True, d)


def qwen3next(n_vocab: int, d: Dims = TINY) -> Layout:
    """Qwen3-Next: qwen35moe's plan (3 Gated DeltaNet layers + 1 gated full-attention layer, routed
    experts + gated shared expert in every layer; the loader refuses zero experts). Its DeltaNet
    reads beta and alpha from one fused `ssm_ba` projection, grouped per key head as [beta | alpha]
    (n_v / n_k rows each), and its attention uses NeoX rope on a quarter of each head."""
    hparams = _common(d, 1e7) | {
        "rope.dimension_count": d.head_dim // 4,
        "ssm.conv_kernel": d.ssm_conv, "ssm.state_size": d.ssm_state, "ssm.group_count": d.ssm_k_heads,
        "ssm.time_step_rank": d.ssm_v_heads, "ssm.inner_size": d.ssm_inner,
        "full_attention_interval": FULL_ATTN_INTERVAL,
        "expert_count": N_EXPERT, "expert_used_count": N_EXPERT_USED,
        "expert_feed_forward_length": N_FF_EXP, "expert_shared_feed_forward_length": N_FF_SHEXP,
    }
    tensors, fill = _embeddings(d, n_vocab), {}
    for il in range(d.n_layer):
        p = f"blk.{il}"
        tensors |= {f"{p}.attn_norm.weight": (d.n_embd,), f"{p}.post_attention_norm.weight": (d.n_embd,)}
        if _is_recurrent(il):
            fused = (f"{p}.ssm_beta.weight", f"{p}.ssm_alpha.weight")
            net = {k: v for k, v in _delta_net(d, p).items() if k not in fused}
            tensors |= net | {f"{p}.ssm_ba.weight": (2 * d.ssm_v_heads, d.n_embd)}
            fill |= {f"{p}.ssm_a": _ssm_a, f"{p}.ssm_dt.bias": _ssm_dt_bias}
        else:
            tensors |= _attention(d, p, 2 * d.n_head * d.head_dim)  # query and gate per head, as in qwen35
        tensors |= _moe_ffn(d, p)
    return Layout(hparams=hparams, tensors=tensors, fill=fill)


LAYOUTS = {"qwen3": qwen3, "qwen35": qwen35, "qwen35moe": qwen35moe, "qwen3next": qwen3next}
