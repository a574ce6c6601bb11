"""Write a DFlash 2 draft GGUF (architecture `dflash`) for a given target GGUF.

A draft is described by two things: `DraftConfig` (hyper-parameters, one dataclass) and
a dict of named NumPy tensors. `write_dflash_draft` turns both into a GGUF that the
pinned llama.cpp loads as a DFlash 2 draft; `random_tensors` makes a seeded random
(identity-conv) set for tests, and a trainer exports real weights through the same
writer. The target's tokenizer metadata (`tokenizer.ggml.*`) is copied verbatim; no
`token_embd`/`output` is written: the draft borrows the target's through `ctx_other`
(unless a reduced vocabulary ships its own `output.weight` with a `d2t` map).

Not a converter from Hugging Face checkpoints and not a validator of foreign drafts
(the engine's `engine/speculative/drafters/dflash.py` checks drafts before loading them).

Conventions read from the vendored llama.cpp (`src/models/dflash.cpp`,
`src/llama-arch.cpp`, `conversion/qwen.py`):
- `dflash.target_layers` holds HF layer id + 1 = the llama.cpp layer whose *input* is
  captured on the target (`llama_set_embeddings_layer_inp(ctx, id, true)`).
- The mask token is read from `tokenizer.ggml.mask_token_id` (`llama_vocab_mask`);
  `dflash.mask_token_id` (DESIGN.md §2) is written too but llama.cpp ignores it.
- NumPy shapes below are the reverse of ggml's `ne` order.
- Optional output/attention settings (`DraftConfig` fields after `causal`) are the keys
  `src/models/dflash.cpp` reads for this architecture; each defaults to "not written", so a
  draft that uses none of them is byte-identical to one written before they existed.
  How llama.cpp applies them (the PyTorch draft in draft_training/model.py mirrors it):
  `embedding_scale` multiplies the block's token embeddings (not the injected rows);
  `attention.scale` replaces 1/sqrt(head_dim) as the QK scale; `attention.value_scale`
  multiplies the attention output after attn_output, before the side-1 conv;
  `hidden_activation` "gelu"/"gelu_pytorch_tanh" swaps SiLU for tanh-approximated GELU in the
  gated MLP; `logit_scale` multiplies the logits, then `final_logit_softcapping` c maps them
  to c * tanh(x / c), both before the top-K and the unary scores (DFlash 2 only); a
  `attention.sliding_window` W > 0 needs `attention.sliding_window_pattern` (one bool per
  layer) and hides from a query at position p every key at position <= p - W on the
  sliding layers (keys later than p, i.e. in its block, stay visible). llama.cpp treats a
  zero scale as "unset", so zero is refused here rather than silently ignored.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import asdict, dataclass, replace

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from .check import check_gguf

ARCH = "dflash"
HIDDEN_ACTS = ("silu", "gelu", "gelu_pytorch_tanh")  # what dflash.cpp accepts; both gelus run tanh-approximated
_SCALAR_FMT = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_CONTROL, _USER_DEFINED = 3, 4  # llama_token_type values in tokenizer.ggml.token_type


@dataclass(frozen=True)
class MetaValue:
    """One GGUF metadata value with its types, so it can be written back unchanged."""

    vtype: GGUFValueType
    value: object  # int/float/bool/bytes, or a list of those for arrays (strings stay bytes)
    sub_type: GGUFValueType | None = None


def read_metadata(path: str | os.PathLike, prefixes: tuple[str, ...] = ("",)) -> dict[str, MetaValue]:
    """Metadata of a GGUF whose keys start with one of `prefixes`, arrays included.

    The file is first checked by `check_gguf` (bounds-checked walk), so this reader
    trusts the lengths it meets. Much faster than `gguf.GGUFReader` on a 49k vocabulary.
    """
    check_gguf(path)
    out: dict[str, MetaValue] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        n_kv = struct.unpack_from("<Q", buf, 16)[0]
        pos = 24

        def string(p: int) -> tuple[bytes, int]:
            n = struct.unpack_from("<Q", buf, p)[0]
            return bytes(buf[p + 8:p + 8 + n]), p + 8 + n

        for _ in range(n_kv):
            key_b, pos = string(pos)
            key = key_b.decode("utf-8", errors="replace")
            vtype = GGUFValueType(struct.unpack_from("<I", buf, pos)[0])
            pos += 4
            want = key.startswith(prefixes)
            if vtype in _SCALAR_FMT:
                val = struct.unpack_from(_SCALAR_FMT[vtype], buf, pos)[0]
                pos += struct.calcsize(_SCALAR_FMT[vtype])
                meta = MetaValue(vtype, val)
            elif vtype == GGUFValueType.STRING:
                val, pos = string(pos)
                meta = MetaValue(vtype, val)
            else:  # ARRAY of scalars or strings (check_gguf refused anything else)
                etype = GGUFValueType(struct.unpack_from("<I", buf, pos)[0])
                count = struct.unpack_from("<Q", buf, pos + 4)[0]
                pos += 12
                if etype == GGUFValueType.STRING:
                    items = []
                    for _ in range(count):
                        s, pos = string(pos)
                        if want:
                            items.append(s)
                else:
                    fmt = _SCALAR_FMT[etype]
                    size = struct.calcsize(fmt)
                    items = np.frombuffer(buf, dtype=np.dtype(fmt), count=count, offset=pos).tolist() if want else []
                    pos += size * count
                meta = MetaValue(vtype, items, etype)
            if want:
                out[key] = meta
    return out


def _text(meta: dict[str, MetaValue], key: str, default=None):
    v = meta.get(key)
    if v is None:
        return default
    return v.value.decode("utf-8", errors="replace") if isinstance(v.value, bytes) else v.value


def default_target_layers(n_layer: int, n_taps: int = 5) -> tuple[int, ...]:
    """Capture ids (llama.cpp layer whose input is tapped = HF id + 1), evenly spaced.

    HF ids run from 1 to n_layer - 3 (rounded half to even); for a 30-layer target this
    gives (2, 9, 15, 21, 28), the taps DESIGN.md §9 trained with.
    """
    hi = max(1, n_layer - 3)
    hf = np.round(np.linspace(1, hi, n_taps)).astype(int)
    ids = sorted({int(i) + 1 for i in hf if 0 <= int(i) + 1 < n_layer})
    return tuple(ids) if ids else (n_layer - 1,)


def pick_mask_token(meta: dict[str, MetaValue]) -> int:
    """A token of the target vocabulary to fill masked block slots with.

    An existing `tokenizer.ggml.mask_token_id` wins; else the highest-id control (or
    user-defined) token that is no bos/eos/eot/unk/pad/sep token and does not appear in
    the chat template, i.e. one the target never sees in normal use. SmolLM2: 16,
    "<empty_output>".
    """
    if "tokenizer.ggml.mask_token_id" in meta:
        return int(meta["tokenizer.ggml.mask_token_id"].value)
    tokens = meta["tokenizer.ggml.tokens"].value
    types = meta.get("tokenizer.ggml.token_type", MetaValue(GGUFValueType.ARRAY, [])).value
    reserved = {int(v.value) for k, v in meta.items() if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")}
    template = (_text(meta, "tokenizer.chat_template") or "").encode()
    for tid in range(len(types) - 1, -1, -1):
        if types[tid] in (_CONTROL, _USER_DEFINED) and tid not in reserved and tokens[tid] not in template:
            return tid
    raise ValueError("the target vocabulary has no unused control token: pass mask_token_id explicitly")


@dataclass(frozen=True)
class DraftConfig:
    """Hyper-parameters of a DFlash 2 draft (written as `dflash.*` keys)."""

    n_embd: int  # must equal the target's n_embd
    n_vocab: int  # the target's vocabulary size (selector codebooks are full-vocabulary)
    target_n_layer: int  # only to validate target_layers
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
    name: str = "flashdesk DFlash2 draft"
    # optional settings llama.cpp's dflash graph reads; the defaults write no key (see module doc)
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

    def sliding_layers(self) -> tuple[bool, ...]:
        """Per layer: does it use the sliding window (all False without a window)."""
        if self.sliding_window <= 0:
            return (False,) * self.n_layer
        return self.swa_layers or (True,) * self.n_layer

    @classmethod
    def for_target(cls, target_path: str | os.PathLike, **overrides) -> "DraftConfig":
        """A config sized for the target GGUF at `target_path`; keyword arguments override."""
        meta = read_metadata(target_path)
        arch = _text(meta, "general.architecture")
        n_layer = int(_text(meta, f"{arch}.block_count"))
        n_embd = int(_text(meta, f"{arch}.embedding_length"))
        n_head = int(_text(meta, f"{arch}.attention.head_count", 1))
        base = dict(
            n_embd=n_embd, n_vocab=len(meta["tokenizer.ggml.tokens"].value), target_n_layer=n_layer,
            target_layers=default_target_layers(n_layer), mask_token_id=pick_mask_token(meta),
            n_head=n_head, n_head_kv=int(_text(meta, f"{arch}.attention.head_count_kv", n_head)),
            head_dim=int(_text(meta, f"{arch}.attention.key_length", n_embd // n_head)),
            n_ff=int(_text(meta, f"{arch}.feed_forward_length", 4 * n_embd)),
            rms_eps=float(_text(meta, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
            rope_freq_base=float(_text(meta, f"{arch}.rope.freq_base", 10000.0)),
            context_length=int(_text(meta, f"{arch}.context_length", 8192)),
        )
        return replace(cls(**base), **overrides)

    def validate(self) -> None:
        """Raise ValueError for any value llama.cpp would refuse (or abort on)."""
        k = self.selector_top_k
        checks = [
            (self.n_layer >= 1, "n_layer must be >= 1"),
            (self.n_head >= 1 and self.n_head_kv >= 1 and self.n_head % self.n_head_kv == 0,
             "n_head must be a multiple of n_head_kv"),
            (self.head_dim >= 2 and self.head_dim % 2 == 0, "head_dim must be even (rope)"),
            (self.block_size >= 2, "block_size must be >= 2"),
            (k >= 1 and self.selector_rank >= 1, "selector_top_k and selector_rank must be >= 1"),
            (self.n_embd >= k * (k + 1), f"n_embd {self.n_embd} is too small for a K={k} lattice row (K*(K+1))"),
            (self.conv_kernel_size >= 1 and self.conv_group_size >= 1 and self.n_embd % self.conv_group_size == 0,
             "n_embd must be a multiple of conv_group_size"),
            (len(self.target_layers) >= 1, "target_layers is empty"),
            (all(0 <= t < self.target_n_layer for t in self.target_layers),
             f"every target layer must be in [0, {self.target_n_layer})"),
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
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"DraftConfig: {msg}")

    def to_dict(self) -> dict:
        return asdict(self)


def tensor_shapes(cfg: DraftConfig, n_keep: int | None = None) -> dict[str, tuple[int, ...]]:
    """NumPy shape of every tensor the draft must have (reverse of ggml's ne order).

    `n_keep`: size of a reduced output vocabulary (adds `d2t` and `output.weight`).
    """
    e, d, f, r = cfg.n_embd, cfg.head_dim, cfg.n_ff, cfg.selector_rank
    n_conv = 2 * cfg.conv_kernel_size * (e // cfg.conv_group_size)  # [side, tap, group] coefficients
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (e, len(cfg.target_layers) * e),  # concatenated tap features -> n_embd
        "enc.output_norm.weight": (e,),
        "output_norm.weight": (e,),
        "selector_predecessor.weight": (cfg.n_vocab, r),
        "selector_successor.weight": (cfg.n_vocab, r),
        "selector_hidden.weight": (r, e),
    }
    for i in range(cfg.n_layer):
        b = f"blk.{i}."
        shapes.update({
            b + "attn_norm.weight": (e,), b + "ffn_norm.weight": (e,),
            b + "attn_q.weight": (cfg.n_head * d, e), b + "attn_k.weight": (cfg.n_head_kv * d, e),
            b + "attn_v.weight": (cfg.n_head_kv * d, e), b + "attn_output.weight": (e, cfg.n_head * d),
            b + "attn_q_norm.weight": (d,), b + "attn_k_norm.weight": (d,),
            b + "ffn_gate.weight": (f, e), b + "ffn_up.weight": (f, e), b + "ffn_down.weight": (e, f),
            # conv base: [side, tap, channel]; side 0 filters the sub-block input, side 1 its output
            b + "attn_conv_base": (2, cfg.conv_kernel_size, e), b + "ffn_conv_base": (2, cfg.conv_kernel_size, e),
            b + "attn_conv_proj.weight": (n_conv, e), b + "ffn_conv_proj.weight": (n_conv, e),
        })
    if n_keep is not None:
        shapes["d2t"] = (n_keep,)  # sorted unique absolute target ids, int64
        shapes["output.weight"] = (n_keep, e)
    return shapes


def random_tensors(cfg: DraftConfig, seed: int = 0, *, std: float = 0.02, conv_std: float = 0.01,
                   keep_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A seeded random draft: small normal weights, unit norms, identity convolutions.

    The conv base is the identity filter (tap 0 = 1) so a fresh draft behaves like a
    plain DFlash block; `conv_std` adds small dynamic coefficients on top. `keep_ids`
    (sorted unique target ids) makes a reduced-vocabulary head with random rows.
    """
    rng = np.random.default_rng(seed)
    shapes = tensor_shapes(cfg, None if keep_ids is None else len(keep_ids))
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if name == "d2t":
            out[name] = np.asarray(keep_ids, dtype=np.int64)
        elif name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("conv_base"):
            base = np.zeros(shape, np.float32)  # [2, kernel, n_embd]
            base[:, 0, :] = 1.0
            out[name] = base
        elif name.endswith("conv_proj.weight"):
            out[name] = (rng.standard_normal(shape) * conv_std).astype(np.float32)
        elif name == "fc.weight":  # features are RMS-normalised after fc, so only direction matters
            out[name] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        elif name.startswith("selector_") and name != "selector_hidden.weight":
            out[name] = (rng.standard_normal(shape) / np.sqrt(cfg.selector_rank)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
    return out


def _check_tensors(cfg: DraftConfig, tensors: dict[str, np.ndarray]) -> None:
    n_keep = len(tensors["d2t"]) if "d2t" in tensors else None
    want = tensor_shapes(cfg, n_keep)
    extra = sorted(set(tensors) - set(want))
    missing = sorted(set(want) - set(tensors))
    if extra or missing:
        raise ValueError(f"draft tensors do not match the config: missing {missing}, unexpected {extra}")
    for name, shape in want.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"tensor {name}: shape {tuple(tensors[name].shape)}, expected {shape}")
    if n_keep is not None:
        d2t = np.asarray(tensors["d2t"])
        if d2t.dtype != np.int64 or np.any(np.diff(d2t) <= 0) or d2t[0] < 0 or d2t[-1] >= cfg.n_vocab:
            raise ValueError("d2t must be int64, sorted, unique absolute target ids within the vocabulary")


def _write_options(w: GGUFWriter, cfg: DraftConfig) -> None:
    """The optional keys, only those that differ from llama.cpp's defaults (see the module doc)."""
    a = ARCH
    if cfg.sliding_window > 0:
        w.add_uint32(f"{a}.attention.sliding_window", int(cfg.sliding_window))
        # llama.cpp requires the pattern whenever the window is set; it reads bools as 0/1 per layer
        w.add_key_value(f"{a}.attention.sliding_window_pattern", list(cfg.sliding_layers()), GGUFValueType.ARRAY,
                        GGUFValueType.BOOL)
    for key, val in [("logit_scale", cfg.logit_scale), ("final_logit_softcapping", cfg.final_logit_softcapping),
                     ("embedding_scale", cfg.embedding_scale), ("attention.scale", cfg.attention_scale),
                     ("attention.value_scale", cfg.attention_value_scale)]:
        if val is not None:
            w.add_float32(f"{a}.{key}", float(val))
    if cfg.hidden_act != "silu":
        w.add_string(f"{a}.hidden_activation", cfg.hidden_act)


def write_dflash_draft(path: str | os.PathLike, cfg: DraftConfig, tensors: dict[str, np.ndarray],
                       target_path: str | os.PathLike, *, matrix_dtype: str = "f32") -> None:
    """Write `tensors` (see `tensor_shapes`) as a DFlash 2 draft for the target GGUF.

    `matrix_dtype` "f16" halves the file: it applies to 2-D weights (norms, conv bases
    and d2t stay as they are). Raises ValueError on any inconsistency, before writing.
    """
    cfg.validate()
    _check_tensors(cfg, tensors)
    tok = read_metadata(target_path, ("tokenizer.ggml.",))
    n_vocab = len(tok["tokenizer.ggml.tokens"].value)
    if n_vocab != cfg.n_vocab:
        raise ValueError(f"config n_vocab {cfg.n_vocab} != target vocabulary {n_vocab}")
    w = GGUFWriter(os.fspath(path), ARCH)
    w.add_string("general.name", cfg.name)
    w.add_string("general.type", "model")
    a = ARCH
    for key, val in [("context_length", cfg.context_length), ("embedding_length", cfg.n_embd),
                     ("block_count", cfg.n_layer), ("feed_forward_length", cfg.n_ff),
                     ("attention.head_count", cfg.n_head), ("attention.head_count_kv", cfg.n_head_kv),
                     ("attention.key_length", cfg.head_dim), ("attention.value_length", cfg.head_dim),
                     ("rope.dimension_count", cfg.head_dim), ("vocab_size", cfg.n_vocab),
                     ("block_size", cfg.block_size), ("conv_kernel_size", cfg.conv_kernel_size),
                     ("conv_group_size", cfg.conv_group_size), ("selector_rank", cfg.selector_rank),
                     ("selector_top_k", cfg.selector_top_k), ("mask_token_id", cfg.mask_token_id)]:
        w.add_uint32(f"{a}.{key}", int(val))
    w.add_float32(f"{a}.rope.freq_base", float(cfg.rope_freq_base))
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", float(cfg.rms_eps))
    w.add_bool(f"{a}.attention.causal", bool(cfg.causal))
    _write_options(w, cfg)
    # llama.cpp reads target_layers as an int32 array
    w.add_key_value(f"{a}.target_layers", [int(t) for t in cfg.target_layers], GGUFValueType.ARRAY,
                    GGUFValueType.INT32)
    for key, meta in tok.items():
        if key.startswith("tokenizer.ggml.") and key != "tokenizer.ggml.mask_token_id":
            w.add_key_value(key, meta.value, meta.vtype, meta.sub_type)
    w.add_uint32("tokenizer.ggml.mask_token_id", int(cfg.mask_token_id))
    for name in sorted(tensors):
        t = np.ascontiguousarray(tensors[name])
        if t.dtype != np.int64:
            t = t.astype(np.float16 if matrix_dtype == "f16" and t.ndim == 2 else np.float32)
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_random_draft(path: str | os.PathLike, target_path: str | os.PathLike, *, seed: int = 0,
                       keep_ids: np.ndarray | None = None, matrix_dtype: str = "f32",
                       **overrides) -> DraftConfig:
    """A seeded random DFlash 2 draft for the target (tests, smoke runs); returns its config."""
    cfg = DraftConfig.for_target(target_path, **overrides)
    write_dflash_draft(path, cfg, random_tensors(cfg, seed, keep_ids=keep_ids), target_path,
                       matrix_dtype=matrix_dtype)
    return cfg


__all__ = ["ARCH", "HIDDEN_ACTS", "DraftConfig", "MetaValue", "default_target_layers", "pick_mask_token",
           "random_tensors", "read_metadata", "tensor_shapes", "write_dflash_draft", "write_random_draft"]
