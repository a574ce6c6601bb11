"""Random targets at the real shapes of the catalog's processor entries, quantized the way their
published files are: what a decode costs on a computer depends on the shapes and the quantization,
never on the weights, so these stand in for files this machine cannot download (bench/cpu_tier.py
checks the CPU tier's speed prediction against them).

    path = write_real_shape(cache / "qwen3.5-2b.gguf", "qwen3.5-2b", tokenizer_from=smollm2_gguf)

Shapes are the published configs' (Hugging Face config.json / model cards): Qwen3.5-2B and -4B
(hybrid: 3 Gated DeltaNet layers to 1 gated full-attention layer; 128-wide linear heads; 256-wide
attention heads roped on a quarter, M-RoPE sections [11, 11, 10]; tied embeddings of 248,320
rows), Qwen3-4B-Instruct-2507 (dense; 151,936 rows, tied) and Qwen3-8B (dense, 4096 wide, 36
layers; its own output matrix). The written Q4_K_M file comes within
a few per cent of the published one's size (a check that the shape is right: test_random_targets).
No MTP (nextn) layer and no vision tower: llama.cpp's text decode reads neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import write_random_target
from .qwen import Dims


@dataclass(frozen=True)
class RealShape:
    arch: str
    dims: Dims
    n_vocab: int


SHAPES = {
    "qwen3.5-2b": RealShape("qwen35", Dims(n_embd=2048, n_layer=24, n_ff=6144, n_head=8, n_head_kv=2, head_dim=256,
                                           ssm_state=128, ssm_k_heads=16, ssm_v_heads=16, n_rot_35=64,
                                           rope_sections_35=(11, 11, 10, 0)), 248320),
    "qwen3.5-4b": RealShape("qwen35", Dims(n_embd=2560, n_layer=32, n_ff=9216, n_head=16, n_head_kv=4, head_dim=256,
                                           ssm_state=128, ssm_k_heads=16, ssm_v_heads=32, n_rot_35=64,
                                           rope_sections_35=(11, 11, 10, 0)), 248320),
    "qwen3-4b": RealShape("qwen3", Dims(n_embd=2560, n_layer=36, n_ff=9728, n_head=32, n_head_kv=8, head_dim=128),
                          151936),
    "qwen3-8b": RealShape("qwen3", Dims(n_embd=4096, n_layer=36, n_ff=12288, n_head=32, n_head_kv=8, head_dim=128,
                                        tied=False), 151936),
}


# The published DFlash drafts paired with these entries (engine/models/catalog.json): five Qwen3-style
# layers at the target's widths, a block of 16, plain DFlash (a logit per slot, through the target's
# own output matrix), five taps spread over the target (for Qwen3-8B the published 1, 9, 17, 25, 33).
# Their file sizes (1.00 and 1.95 GiB of bf16) match these shapes within a few per cent.
DRAFT_LAYERS = {"qwen3.5-4b": 5, "qwen3-8b": 5}
DRAFT_BLOCK = 16


def write_real_draft(path: str | os.PathLike, name: str, target_path: str | os.PathLike, *,
                     matrix_dtype: str = "bf16", seed: int = 0):
    """A random plain DFlash draft of the entry `name`'s published draft shape for the target at
    `target_path` (a `write_real_shape` file), its matrices stored as `matrix_dtype`; returns its config."""
    from ..dflash import DFLASH1, write_random_draft

    return write_random_draft(path, target_path, seed=seed, matrix_dtype=matrix_dtype, kind=DFLASH1,
                              n_layer=DRAFT_LAYERS[name], block_size=DRAFT_BLOCK, name=f"random {name} draft")


def write_real_shape(path: str | os.PathLike, name: str, *, tokenizer_from: str | os.PathLike,
                     quant: str = "Q4_K_M", seed: int = 0) -> Path:
    """The catalog entry `name`'s shape with random weights, as `quant`, at `path`. The f16 file it
    quantizes from (about 2 bytes per weight) is written beside `path` and removed."""
    from ..quantize import quantize  # loads libllama: only when a file is written

    shape = SHAPES[name]
    path = Path(path)
    f16 = path.with_name(path.name + ".f16.partial")
    try:
        write_random_target(f16, shape.arch, tokenizer_from=tokenizer_from, seed=seed, dims=shape.dims,
                            n_vocab=shape.n_vocab, f16=True)
        quantize(f16, path, quant, force=True)
    finally:
        f16.unlink(missing_ok=True)
    return path


__all__ = ["DRAFT_BLOCK", "DRAFT_LAYERS", "SHAPES", "RealShape", "write_real_draft", "write_real_shape"]
