"""Write a DFlash draft GGUF (architecture `dflash`, DFlash 2 or plain DFlash v1) for a target GGUF.

A draft is described by two things: `DraftConfig` (format.py) and a dict of named NumPy
tensors (`tensor_shapes`). `write_dflash_draft` turns both into a GGUF that the pinned
llama.cpp loads as a draft of `cfg.kind`; `random_tensors` makes a seeded random
(identity-conv) set for tests, and a trainer exports real weights through the same
writer. A "dflash1" config writes a plain DFlash draft: no conv or selector keys or
tensors, which is how llama.cpp tells it from DFlash 2. The target's tokenizer metadata
(`tokenizer.ggml.*`) is copied verbatim, with its types, from `check_gguf`; no
`token_embd`/`output` is written: the draft borrows the target's through `ctx_other`
(unless a reduced vocabulary ships its own `output.weight` with a `d2t` map).

Not the format (key names, config, validation: format.py; reading a draft back: read.py), not a
converter from Hugging Face checkpoints (convert.py) and not a check of a draft against a
loaded target (`format.fits`, used by the engine's dflash_fit.py).

How llama.cpp applies the optional settings (`src/models/dflash.cpp`; the PyTorch draft
in draft_training/model.py mirrors it): `embedding_scale` multiplies the block's token
embeddings (not the injected rows); `attention.scale` replaces 1/sqrt(head_dim) as the QK
scale; `attention.value_scale` multiplies the attention output after attn_output, before
the side-1 conv; `hidden_activation` "gelu"/"gelu_pytorch_tanh" swaps SiLU for
tanh-approximated GELU in the gated MLP; `logit_scale` multiplies the logits, then
`final_logit_softcapping` c maps them to c * tanh(x / c), both before the top-K and the
unary scores (DFlash 2 only); a `attention.sliding_window` W > 0 needs
`attention.sliding_window_pattern` (one bool per layer) and hides from a query at
position p every key at position <= p - W on the sliding layers (keys later than p, i.e.
in its block, stay visible). A draft that uses none of them writes none of their keys, so
it is byte-identical to one written before they existed.
"""

from __future__ import annotations

import os

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter, quants

from ..check import check_gguf
from .format import (ARCH, CAUSAL_KEY, FLOAT_KEYS, HIDDEN_ACT_KEY, MASK_KEY, OPTIONAL_FLOAT_KEYS, SLIDING_PATTERN_KEY,
                     SLIDING_WINDOW_KEY, TARGET_LAYERS_KEY, TOKENIZER_PREFIX, TOKENS_KEY, DraftConfig, tensor_shapes,
                     uint_keys)


