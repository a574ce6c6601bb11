"""The target's tensors a draft borrows, read from its GGUF: token embedding, output matrix
and final norm, dequantized to float32 with the `gguf` package.

What it is not: a model loader (llama.cpp runs the target; these arrays only feed the
PyTorch draft). The draft must see the same numbers llama.cpp uses: Q8_0 / Q4_x blocks
dequantize exactly, so `emb[t]` equals llama.cpp's `get_rows` of the embedding.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


@dataclass(frozen=True)
class TargetTensors:
    emb: np.ndarray  # [V, E] token embedding
    head: np.ndarray  # [V, E] output matrix (the embedding itself when tied)
    output_norm: np.ndarray  # [E]


def _array(t) -> np.ndarray:
    a = dequantize(t.data, t.tensor_type)
    return np.asarray(a, np.float32).reshape([int(n) for n in reversed(t.shape)])


def read_target_tensors(path: str | os.PathLike) -> TargetTensors:
    """The arrays of the target GGUF at `path` (cached: a trainer and its evaluations share them)."""
    st = os.stat(path)
    return _read(os.path.abspath(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _read(path: str, size: int, mtime_ns: int) -> TargetTensors:
    r = GGUFReader(path)
    by_name = {t.name: t for t in r.tensors}
    missing = [n for n in ("token_embd.weight", "output_norm.weight") if n not in by_name]
    if missing:
        raise ValueError(f"{path} has no {', '.join(missing)}: not a decoder model a draft can borrow from")
    emb = _array(by_name["token_embd.weight"])
    head = _array(by_name["output.weight"]) if "output.weight" in by_name else emb
    return TargetTensors(emb, head, _array(by_name["output_norm.weight"]))
