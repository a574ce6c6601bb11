"""Qwen3 dense checkpoints: what differs from Llama.

- llama.cpp runs `qwen3` with NEOX RoPE, which rotates (i, i + head_dim/2) exactly like
  HF's `rotate_half`: q_proj and k_proj are written as they are, NOT reordered.
- Per-head RMS norms of q and k before RoPE (`q_norm`, `k_norm`, [head_dim]) become
  `attn_q_norm` / `attn_k_norm`.
- head_dim is its own hyper-parameter (128 in the published models, whatever
  hidden_size / num_heads is), so `attention.key_length` / `value_length` are always written.
- llama.cpp's qwen3 graph has no output-projection or MLP biases: a checkpoint with them is
  refused (they are absent from `expected_tensors`), only q/k/v biases are allowed.

Metadata keys are Llama's (`llama.write_hparams`).
"""

from __future__ import annotations

import numpy as np
from gguf import MODEL_ARCH

from . import llama
from .hf_config import HFModel

GGUF_ARCH = MODEL_ARCH.QWEN3
write_hparams = llama.write_hparams


def expected_tensors(m: HFModel) -> dict[str, tuple[tuple[int, ...], bool]]:
    out = {name: spec for name, spec in llama.expected_tensors(m).items()
           if not name.endswith(("attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"))}
    for i in range(m.n_layer):
        out[f"blk.{i}.attn_q_norm.weight"] = ((m.head_dim,), True)
        out[f"blk.{i}.attn_k_norm.weight"] = ((m.head_dim,), True)
    return out


def transform(gguf_name: str, x: np.ndarray, m: HFModel) -> np.ndarray:
    return x


def extra_tensors(m: HFModel) -> dict[str, np.ndarray]:
    return {}
