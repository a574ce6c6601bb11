"""Does a DFlash 2 draft GGUF fit a loaded target? Checked before the draft is loaded.

Everything here would otherwise abort llama.cpp or silently draft for another vocabulary:
the architecture must publish layer inputs, the taps must be below the target's layer
count, n_embd and the tokenizer must match, and the DFlash 2 metadata must be consistent.
Not the drafter (dflash.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import llama_cpp

from gguf_tools import GGUFFormatError, check_gguf
from gguf_tools.dflash_draft import read_metadata
from gguf_tools.llama_facts import CAPTURE_ARCHS

from ...errors import ModelLoadError
from ...llama.model import Model

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: more aborts the loader
HINT = "HINT: export the draft for this exact target with `gguf_tools.dflash_draft`, or run without a draft."
class DraftRefused(ModelLoadError):
    """The draft GGUF does not fit this target (or is not a DFlash 2 draft at all)."""


@dataclass(frozen=True)
class DraftInfo:
    """What validation read from a draft GGUF."""

    path: str
    n_embd: int
    n_layer: int
    block_size: int
    top_k: int  # K candidates per block slot
    target_layers: tuple[int, ...]  # llama.cpp capture ids on the target
    mask_token_id: int
    causal: bool
    n_vocab_draft: int | None  # reduced output vocabulary (d2t), None = the target's head


def vocab_digest(tokens) -> str:
    """sha256 over the raw bytes of every vocabulary entry, in id order."""
    h = hashlib.sha256()
    for t in tokens:
        h.update(t)
        h.update(b"\0")
    return h.hexdigest()


def target_vocab_digest(target: Model) -> str:
    return vocab_digest(llama_cpp.llama_vocab_get_text(target.vocab, i) or b"" for i in range(target.n_vocab))


def inspect_draft(path: str, target: Model) -> DraftInfo:
    """Validate a draft GGUF against a loaded target without loading the draft."""
    arch_t = target.info.architecture
    if arch_t not in CAPTURE_ARCHS:
        raise DraftRefused(f"target architecture {arch_t!r} cannot publish layer inputs in this llama.cpp, so no "
                           f"DFlash 2 draft can run on it (supported: {', '.join(sorted(CAPTURE_ARCHS))}). "
                           "HINT: use prompt lookup or plain decoding for this model.")
    try:
        summary = check_gguf(path)
    except (GGUFFormatError, OSError) as e:
        raise DraftRefused(f"draft {path} is not a readable GGUF: {e}. {HINT}") from None
    meta = summary.metadata
    if summary.architecture != "dflash":
        raise DraftRefused(f"{path} is a {summary.architecture!r} model, not a DFlash draft "
                           f"(general.architecture must be 'dflash'). {HINT}")
    tensors = {t.name: t for t in summary.tensors}

    def num(key: str, default: int = 0) -> int:
        v = meta.get(f"dflash.{key}", default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    n_embd, n_layer, k = num("embedding_length"), num("block_count"), num("selector_top_k")
    block, rank = num("block_size"), num("selector_rank")
    kernel, group = num("conv_kernel_size"), num("conv_group_size")
    problems = []
    if n_embd != target.info.n_embd:
        problems.append(f"its n_embd is {n_embd} but the target's is {target.info.n_embd}")
    if not 1 <= n_layer <= MAX_LAYERS:
        problems.append(f"dflash.block_count {n_layer} is out of range")
    if k <= 0 or "selector_hidden.weight" not in tensors:
        problems.append("it is no DFlash 2 draft (dflash.selector_top_k and the selector tensors are missing)")
    elif rank <= 0 or kernel <= 0 or group <= 0 or n_embd % group or n_embd < k * (k + 1):
        problems.append("its conv/selector metadata is inconsistent")
    if block < 2:
        problems.append(f"dflash.block_size {block} is below 2")
    if problems:
        raise DraftRefused(f"draft {path} does not fit target {target.path}: {'; '.join(problems)}. {HINT}")
    arrays = read_metadata(path, ("dflash.target_layers", "tokenizer.ggml.tokens", "tokenizer.ggml.mask_token_id"))
    taps = arrays.get("dflash.target_layers")
    taps = tuple(int(t) for t in taps.value) if taps is not None and isinstance(taps.value, list) else ()
    n_layer_t = target.info.n_layer
    if not taps or any(not 0 <= t < n_layer_t for t in taps):
        raise DraftRefused(f"draft {path} taps target layers {list(taps)}, but the target has {n_layer_t} layers "
                           f"(every id must be in [0, {n_layer_t})). {HINT}")
    tokens = arrays.get("tokenizer.ggml.tokens")
    tokens = tokens.value if tokens is not None else []
    if len(tokens) != target.n_vocab or vocab_digest(tokens) != target_vocab_digest(target):
        raise DraftRefused(f"draft {path} has another tokenizer than the target ({len(tokens)} vs "
                           f"{target.n_vocab} tokens, or different token texts). {HINT}")
    mask = arrays.get("tokenizer.ggml.mask_token_id")
    mask = int(mask.value) if mask is not None else -1
    if not 0 <= mask < target.n_vocab:
        raise DraftRefused(f"draft {path} has no valid tokenizer.ggml.mask_token_id. {HINT}")
    n_keep = None
    if "d2t" in tensors:
        d2t = tensors["d2t"]
        if d2t.type_name != "I64" or "output.weight" not in tensors or len(d2t.shape) != 1:
            raise DraftRefused(f"draft {path} has a d2t map without an I64 type or an output.weight. {HINT}")
        n_keep = int(d2t.shape[0])
    return DraftInfo(path, n_embd, n_layer, block, k, taps, mask, meta.get("dflash.attention.causal") is True, n_keep)
