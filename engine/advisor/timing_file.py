"""A throw-away GGUF for timing how fast this processor's threads work through quantized weights:
two wide llama layers of random Q4_K (the quantization of the catalog's processor models), about
130 MB, written in a moment straight as Q4_K blocks (no f16 file, no quantizer run).

Why: a small model in use (SmolLM2) spends most of a decode on per-layer overhead, and a plain
memory read (measure.memory_rate) can run well ahead of what ggml's kernels do with the bytes, so
neither alone says how fast a 2-4B model decodes here. A decode of this file does: its matrices
are as wide as those models', and its two layers leave little overhead to subtract.

Its vocabulary is synthetic (SentencePiece-style, SYNTHETIC_VOCAB pieces) so that it never depends
on the model in use; nothing reads its output. Not a test fixture (gguf_tools/random_targets).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

N_EMBD, N_FF, N_LAYER, N_HEAD = 2048, 8192, 2, 16
SYNTHETIC_VOCAB = 32000
Q4_K_BLOCK, Q4_K_BYTES = 256, 144  # weights per block, bytes per block (ggml-common.h block_q4_K)


def _q4_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q4_K blocks: any scales and quants are valid; d and dmin are set small and finite so
    the activations stay numbers (a NaN would not slow a decode, but it is not a model either)."""
    blocks = rng.integers(0, 256, size=(rows, cols // Q4_K_BLOCK, Q4_K_BYTES), dtype=np.uint8)
    halves = np.array([0.002, 0.001], dtype=np.float16).view(np.uint8)  # d, dmin
    blocks[:, :, :4] = halves
    return blocks.reshape(rows, cols // Q4_K_BLOCK * Q4_K_BYTES)


def write(path: str | os.PathLike, seed: int = 0) -> Path:
    import gguf

    q4k = gguf.GGMLQuantizationType.Q4_K
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(os.fspath(path), "llama")
    w.add_block_count(N_LAYER)
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581p{i}" for i in range(SYNTHETIC_VOCAB - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(SYNTHETIC_VOCAB - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (SYNTHETIC_VOCAB - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, _q4_k(rng, rows, cols), raw_dtype=q4k)

    matrix("token_embd.weight", SYNTHETIC_VOCAB, N_EMBD)  # tied: the output head reads it every token
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            matrix(p + t + ".weight", N_EMBD, N_EMBD)
        matrix(p + "ffn_gate.weight", N_FF, N_EMBD)
        matrix(p + "ffn_up.weight", N_FF, N_EMBD)
        matrix(p + "ffn_down.weight", N_EMBD, N_FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
