"""Tiny random targets of the architectures the catalog offers, for tests and benchmarks.

Each is a few layers of small width with the real tensor names and hyper-parameters of its
architecture (recurrent state sizes, sliding window and pattern, expert counts), read from the
pinned llama.cpp's `src/models/<arch>.cpp` (its `load_hparams` and `load_tensors` are the spec),
and the vocabulary of a real model (SmolLM2's, copied from its GGUF), so that llama.cpp loads
and decodes it, grammars and chat templates work on it, and DFlash drafts written by
`gguf_tools.dflash.write_random_draft` fit it. Outputs are random text: these models prove
mechanics (rollback, invariance), never quality.

    write_random_target(path, "qwen35", tokenizer_from=smollm2_gguf, seed=0)

One module per architecture family holds its `layout` (layout.py: what a layout is); this one
writes any of them.
Not a converter (gguf_tools/convert/) and not a model zoo: nothing here is trained.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGUFWriter

from ..check import check_gguf
from .layout import Layout, Typed

TOKENIZER_PREFIX = "tokenizer."


def _layouts() -> dict[str, Callable[[int], Layout]]:
    from . import gemma4, muse_glimmer, qwen  # each module: layout(n_vocab) per architecture it holds

    return {**qwen.LAYOUTS, **gemma4.LAYOUTS, **muse_glimmer.LAYOUTS}


# Architectures the pinned llama.cpp cannot roll back (no recurrent snapshots for them), so the
# engine refuses to speculate on them: writable, but kept out of `architectures()`, whose users
# (the per-architecture invariance tests) need speculation possible on every arch they get.
REFUSED = ("qwen3next",)


def architectures(include_refused: bool = False) -> tuple[str, ...]:
    return tuple(a for a in _layouts() if include_refused or a not in REFUSED)


def write_random_target(path: str | os.PathLike, arch: str, *, tokenizer_from: str | os.PathLike,
                        seed: int = 0, chat_template: str | None = None, dims=None, n_vocab: int | None = None,
                        f16: bool = False) -> Path:
    """Write a tiny random `arch` model with the vocabulary (and, unless `chat_template` is given,
    the chat template) of the GGUF at `tokenizer_from`. `dims` (a Qwen's `qwen.Dims`) gives another
    size; `n_vocab` pads the vocabulary with unreachable tokens to a real model's row count; `f16`
    stores every matrix as f16, as a real checkpoint does before it is quantized (real.py)."""
    layouts = _layouts()
    if arch not in layouts:
        raise ValueError(f"no tiny layout for architecture {arch!r} (have: {', '.join(layouts)})")
    src = check_gguf(tokenizer_from, arrays=(TOKENIZER_PREFIX,))
    n_src = len(src.metadata["tokenizer.ggml.tokens"])
    n_vocab = n_vocab or n_src
    if n_vocab < n_src:
        raise ValueError(f"n_vocab {n_vocab} is below the {n_src} tokens of {tokenizer_from}")
    lay = layouts[arch](n_vocab) if dims is None else layouts[arch](n_vocab, dims)
    w = GGUFWriter(str(path), arch)
    w.add_string("general.name", f"tiny random {arch}")
    for key, val in lay.hparams.items():
        _add(w, f"{arch}.{key}", val)
    pads = {"tokenizer.ggml.tokens": [f"<|unused_{i}|>" for i in range(n_vocab - n_src)],
            "tokenizer.ggml.token_type": [1] * (n_vocab - n_src), "tokenizer.ggml.scores": [0.0] * (n_vocab - n_src)}
    for key, value in src.metadata.items():
        if key.startswith(TOKENIZER_PREFIX) and not (chat_template is not None and key == "tokenizer.chat_template"):
            w.add_key_value(key, list(value) + pads[key] if key in pads and n_vocab > n_src else value,
                            *src.types[key])
    if chat_template is not None:
        w.add_string("tokenizer.chat_template", chat_template)
    rng = np.random.default_rng(seed)
    for name, shape in lay.tensors.items():
        if name in lay.fill:
            a = lay.fill[name](rng, shape)
        elif name.endswith("norm.weight"):
            a = np.ones(shape)
        elif f16:  # float32 draws: a real-size model's float64 draws would not fit in memory
            a = rng.standard_normal(shape, dtype=np.float32) * np.float32(lay.scale)
        else:
            a = rng.standard_normal(shape) * lay.scale
        # llama.cpp's short convolution reads f32 only; real files keep it f32 too
        half = name == "token_embd.weight" or (f16 and len(shape) > 1 and "conv1d" not in name)
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float16 if half else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def _add(w: GGUFWriter, key: str, val) -> None:
    """Python values by their type; `Typed(value, GGUFValueType, sub_type)` where the key needs another."""
    if isinstance(val, Typed):
        w.add_key_value(key, val.value, val.type, val.sub_type)
    elif isinstance(val, bool):
        w.add_bool(key, val)
    elif isinstance(val, int):
        w.add_uint32(key, val)
    elif isinstance(val, float):
        w.add_float32(key, val)
    elif isinstance(val, (list, tuple)):
        w.add_array(key, list(val))
    else:
        w.add_string(key, str(val))


__all__ = ["REFUSED", "Layout", "Typed", "architectures", "write_random_target"]
