"""The DFlash draft format (GGUF architecture `dflash`): its keys, `DraftConfig`, the two kinds
we run, and whether a draft fits a target.

What it is: the one place that knows what a draft GGUF holds. The writer (write.py), the
reader (read.py: `read_draft`), the converter (convert.py), the trainer
(draft_training/) and the engine's check before it loads a draft
(engine/speculative/drafters/dflash_fit.py) all take the key names, `CAPTURE_ARCHS`, the
config and its validation from here; `fits` says what stops a draft from running on a
target, given the few `TargetFacts` the engine knows.

Two kinds (`DraftConfig.kind`), told apart as llama.cpp's `src/models/dflash.cpp` does, by
the tensor `selector_hidden.weight`:
- "dflash2": DFlash 2, the dual-tap dynamic convolutions and the candidate selector (K > 0
  candidates per slot, the lattice in the nextn slot);
- "dflash1": plain DFlash, no conv or selector keys or tensors; its block decode gives the
  draft's logits per block slot (`llama_model_dflash_selector_top_k` is 0).
DSpark drafts (`markov_w1.weight`) are neither and are refused.

What it is not: a writer (write.py), a reader (read.py), a converter (convert.py,
convert_config.py) or a binding. Nothing here imports llama_cpp, so `flashdesk inspect` and
the trainer can ask "can this target pair a draft?" without loading llama.cpp.

Conventions read from the vendored llama.cpp (llama-cpp-python 0.3.36, commit 0c1e57098:
`src/models/dflash.cpp`, `src/llama-arch.cpp`, `conversion/qwen.py`):
- `dflash.target_layers` holds HF layer id + 1 = the llama.cpp layer whose *input* is
  captured on the target (`llama_set_embeddings_layer_inp(ctx, id, true)`).
- The mask token is read from `tokenizer.ggml.mask_token_id` (`llama_vocab_mask`);
  `dflash.mask_token_id` (docs/llama-cpp.md) is written too but llama.cpp ignores it.
- NumPy shapes here are the reverse of ggml's `ne` order.
- The optional settings (`DraftConfig` fields after `name`) are keys dflash.cpp reads;
  each defaults to "not written" (write.py's doc says how llama.cpp applies them).
  llama.cpp treats a zero scale as "unset", so zero is refused rather than ignored.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Literal, get_args

import numpy as np

from ..check import check_gguf

ARCH = "dflash"
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS: more aborts the loader
# Bounds on the counts that size buffers, as native/llama-patches/0003 has llama.cpp's loader refuse them:
# a draft taps a handful of target layers (published ones 3 to 10), and taps x n_embd must fit the 32-bit
# feature width llama.cpp computes (an unbounded target_layers array wrapped it: CWE-190 -> 787).
MAX_TAPS = 64
MAX_FEATURES = (1 << 31) - 1
MAX_DRAFT_BLOCK, MAX_TOP_K, MAX_CONV_KERNEL = 64, 256, 64
HIDDEN_ACTS = ("silu", "gelu", "gelu_pytorch_tanh")  # what dflash.cpp accepts; both gelus run tanh-approximated

# Target architectures whose graph in the pinned llama.cpp sets the input of every layer
# as a capturable tensor (`res->t_layer_inp[il]` in src/models/*.cpp); others abort on the
# first decode. Update with llama.cpp.
CAPTURE_ARCHS = frozenset({"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "gemma4", "gpt-oss",
                           "muse-glimmer"})

TOP_K_KEY = "dflash.selector_top_k"  # K > 0 makes a DFlash 2 draft (llama_model_dflash_selector_top_k)
# DraftConfig field -> uint32 key, in the writer's order. head_dim is also the value and
# rope width; `vocab_size` and `dflash.mask_token_id` are written for people, llama.cpp
# takes both from the tokenizer.
UINT_KEYS = (
    ("context_length", "dflash.context_length"), ("n_embd", "dflash.embedding_length"),
    ("n_layer", "dflash.block_count"), ("n_ff", "dflash.feed_forward_length"),
    ("n_head", "dflash.attention.head_count"), ("n_head_kv", "dflash.attention.head_count_kv"),
    ("head_dim", "dflash.attention.key_length"), ("head_dim", "dflash.attention.value_length"),
    ("head_dim", "dflash.rope.dimension_count"), ("n_vocab", "dflash.vocab_size"),
    ("block_size", "dflash.block_size"), ("conv_kernel_size", "dflash.conv_kernel_size"),
    ("conv_group_size", "dflash.conv_group_size"), ("selector_rank", "dflash.selector_rank"),
    ("selector_top_k", TOP_K_KEY), ("mask_token_id", "dflash.mask_token_id"),
)
FLOAT_KEYS = (("rope_freq_base", "dflash.rope.freq_base"), ("rms_eps", "dflash.attention.layer_norm_rms_epsilon"))
CAUSAL_KEY = "dflash.attention.causal"  # bool
TARGET_LAYERS_KEY = "dflash.target_layers"  # int32 array
# optional keys, written only when set
SLIDING_WINDOW_KEY = "dflash.attention.sliding_window"  # uint32
SLIDING_PATTERN_KEY = "dflash.attention.sliding_window_pattern"  # bool array, one per layer
OPTIONAL_FLOAT_KEYS = (
    ("logit_scale", "dflash.logit_scale"), ("final_logit_softcapping", "dflash.final_logit_softcapping"),
    ("embedding_scale", "dflash.embedding_scale"), ("attention_scale", "dflash.attention.scale"),
    ("attention_value_scale", "dflash.attention.value_scale"),
)
HIDDEN_ACT_KEY = "dflash.hidden_activation"  # string
TOKENIZER_PREFIX = "tokenizer.ggml."  # copied from the target verbatim, but for the mask
TOKENS_KEY = "tokenizer.ggml.tokens"
MASK_KEY = "tokenizer.ggml.mask_token_id"
SELECTOR_TENSORS = ("selector_predecessor.weight", "selector_successor.weight", "selector_hidden.weight")
# DraftConfig.kind: with the candidate selector, or plain DFlash; each name written once, in the Literal
DraftKind = Literal["dflash2", "dflash1"]
KINDS: tuple[DraftKind, ...] = get_args(DraftKind)
DFLASH2, DFLASH1 = KINDS
SELECTOR_FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")  # DFlash 2 only
DSPARK_TENSOR = "markov_w1.weight"  # dflash.cpp's sign of a DSpark draft (a Markov head on the logits)
_CONTROL, _USER_DEFINED = 3, 4  # llama_token_type values in tokenizer.ggml.token_type


def kind_of(tensor_names) -> str:
    """"dflash2", "dflash1" or "dspark": what llama.cpp's dflash.cpp builds for a file with these
    tensors (`markov_w1.weight` makes DSpark, `selector_hidden.weight` DFlash 2, else plain DFlash)."""
    names = set(tensor_names)
    if DSPARK_TENSOR in names:
        return "dspark"
    return DFLASH2 if "selector_hidden.weight" in names else DFLASH1


def kind_words(kind: str, top_k: int = 0) -> str:
    """A kind as people read it: "DFlash 2 (K=16 candidates)", "DFlash v1", "DSpark"."""
    return {DFLASH2: f"DFlash 2 (K={top_k} candidates)", DFLASH1: "DFlash v1 (no candidate selector)",
            "dspark": "DSpark (a Markov head; flashdesk cannot run it)"}.get(kind, repr(kind))


def uint_keys(kind: str) -> tuple[tuple[str, str], ...]:
    """The uint32 keys a draft of `kind` carries (a DFlash v1 draft has no conv or selector keys)."""
    return UINT_KEYS if kind == DFLASH2 else tuple(fk for fk in UINT_KEYS if fk[0] not in SELECTOR_FIELDS)


def capture_refusal(architecture: str | None) -> str | None:
    """Why no DFlash draft (v1 or 2) can run on a target of this architecture; None if one can."""
    if architecture in CAPTURE_ARCHS:
        return None
    return (f"target architecture {architecture!r} cannot publish layer inputs in this llama.cpp, so no DFlash "
            f"draft can run on it (supported: {', '.join(sorted(CAPTURE_ARCHS))})")


def vocab_digest(tokens) -> str:
    """sha256 over the raw bytes of every vocabulary entry, in id order."""
    h = hashlib.sha256()
    for t in tokens:
        h.update(t)
        h.update(b"\0")
    return h.hexdigest()


def default_target_layers(n_layer: int, n_taps: int = 5) -> tuple[int, ...]:
    """Capture ids (llama.cpp layer whose input is tapped = HF id + 1), evenly spaced.

    HF ids run from 1 to n_layer - 3 (rounded half to even); for a 30-layer target this
    gives (2, 9, 15, 21, 28), the taps the shipped SmolLM2 draft was trained with.
    """
    hi = max(1, n_layer - 3)
    hf = np.round(np.linspace(1, hi, n_taps)).astype(int)
    ids = sorted({int(i) + 1 for i in hf if 0 <= int(i) + 1 < n_layer})
    return tuple(ids) if ids else (n_layer - 1,)


def pick_mask_token(meta: dict) -> int:
    """A token of the target vocabulary to fill masked block slots with.

    `meta`: the target's metadata from `check_gguf(path, arrays=(TOKENIZER_PREFIX,))`.
    An existing `tokenizer.ggml.mask_token_id` wins; else the highest-id control (or
    user-defined) token that is no bos/eos/eot/unk/pad/sep token and does not appear in
    the chat template, i.e. one the target never sees in normal use. SmolLM2: 16,
    "<empty_output>".
    """
    if MASK_KEY in meta:
        return int(meta[MASK_KEY])
    tokens, types = meta[TOKENS_KEY], meta.get("tokenizer.ggml.token_type", [])
    reserved = {int(v) for k, v in meta.items() if k.startswith(TOKENIZER_PREFIX) and k.endswith("_token_id")}
    template = (meta.get("tokenizer.chat_template") or "").encode()
    for tid in range(len(types) - 1, -1, -1):
        if types[tid] in (_CONTROL, _USER_DEFINED) and tid not in reserved and tokens[tid] not in template:
            return tid
    raise ValueError("the target vocabulary has no unused control token: pass mask_token_id explicitly")


@dataclass(frozen=True)
class DraftConfig:
    """Hyper-parameters of a DFlash draft (written as `dflash.*` keys). A "dflash1" config has
    no selector or convolutions: its four DFlash 2 fields (SELECTOR_FIELDS) read as 0."""

    n_embd: int  # must equal the target's n_embd
    n_vocab: int  # the target's vocabulary size (selector codebooks are full-vocabulary)
    target_n_layer: int | None  # only to validate target_layers; None: unknown (read from a draft GGUF)
    target_layers: tuple[int, ...]  # llama.cpp capture ids = HF layer id + 1, each < target_n_layer
    mask_token_id: int
    n_layer: int = 2
    n_head: int = 9
    n_head_kv: int = 3
    head_dim: int = 64
    n_ff: int = 1536
    block_size: int = 16  # anchor + 15 masked slots at most
    selector_top_k: int = 16  # K candidates per slot
    selector_rank: int = 64  # rank of the predecessor/successor codebooks
    conv_kernel_size: int = 4
    conv_group_size: int = 64  # channels sharing one dynamic conv coefficient
    rms_eps: float = 1e-5
    rope_freq_base: float = 10000.0
    context_length: int = 8192
    causal: bool = False  # DFlash attends both ways inside a block
    kind: DraftKind = DFLASH2  # "dflash2" (candidate selector) | "dflash1" (plain DFlash: logits per slot)
    name: str = "flashdesk DFlash2 draft"
    # optional settings llama.cpp's dflash graph reads; the defaults write no key
    sliding_window: int = 0  # W > 0: sliding layers see keys at positions > p - W
    swa_layers: tuple[bool, ...] = ()  # which layers slide; () with a window = every layer
    logit_scale: float | None = None  # multiplies the logits (published `output_multiplier`)
    final_logit_softcapping: float | None = None  # c: logits -> c * tanh(logits / c), after logit_scale
    embedding_scale: float | None = None  # multiplies the block's token embeddings
    attention_scale: float | None = None  # QK scale instead of 1/sqrt(head_dim)
    attention_value_scale: float | None = None  # multiplies the attention output (after attn_output)
    hidden_act: str = "silu"  # "gelu" / "gelu_pytorch_tanh": tanh-approximated GELU in llama.cpp

    def __post_init__(self):  # a config read back from JSON carries lists; keep it hashable
        object.__setattr__(self, "target_layers", tuple(self.target_layers))
        object.__setattr__(self, "swa_layers", tuple(bool(b) for b in self.swa_layers))
        if self.kind == DFLASH1:  # nothing of the selector exists: no value can pretend it does
            for f in SELECTOR_FIELDS:
                object.__setattr__(self, f, 0)

    def sliding_layers(self) -> tuple[bool, ...]:
        """Per layer: does it use the sliding window (all False without a window)."""
        if self.sliding_window <= 0:
            return (False,) * self.n_layer
        return self.swa_layers or (True,) * self.n_layer

    @classmethod
    def for_target(cls, target_path: str | os.PathLike, **overrides) -> DraftConfig:
        """A config sized for the target GGUF at `target_path`; keyword arguments override."""
        meta = check_gguf(target_path, arrays=(TOKENIZER_PREFIX,)).metadata
        arch = meta.get("general.architecture")

        def hp(key: str, default=None):
            return meta.get(f"{arch}.{key}", default)

        n_layer, n_embd = int(hp("block_count")), int(hp("embedding_length"))
        n_head = int(hp("attention.head_count", 1))
        base = dict(
            n_embd=n_embd, n_vocab=len(meta[TOKENS_KEY]), target_n_layer=n_layer,
            target_layers=default_target_layers(n_layer), mask_token_id=pick_mask_token(meta),
            n_head=n_head, n_head_kv=int(hp("attention.head_count_kv", n_head)),
            head_dim=int(hp("attention.key_length", n_embd // n_head)), n_ff=int(hp("feed_forward_length", 4 * n_embd)),
            rms_eps=float(hp("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_freq_base=float(hp("rope.freq_base", 10000.0)), context_length=int(hp("context_length", 8192)),
        )
        return replace(cls(**base), **overrides)

    def problems(self) -> list[str]:
        """Every value llama.cpp would refuse (or abort on), in words; empty if none."""
        k, n_tl = self.selector_top_k, self.target_n_layer
        checks = [
            (1 <= self.n_layer <= MAX_LAYERS, f"n_layer must be in [1, {MAX_LAYERS}]"),
            (self.n_head >= 1 and self.n_head_kv >= 1 and self.n_head % self.n_head_kv == 0,
             "n_head must be a multiple of n_head_kv"),
            (self.head_dim >= 2 and self.head_dim % 2 == 0, "head_dim must be even (rope)"),
            (2 <= self.block_size <= MAX_DRAFT_BLOCK, f"block_size must be in [2, {MAX_DRAFT_BLOCK}]"),
            (self.kind in KINDS, f"kind must be one of {', '.join(KINDS)}"),
        ]
        if self.kind == DFLASH2:  # a plain DFlash draft has none of these (they read as 0)
            checks += [
                (1 <= k <= MAX_TOP_K and self.selector_rank >= 1,
                 f"selector_top_k must be in [1, {MAX_TOP_K}] and selector_rank >= 1"),
                (self.conv_kernel_size <= MAX_CONV_KERNEL, f"conv_kernel_size must be at most {MAX_CONV_KERNEL}"),
                (self.n_embd >= k * (k + 1), f"n_embd {self.n_embd} is too small for a K={k} lattice row (K*(K+1))"),
                (self.conv_kernel_size >= 1 and self.conv_group_size >= 1 and self.n_embd % self.conv_group_size == 0,
                 "n_embd must be a multiple of conv_group_size"),
            ]
        checks += [
            (1 <= len(self.target_layers) <= MAX_TAPS,
             f"it taps {len(self.target_layers)} target layers; a draft taps 1 to {MAX_TAPS}"),
            (len(self.target_layers) * self.n_embd <= MAX_FEATURES,
             "its target layers times n_embd overflow the 32-bit feature width llama.cpp computes"),
            (all(0 <= t < (MAX_LAYERS if n_tl is None else n_tl) for t in self.target_layers),
             f"every target layer must be in [0, {MAX_LAYERS if n_tl is None else n_tl})"),
            (0 <= self.mask_token_id < self.n_vocab, "mask_token_id is outside the vocabulary"),
            (self.sliding_window >= 0, "sliding_window must be >= 0 (0 = full attention)"),
            (not self.swa_layers or (self.sliding_window > 0 and len(self.swa_layers) == self.n_layer
                                     and any(self.swa_layers)),
             "swa_layers needs a sliding_window, one flag per layer and at least one sliding layer"),
            (all(v is None or (math.isfinite(v) and v != 0.0) for v in
                 (self.logit_scale, self.embedding_scale, self.attention_scale, self.attention_value_scale)),
             "logit/embedding/attention scales must be finite and non-zero (llama.cpp reads 0 as unset)"),
            (self.final_logit_softcapping is None or (math.isfinite(self.final_logit_softcapping)
                                                      and self.final_logit_softcapping > 0),
             "final_logit_softcapping must be > 0"),
            (self.hidden_act in HIDDEN_ACTS, f"hidden_act must be one of {', '.join(HIDDEN_ACTS)}"),
        ]
        return [msg for ok, msg in checks if not ok]

    def validate(self) -> None:
        """Raise ValueError for any value llama.cpp would refuse (or abort on)."""
        problems = self.problems()
        if problems:
            raise ValueError(f"DraftConfig: {'; '.join(problems)}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DraftFile(DraftConfig):
    """A draft GGUF as `read.read_draft` read it: its config and what only the file holds."""

    path: str = ""
    vocab_digest: str = ""  # of the tokenizer it carries; must equal the target's
    n_vocab_draft: int | None = None  # rows of a reduced output head (d2t); None: it borrows the target's


@dataclass(frozen=True)
class TargetFacts:
    """What `fits` needs to know of a target (the engine has it from the loaded model)."""

    architecture: str
    n_embd: int
    n_layer: int
    n_vocab: int
    vocab_digest: str  # vocab_digest() of its token texts


def fits(draft: DraftFile, target: TargetFacts) -> list[str]:
    """What stops `draft` from running on `target`, in words; empty if it fits."""
    problems = [why for why in [capture_refusal(target.architecture)] if why]
    if draft.n_embd != target.n_embd:
        problems.append(f"its n_embd is {draft.n_embd} but the target's is {target.n_embd}")
    n = target.n_layer
    if any(not 0 <= t < n for t in draft.target_layers):  # a tap >= n_layer aborts llama.cpp
        problems.append(f"it taps target layers {list(draft.target_layers)}, but the target has {n} layers "
                        f"(every id must be in [0, {n}))")
    if draft.n_vocab != target.n_vocab or draft.vocab_digest != target.vocab_digest:
        problems.append(f"it has another tokenizer than the target ({draft.n_vocab} vs {target.n_vocab} tokens, "
                        "or different token texts)")
    return problems


def tensor_shapes(cfg: DraftConfig, n_keep: int | None = None) -> dict[str, tuple[int, ...]]:
    """NumPy shape of every tensor the draft must have (reverse of ggml's ne order).

    `n_keep`: size of a reduced output vocabulary (adds `d2t` and `output.weight`).
    """
    e, d, f, r = cfg.n_embd, cfg.head_dim, cfg.n_ff, cfg.selector_rank
    v2 = cfg.kind == DFLASH2  # the selector and the convolutions; a plain DFlash draft has neither
    n_conv = 2 * cfg.conv_kernel_size * (e // cfg.conv_group_size) if v2 else 0  # [side, tap, group] coefficients
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (e, len(cfg.target_layers) * e),  # concatenated tap features -> n_embd
        "enc.output_norm.weight": (e,),
        "output_norm.weight": (e,),
    }
    if v2:
        shapes.update({"selector_predecessor.weight": (cfg.n_vocab, r), "selector_successor.weight": (cfg.n_vocab, r),
                       "selector_hidden.weight": (r, e)})
    for i in range(cfg.n_layer):
        b = f"blk.{i}."
        shapes.update({
            b + "attn_norm.weight": (e,), b + "ffn_norm.weight": (e,),
            b + "attn_q.weight": (cfg.n_head * d, e), b + "attn_k.weight": (cfg.n_head_kv * d, e),
            b + "attn_v.weight": (cfg.n_head_kv * d, e), b + "attn_output.weight": (e, cfg.n_head * d),
            b + "attn_q_norm.weight": (d,), b + "attn_k_norm.weight": (d,),
            b + "ffn_gate.weight": (f, e), b + "ffn_up.weight": (f, e), b + "ffn_down.weight": (e, f),
        })
        if v2:  # conv base: [side, tap, channel]; side 0 filters the sub-block input, side 1 its output
            shapes.update({
                b + "attn_conv_base": (2, cfg.conv_kernel_size, e), b + "ffn_conv_base": (2, cfg.conv_kernel_size, e),
                b + "attn_conv_proj.weight": (n_conv, e), b + "ffn_conv_proj.weight": (n_conv, e),
            })
    if n_keep is not None:
        shapes["d2t"] = (n_keep,)  # sorted unique absolute target ids, int64
        shapes["output.weight"] = (n_keep, e)
    return shapes
