"""Initial tensors of a draft other than random: copied from the target's own layers, or read
from an existing DFlash 2 draft GGUF to continue training it.

What it is: `target_warm_start` (docs/training.md): draft layer i <- target
layer t0 + i, where t0 is the deepest tap (SmolLM2: taps ..., 28, so layers 28, 29), its
attention, MLP and both norms; q/k norms 1 (the target has none); `fc` selects the deepest
tap's raw features (so g = that layer's normed input, and draft layer 0's context K/V start
out as what target layer t0 computes there) and `enc.output_norm` <- layer t0's attn_norm.
`load_warm_start` reads a draft GGUF back as float32 GGUF-named arrays and its config, for
`init_from`. What it is not: the trainer's choice of which to use (train.py), or a model
loader: the tensors are numbers for `DFlashDraft.load_numpy`.

RoPE layout: llama.cpp's converter permutes a llama target's q/k rows per head so that its
"normal" RoPE (pairs 2i, 2i+1) computes what Hugging Face's rotate-half does; the draft
runs NEOX RoPE (pairs i, i + d/2), so the copy undoes that permutation (`unpermute_rope`).
Architectures llama.cpp ropes NEOX-style in the target (qwen*) need no unpermute.
"""

from __future__ import annotations

import os
from dataclasses import fields, replace

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from gguf_tools.dflash import DraftConfig, read_draft

LAYER_TENSORS = ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                 "ffn_up.weight", "ffn_down.weight", "attn_norm.weight", "ffn_norm.weight")
NORMAL_ROPE_ARCHS = ("llama",)  # llama.cpp ropes these in "normal" (interleaved) order, with permuted q/k


def _arrays(path: str | os.PathLike, names=None) -> tuple[dict[str, np.ndarray], GGUFReader]:
    r = GGUFReader(os.fspath(path))
    out = {}
    for t in r.tensors:
        if names is not None and t.name not in names:
            continue
        if t.tensor_type.name == "I64":
            out[t.name] = np.asarray(t.data, np.int64).reshape(-1).copy()
        else:
            a = dequantize(t.data, t.tensor_type)
            out[t.name] = np.asarray(a, np.float32).reshape([int(n) for n in reversed(t.shape)]).copy()
    return out, r


def unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a q/k weight [n_head * d, E] from llama.cpp's interleaved layout back to the
    rotate-half layout (row 2i + s of a head -> row s * d/2 + i)."""
    rows, e = w.shape
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, e).swapaxes(1, 2).reshape(rows, e)


def target_warm_start(target_path: str | os.PathLike, cfg: DraftConfig,
                      feat_scale: np.ndarray) -> dict[str, np.ndarray]:
    """GGUF-named arrays for the draft layers, fc and enc.output_norm (see the module doc).
    Draft layers past the target's last layer are left out (they keep their random init)."""
    r = GGUFReader(os.fspath(target_path))
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    n_layer = int(r.fields[f"{arch}.block_count"].parts[-1][0])
    taps = list(cfg.target_layers)
    t0 = max(taps)
    layers = [t0 + i for i in range(cfg.n_layer) if t0 + i < n_layer]
    names = {f"blk.{t}.{n}" for t in layers for n in LAYER_TENSORS}
    src, _ = _arrays(target_path, names)
    missing = sorted(names - set(src))
    if missing:
        raise ValueError(f"{target_path} lacks {', '.join(missing[:4])}: no warm start from its layers")
    out: dict[str, np.ndarray] = {}
    for i, t in enumerate(layers):
        for n in LAYER_TENSORS:
            a = src[f"blk.{t}.{n}"]
            if arch in NORMAL_ROPE_ARCHS and n in ("attn_q.weight", "attn_k.weight"):
                a = unpermute_rope(a, cfg.n_head if n == "attn_q.weight" else cfg.n_head_kv)
            out[f"blk.{i}.{n}"] = a
        out[f"blk.{i}.attn_q_norm.weight"] = np.ones(cfg.head_dim, np.float32)
        out[f"blk.{i}.attn_k_norm.weight"] = np.ones(cfg.head_dim, np.float32)
    e = cfg.n_embd
    j = taps.index(t0)
    fc = np.zeros((e, len(taps) * e), np.float32)
    # the model multiplies features by feat_scale before fc: undo it, so fc sees the raw tap
    fc[:, j * e:(j + 1) * e] = np.diag(1.0 / np.asarray(feat_scale, np.float32)[j * e:(j + 1) * e])
    out["fc.weight"] = fc
    out["enc.output_norm.weight"] = src[f"blk.{t0}.attn_norm.weight"].copy()
    return out


def load_warm_start(path: str | os.PathLike,
                    target_n_layer: int | None = None) -> tuple[DraftConfig, dict[str, np.ndarray]]:
    """(config, GGUF-named arrays: float32, d2t int64) of the DFlash 2 draft GGUF at `path`."""
    df = read_draft(path)
    cfg = DraftConfig(**{f.name: getattr(df, f.name) for f in fields(DraftConfig)})
    if target_n_layer is not None:
        cfg = replace(cfg, target_n_layer=target_n_layer)
    tensors, _ = _arrays(path)
    return cfg, tensors
