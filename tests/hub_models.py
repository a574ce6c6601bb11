"""Tiny models for the Hub stand-in (tests/hub_standin.py): a loadable target and its DFlash drafts.

The target is a 2-layer random llama with SmolLM2's tokenizer and chat template (n_embd 64,
about 13 MB), so llama.cpp loads it, the store checks a draft against it and the engine
speculates on it; its drafts are seeded random DFlash 2 (K = 4, small enough for n_embd 64)
and DFlash v1 files written by gguf_tools for exactly this target. `catalog_entry` writes the
user catalog entry that points flashdesk at them on the stand-in.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from gguf_tools import check_gguf
from gguf_tools.dflash import write_random_draft

N_EMBD, N_FF, N_HEAD, N_LAYER = 64, 128, 4, 2


def write_target(path: Path, model_path: str, seed: int = 0, embd_dtype=np.float16,
                 chat_template: str | None = None) -> Path:
    """A loadable random llama target with SmolLM2's tokenizer (`model_path`: the SmolLM2 GGUF).
    `embd_dtype=np.float32` makes it 12.6 MB+, more than one of huggingface_hub's 10 MiB write pieces.
    `chat_template` replaces SmolLM2's template: another family's, to render it through a real engine."""
    src = check_gguf(model_path, arrays=("tokenizer.",))
    n_vocab = len(src.metadata["tokenizer.ggml.tokens"])
    w = GGUFWriter(str(path), "llama")
    w.add_string("general.name", "tiny hub target")
    for key, val in [("block_count", N_LAYER), ("context_length", 1024), ("embedding_length", N_EMBD),
                     ("feed_forward_length", N_FF), ("attention.head_count", N_HEAD),
                     ("attention.head_count_kv", N_HEAD), ("rope.dimension_count", N_EMBD // N_HEAD)]:
        w.add_uint32(f"llama.{key}", val)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    for key, value in src.metadata.items():
        if key.startswith("tokenizer.") and not (chat_template is not None and key == "tokenizer.chat_template"):
            w.add_key_value(key, value, *src.types[key])
    if chat_template is not None:
        w.add_string("tokenizer.chat_template", chat_template)
    rng = np.random.default_rng(seed)
    e, f = N_EMBD, N_FF
    shapes = {"token_embd.weight": (n_vocab, e), "output_norm.weight": (e,)}
    for i in range(N_LAYER):
        shapes |= {f"blk.{i}.attn_norm.weight": (e,), f"blk.{i}.attn_q.weight": (e, e),
                   f"blk.{i}.attn_k.weight": (e, e), f"blk.{i}.attn_v.weight": (e, e),
                   f"blk.{i}.attn_output.weight": (e, e), f"blk.{i}.ffn_norm.weight": (e,),
                   f"blk.{i}.ffn_gate.weight": (f, e), f"blk.{i}.ffn_up.weight": (f, e),
                   f"blk.{i}.ffn_down.weight": (e, f)}
    for name, shape in shapes.items():
        scale = 1.0 if name.endswith("norm.weight") else 0.3  # big enough that greedy output is not one token
        a = np.ones(shape) if name.endswith("norm.weight") else rng.standard_normal(shape) * scale
        w.add_tensor(name, a.astype(embd_dtype if name == "token_embd.weight" else np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_draft(path: Path, target: Path, kind: str, seed: int = 1) -> Path:
    """A random DFlash draft of `kind` ("dflash2" or "dflash1") for the tiny target, block 4."""
    extra = {"selector_top_k": 4, "selector_rank": 8} if kind == "dflash2" else {}
    write_random_draft(path, target, seed=seed, kind=kind, target_layers=(0, 1), block_size=4,
                       n_layer=1, n_head=N_HEAD, n_head_kv=N_HEAD, n_ff=N_FF, **extra)
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def hub_file(repo: str, revision: str, path: Path, license: str = "Apache-2.0") -> dict:
    return {"repo": repo, "revision": revision, "file": path.name, "size": path.stat().st_size,
            "sha256": sha256(path), "license": license}


def catalog_entry(home: Path, name: str, target: dict, draft: dict | None = None, kind: str = "dflash2",
                  **extra) -> Path:
    """`<home>/catalog/<name>.json`: a user entry for a target (and draft) on the stand-in."""
    entry = {"name": name, "title": f"Tiny {name}", "summary": "a tiny test model", "architecture": "llama",
             "target": {"hub": target}, "kv_bytes_per_token": 2 * N_LAYER * N_EMBD * 2, "cpu": True, **extra}
    if draft is not None:
        entry["draft"] = {"kind": kind, "block_size": 4, "n_draft": {"cuda": 3, "metal": 3, "cpu": 3}, "hub": draft}
    folder = home / "catalog"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"models": [entry]}, indent=1), "utf-8")
    return path
