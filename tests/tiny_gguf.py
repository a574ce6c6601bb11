"""Tiny GGUF files for tests, written with the `gguf` package."""

import numpy as np
from gguf import GGUFWriter


def write_valid(path, n_tensors: int = 2) -> None:
    """A well-formed GGUF that claims arch llama but is no loadable model (too few tensors)."""
    w = GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.block_count", 1)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    for i in range(n_tensors):
        w.add_tensor(f"t{i}", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_arch_only(path, arch: str, hparams: dict[str, int] | None = None):
    """A well-formed GGUF whose metadata says `arch` (and `<arch>.<key>` for each of `hparams`) but
    is no loadable model: for what reads metadata only (inspect, the store's listing)."""
    w = GGUFWriter(str(path), arch)
    w.add_string("general.name", f"tiny {arch}")
    w.add_uint32(f"{arch}.block_count", 1)
    for key, value in (hparams or {}).items():
        w.add_uint32(f"{arch}.{key}", value)
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("t0", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def add_one_block(w: GGUFWriter, n_vocab: int, n_embd: int, n_ff: int, seed: int = 0, scale: float = 0.1) -> None:
    """Random weights of a 1-block llama-shaped model (qwen2 takes the same names), then write and
    close: the caller has added the architecture's hyper-parameters and the tokenizer."""
    e, f = n_embd, n_ff
    shapes = {"token_embd.weight": (n_vocab, e), "output_norm.weight": (e,), "blk.0.attn_norm.weight": (e,),
              "blk.0.attn_q.weight": (e, e), "blk.0.attn_k.weight": (e, e), "blk.0.attn_v.weight": (e, e),
              "blk.0.attn_output.weight": (e, e), "blk.0.ffn_norm.weight": (e,), "blk.0.ffn_gate.weight": (f, e),
              "blk.0.ffn_up.weight": (f, e), "blk.0.ffn_down.weight": (e, f)}
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