def random_tensors(cfg: DraftConfig, seed: int = 0, *, std: float = 0.02, conv_std: float = 0.01,
                   keep_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A seeded random draft: small normal weights, unit norms, identity convolutions.

    The conv base is the identity filter (tap 0 = 1) so a fresh draft behaves like a
    plain DFlash block; `conv_std` adds small dynamic coefficients on top. `keep_ids`
    (sorted unique target ids) makes a reduced-vocabulary head with random rows.
    """
    rng = np.random.default_rng(seed)
    shapes = tensor_shapes(cfg, None if keep_ids is None else len(keep_ids))
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if name == "d2t":
            out[name] = np.asarray(keep_ids, dtype=np.int64)
        elif name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("conv_base"):
            base = np.zeros(shape, np.float32)  # [2, kernel, n_embd]
            base[:, 0, :] = 1.0
            out[name] = base
        elif name.endswith("conv_proj.weight"):
            out[name] = (rng.standard_normal(shape) * conv_std).astype(np.float32)
        elif name == "fc.weight":  # features are RMS-normalised after fc, so only direction matters
            out[name] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        elif name.startswith("selector_") and name != "selector_hidden.weight":
            out[name] = (rng.standard_normal(shape) / np.sqrt(cfg.selector_rank)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return out


def _check_tensors(cfg: DraftConfig, tensors: dict[str, np.ndarray]) -> None:
    n_keep = len(tensors["d2t"]) if "d2t" in tensors else None
    want = tensor_shapes(cfg, n_keep)
    extra = sorted(set(tensors) - set(want))
    missing = sorted(set(want) - set(tensors))
    if extra or missing:
        raise ValueError(f"draft tensors do not match the config: missing {missing}, unexpected {extra}")
    for name, shape in want.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tuple(tensors[name].shape)}, expected {shape}")
    if n_keep is not None:
        d2t = np.asarray(tensors["d2t"])
        if d2t.dtype != np.int64 or np.any(np.diff(d2t) <= 0) or d2t[0] < 0 or d2t[-1] >= cfg.n_vocab:
            raise ValueError("d2t must be int64, sorted, unique absolute target ids within the vocabulary")


def _write_options(w: GGUFWriter, cfg: DraftConfig) -> None:
    """The optional keys, only those that differ from llama.cpp's defaults (see the module doc)."""
    if cfg.sliding_window > 0:
        w.add_uint32(SLIDING_WINDOW_KEY, int(cfg.sliding_window))
        # llama.cpp requires the pattern whenever the window is set; it reads bools as 0/1 per layer
        w.add_key_value(SLIDING_PATTERN_KEY, list(cfg.sliding_layers()), GGUFValueType.ARRAY, GGUFValueType.BOOL)
    for field, key in OPTIONAL_FLOAT_KEYS:
        if getattr(cfg, field) is not None:
            w.add_float32(key, float(getattr(cfg, field)))
    if cfg.hidden_act != "silu":
        w.add_string(HIDDEN_ACT_KEY, cfg.hidden_act)


# How the 2-D weights are stored (norms, conv bases and d2t stay as they are). On a processor llama.cpp
# converts the activations a matmul reads to the weight's own type first: with f16 weights a hidden
# state beyond 65,504 (the fused target features of a large model) becomes infinite, which is the
# reported collapse of DFlash drafts run in fp16. bf16 keeps f32's range; q8_0 scales each 32 values.
MATRIX_DTYPES = ("f32", "f16", "bf16", "q8_0")
_GGML = {"bf16": GGMLQuantizationType.BF16, "q8_0": GGMLQuantizationType.Q8_0}


def _stored(t: np.ndarray, matrix_dtype: str) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    """A tensor as written: its array and, for a packed type, the GGML type the bytes hold."""
    if t.dtype == np.int64 or t.ndim != 2 or matrix_dtype == "f32":
        return t.astype(np.float32) if t.dtype != np.int64 else t, None
    if matrix_dtype == "f16":
        return t.astype(np.float16), None
    if matrix_dtype == "q8_0" and t.shape[1] % 32:  # q8_0 packs rows in blocks of 32
        return t.astype(np.float32), None
    kind = _GGML[matrix_dtype]
    return quants.quantize(t.astype(np.float32), kind), kind


def write_dflash_draft(path: str | os.PathLike, cfg: DraftConfig, tensors: dict[str, np.ndarray],
                       target_path: str | os.PathLike, *, matrix_dtype: str = "f32") -> None:
    """Write `tensors` (see `tensor_shapes`) as a draft of `cfg.kind` for the target GGUF.

    `matrix_dtype` (MATRIX_DTYPES) stores the 2-D weights: "f16" and "bf16" halve the file, "q8_0"
    about quarters it (a row not a multiple of 32 wide stays f32). Raises ValueError on any
    inconsistency, before writing.
    """
    if matrix_dtype not in MATRIX_DTYPES:
        raise ValueError(f"matrix_dtype {matrix_dtype!r} is not one of {', '.join(MATRIX_DTYPES)}")
    cfg.validate()
    _check_tensors(cfg, tensors)
    target = check_gguf(target_path, arrays=(TOKENIZER_PREFIX,))
    n_vocab = len(target.metadata.get(TOKENS_KEY) or [])
    if n_vocab != cfg.n_vocab:
        raise ValueError(f"config n_vocab {cfg.n_vocab} != target vocabulary {n_vocab}")
    w = GGUFWriter(os.fspath(path), ARCH)
    w.add_string("general.name", cfg.name)
    w.add_string("general.type", "model")
    for field, key in uint_keys(cfg.kind):
        w.add_uint32(key, int(getattr(cfg, field)))
    for field, key in FLOAT_KEYS:
        w.add_float32(key, float(getattr(cfg, field)))
    w.add_bool(CAUSAL_KEY, bool(cfg.causal))
    _write_options(w, cfg)
    # llama.cpp reads target_layers as an int32 array
    w.add_key_value(TARGET_LAYERS_KEY, [int(t) for t in cfg.target_layers], GGUFValueType.ARRAY, GGUFValueType.INT32)
    for key, value in target.metadata.items():
        if key.startswith(TOKENIZER_PREFIX) and key != MASK_KEY:
            w.add_key_value(key, value, *target.types[key])
    w.add_uint32(MASK_KEY, int(cfg.mask_token_id))
    for name in sorted(tensors):
        t, packed = _stored(np.ascontiguousarray(tensors[name]), matrix_dtype)
        w.add_tensor(name, t, raw_dtype=packed)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_random_draft(path: str | os.PathLike, target_path: str | os.PathLike, *, seed: int = 0,
                       keep_ids: np.ndarray | None = None, matrix_dtype: str = "f32",
                       **overrides) -> DraftConfig:
    """A seeded random draft for the target (tests, smoke runs; `kind="dflash1"` for a plain DFlash
    one); returns its config."""
    cfg = DraftConfig.for_target(target_path, **overrides)
    write_dflash_draft(path, cfg, random_tensors(cfg, seed, keep_ids=keep_ids), target_path,
                       matrix_dtype=matrix_dtype)
    return cfg


__all__ = ["MATRIX_DTYPES", "random_tensors", "write_dflash_draft", "write_random_draft"]
