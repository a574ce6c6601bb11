"""What one architecture's tiny random model is: its keys and tensors (`Layout`), and a key's value
with its GGUF type (`Typed`). The architecture modules (qwen.py, gemma4.py, muse_glimmer.py) build
them; the package's `write_random_target` writes any of them. Apart from both, so that neither
imports the other back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from gguf import GGUFValueType


@dataclass(frozen=True)
class Typed:
    """A key's value with its GGUF type given (e.g. an array of bools, or of int32)."""

    value: object
    type: GGUFValueType
    sub_type: GGUFValueType | None = None


@dataclass
class Layout:
    """One architecture's tiny model: its keys (without the `<arch>.` prefix) and its tensors."""

    hparams: dict[str, object]  # e.g. {"block_count": 4, "attention.sliding_window": 32}
    tensors: dict[str, tuple[int, ...]]  # GGUF name -> shape in NumPy order (rows, cols): ne reversed
    fill: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = field(default_factory=dict)
    scale: float = 0.3  # std of random weights: big enough that greedy output is not one token


__all__ = ["Layout", "Typed"]
