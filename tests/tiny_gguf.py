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
