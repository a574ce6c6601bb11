"""A llama GGUF -> a Hugging Face style folder (config.json, model.safetensors, tokenizer files).

The reverse of `gguf_tools.convert`, written for issue 7's round-trip proof: export the
default model from its GGUF, convert the folder back, and compare. Quantized tensors are
dequantized with `gguf.quants.dequantize` (so a Q4_1 model comes back as the exact float
values llama.cpp computes with), GGUF tensor names go back to HF Llama names, and the q/k
rows go back from llama.cpp's interleaved rotary layout to HF's half-split one.
Tensors are dequantized a slab of rows at a time and written straight into the
safetensors file (its header is computed up front from the GGUF shapes), so memory holds
at most one slab (16 MB of float32), or one q/k matrix.

Not a general exporter: llama architecture only, byte-level BPE tokenizers only
(`export_tokenizer`), no rope scaling other than linear, one safetensors file.
References: safetensors format (8-byte little-endian header length, JSON header,
raw little-endian data), `gguf.get_tensor_name_map`, HF `LlamaConfig` field names.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import gguf
import numpy as np

from .check import check_gguf
from .export_tokenizer import ExportError, write_tokenizer_files

DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
SLAB_BYTES = 16 << 20  # float32 bytes dequantized at a time: bounds memory for large embeddings

# HF Llama parameter names (without ".weight"); the GGUF names they map to come from
# gguf's own table, so this is the inverse of gguf.get_tensor_name_map for Llama.
HF_GLOBAL = ("model.embed_tokens", "model.norm", "lm_head")
HF_LAYER = ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")

Progress = Callable[[int, int], None]  # (bytes written, bytes in all), as convert_hf reports


@dataclass
class ExportReport:
    out_dir: Path
    n_tensors: int
    bytes_written: int
    seconds: float


def hf_names(n_layer: int) -> dict[str, str]:
    """GGUF tensor name -> HF Llama tensor name, for every tensor a llama GGUF may hold."""
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layer)
    hf = list(HF_GLOBAL) + [f"model.layers.{i}.{n}" for i in range(n_layer) for n in HF_LAYER]
    out = {}
    for name in hf:
        for suffix in (".weight", ".bias"):
            g = tmap.get_name(name + suffix, try_suffixes=(".weight", ".bias"))
            if g is None:  # gguf's table lost a Llama name: fail loudly, not with a half model
                raise AssertionError(f"gguf has no GGUF name for {name}")
            out[g] = name + suffix
    return out


def rotary_to_half_split(x: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of q/k from llama.cpp's interleaved rotary pairs back to HF's half-split order.
    Conversion reshapes HF rows to (n_heads, 2, head_dim/2, ...) and swaps the middle axes;
    this reshapes to (n_heads, head_dim/2, 2, ...) and swaps them back."""
    half = x.shape[0] // n_heads // 2
    return x.reshape(n_heads, half, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "bfloat16":  # round to nearest even on the top 16 bits (NumPy has no bfloat16)
        u = x.view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x


def _hparams(reader: gguf.GGUFReader) -> dict:
    def get(key, default=None):
        field = reader.fields.get(key)
        return field.contents() if field is not None else default

    arch = get("general.architecture")
    if arch != "llama":
        raise ExportError(f"{arch!r} GGUFs cannot be exported yet; export_hf writes Llama checkpoints only. "
                          "HINT: use a llama-architecture GGUF (Llama, SmolLM, Mistral-style).")
    if (get("llama.expert_count") or 0) > 0:
        raise ExportError("mixture-of-experts llama GGUFs cannot be exported. HINT: use a dense model.")
    n_embd, n_head = int(get("llama.embedding_length")), int(get("llama.attention.head_count"))
    head_dim = int(get("llama.attention.key_length", n_embd // n_head))
    if int(get("llama.rope.dimension_count", head_dim)) != head_dim:
        raise ExportError("partial rotary embeddings (rope.dimension_count != head_dim) have no HF Llama form.")
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": n_embd,
        "intermediate_size": int(get("llama.feed_forward_length")),
        "num_hidden_layers": int(get("llama.block_count")),
        "num_attention_heads": n_head,
        "num_key_value_heads": int(get("llama.attention.head_count_kv", n_head)),
        "head_dim": head_dim,
        # float32 GGUF values, written as their shortest decimal so config.json reads "1e-05".
        "rms_norm_eps": float(str(np.float32(get("llama.attention.layer_norm_rms_epsilon", 1e-5)))),
        "rope_theta": float(str(np.float32(get("llama.rope.freq_base", 10000.0)))),
        "max_position_embeddings": int(get("llama.context_length", 2048)),
        "attention_bias": False,
        "mlp_bias": False,
        "rope_scaling": None,
    }
    scaling = get("llama.rope.scaling.type", "none")
    if scaling == "linear":
        cfg["rope_scaling"] = {"type": "linear", "factor": float(get("llama.rope.scaling.factor", 1.0))}
    elif scaling != "none":
        raise ExportError(f"rope scaling {scaling!r} cannot be exported yet (only linear).")
    return cfg


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ExportError(f"{out_dir} exists and is not empty. HINT: choose a new folder or pass overwrite=True.")
    out_dir.mkdir(parents=True, exist_ok=True)


def export_hf(gguf_path: str | Path, out_dir: str | Path, dtype: str = "float32", *,
              overwrite: bool = False, progress: Progress | None = None) -> ExportReport:
    """Write an HF Llama folder for the llama GGUF at `gguf_path`; returns what was written."""
    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}.")
    t0 = time.perf_counter()
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    check_gguf(gguf_path)  # bounds-checked before gguf.GGUFReader trusts any offset
    reader = gguf.GGUFReader(str(gguf_path))
    cfg = _hparams(reader)
    _check_out_dir(out_dir, overwrite)

    names = hf_names(cfg["num_hidden_layers"])
    unknown = [t.name for t in reader.tensors if t.name not in names]
    if unknown:
        raise ExportError(f"tensors with no HF Llama name: {', '.join(unknown[:8])}. "
                          "HINT: this llama variant (e.g. llama3 rope_freqs) cannot be exported yet.")
    by_name = {t.name: t for t in reader.tensors}
    cfg["vocab_size"] = int(by_name["token_embd.weight"].shape[-1])  # ggml ne order: [n_embd, n_vocab]
    cfg["tie_word_embeddings"] = "output.weight" not in by_name
    cfg["torch_dtype"] = dtype

    vocab = write_tokenizer_files(reader, out_dir, cfg["max_position_embeddings"])
    for kind in ("bos", "eos", "pad"):
        if kind in vocab.special:
            cfg[f"{kind}_token_id"] = vocab.special[kind]
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", "utf-8")

    n_head, n_head_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def chunks(t) -> Iterator[np.ndarray]:
        """The tensor in HF layout, as consecutive slabs of rows (one slab for q/k, whose rows
        are reordered across a head). NumPy shape = HF shape = ggml ne reversed."""
        shape = [int(n) for n in reversed(t.shape)]
        heads = n_head if t.name.endswith("attn_q.weight") else n_head_kv if t.name.endswith("attn_k.weight") else 0
        if heads:
            x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
            yield _cast(rotary_to_half_split(x, heads), dtype)
            return
        data = t.data  # rows of ggml blocks: dequantizing a slab of rows needs nothing else
        step = max(1, SLAB_BYTES // (4 * shape[-1])) if data.ndim > 1 else len(data)
        for i in range(0, len(data), step):
            yield _cast(gguf.quants.dequantize(data[i:i + step], t.tensor_type), dtype)

    # Written under a temporary name: a half-written file never looks like a checkpoint.
    partial = out_dir / "model.safetensors.partial"
    written = _write_safetensors(partial,
                                 [(names[t.name], [int(n) for n in reversed(t.shape)], t) for t in reader.tensors],
                                 dtype, chunks, progress)
    partial.replace(out_dir / "model.safetensors")
    return ExportReport(out_dir, len(reader.tensors), written, time.perf_counter() - t0)


def _write_safetensors(path: Path, entries: list, dtype: str, chunks: Callable, progress: Progress | None) -> int:
    """entries: (HF name, shape, source); `chunks(source)` yields the tensor's data in order.
    The header is computed from the shapes first, so data streams straight to the file."""
    item = np.dtype(np.float32 if dtype == "float32" else np.uint16).itemsize
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in entries:
        size = int(np.prod(shape)) * item
        header[name] = {"dtype": DTYPES[dtype], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, _, src in entries:
            begin, end = header[name]["data_offsets"]
            done = begin
            for x in chunks(src):
                if x.dtype.itemsize != item:
                    raise AssertionError(f"{name}: got {x.dtype}, header says {dtype}")
                f.write(memoryview(np.ascontiguousarray(x)).cast("B"))
                done += x.nbytes
            if done != end:  # a shape mismatch would shift every later tensor: never write that
                raise AssertionError(f"{name}: wrote {done - begin} bytes, header says {end - begin}")
            if progress is not None:
                progress(end, offset)
    return 8 + len(raw) + offset
