"""Find the safetensors files of a Hugging Face checkpoint and read their tensors one at a time.

Why our own reader rather than `safetensors.safe_open(..., framework="np")`: measured here
(safetensors 0.8.0), the NumPy API (1) refuses BF16 tensors outright ("data type
'bfloat16' not understood"), which is how most checkpoints ship, and (2) reads through a
memory map that stays open, so every tensor read stays resident and the process grows to
the whole checkpoint size. Here each tensor is read with a plain positioned read into a
fresh array, which the caller drops before the next: peak memory is one tensor, not the
model. The format is small (8-byte little-endian header length, a JSON header of
`name -> {dtype, shape, data_offsets}`, then the data); the header is bounds-checked
before anything is read.

Not here: what tensors mean (`llama`, `qwen3`) or how they are stored in GGUF (`encode`).
References: the safetensors format description (huggingface/safetensors README).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConvertError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the largest real headers are a few MB
# safetensors dtype -> NumPy dtype as read from disk (BF16 arrives as its raw uint16 bits).
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor's bytes are; nothing is read until `read_tensor`."""

    name: str
    dtype: str  # "F32" | "F16" | "BF16"
    shape: tuple[int, ...]
    path: Path
    offset: int  # absolute byte offset in `path`
    nbytes: int

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


def _read_header(path: Path) -> dict[str, TensorRef]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConvertError(f"{path} is too short to be a safetensors file ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise ConvertError(f"{path}: header length {n} does not fit the file ({size} bytes); "
                               "HINT: the download may be incomplete, fetch the file again")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: the safetensors header is not a JSON object")
    data_start, data_size = 8 + n, size - 8 - n
    refs: dict[str, TensorRef] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            shape = tuple(int(d) for d in shape)
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise ConvertError(f"{path}: malformed header entry for tensor {name!r}") from None
        if any(d < 0 for d in shape) or not 0 <= begin <= end <= data_size:
            raise ConvertError(f"{path}: tensor {name!r} lies outside the file (offsets {begin}..{end} of "
                               f"{data_size} data bytes). HINT: the download may be incomplete.")
        if dtype in DTYPES and end - begin != math.prod(shape) * DTYPES[dtype].itemsize:
            raise ConvertError(f"{path}: tensor {name!r} has {end - begin} bytes for shape {list(shape)} {dtype}")
        refs[name] = TensorRef(name, str(dtype), shape, path, data_start + begin, end - begin)
    return refs


def _safe_child(hf_dir: Path, file_name: str) -> Path:
    """A shard named by the index must be a file in the model folder, nowhere else."""
    if not isinstance(file_name, str) or Path(file_name).name != file_name or file_name in ("", ".", ".."):
        raise ConvertError(f"{hf_dir / INDEX_NAME} names the shard {file_name!r}, which is not a plain file name")
    return hf_dir / file_name


def find_tensors(hf_dir: str | Path) -> dict[str, TensorRef]:
    """All tensors of the checkpoint in `hf_dir`, single-file or sharded, by HF name."""
    hf_dir = Path(hf_dir)
    index = hf_dir / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            assert isinstance(weight_map, dict)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AssertionError):
            raise ConvertError(f"{index} is not a valid safetensors index (no weight_map object)") from None
        shards: dict[str, dict[str, TensorRef]] = {}
        refs: dict[str, TensorRef] = {}
        for name, file_name in weight_map.items():
            if file_name not in shards:
                shard = _safe_child(hf_dir, file_name)
                if not shard.is_file():
                    raise ConvertError(f"{index} names {file_name}, which is missing. "
                                       "HINT: download every shard of the checkpoint.")
                shards[file_name] = _read_header(shard)
            if name not in shards[file_name]:
                raise ConvertError(f"{index} puts tensor {name!r} in {file_name}, which does not hold it")
            refs[name] = shards[file_name][name]
        return refs

    files = [hf_dir / SINGLE_NAME] if (hf_dir / SINGLE_NAME).is_file() else sorted(
        p for p in hf_dir.glob("*.safetensors") if not p.name.startswith("consolidated"))
    if not files:
        other = [p.name for p in hf_dir.glob("*.bin")] + [p.name for p in hf_dir.glob("*.pth")]
        hint = (f"HINT: {', '.join(other[:3])} {'is' if len(other) == 1 else 'are'} PyTorch pickle files, which this "
                "converter does not read (they can run code); download the model's safetensors files instead."
                if other else "HINT: download the model's *.safetensors files into this folder.")
        raise ConvertError(f"{hf_dir} holds no safetensors weights. {hint}")
    refs = {}
    for f in files:
        for name, ref in _read_header(f).items():
            if name in refs:
                raise ConvertError(f"tensor {name!r} is in both {refs[name].path.name} and {f.name}; "
                                   f"HINT: keep only the checkpoint's own files (or its {INDEX_NAME})")
            refs[name] = ref
    return refs


def read_tensor(ref: TensorRef) -> np.ndarray:
    """The tensor as stored: float32, float16, or uint16 bit patterns for BF16 (see `to_f32`)."""
    if ref.dtype not in DTYPES:
        raise ConvertError(f"tensor {ref.name!r} in {ref.path.name} is {ref.dtype}; only F32, F16 and BF16 "
                           "weights can be converted")
    dt = DTYPES[ref.dtype]
    with open(ref.path, "rb") as f:
        f.seek(ref.offset)
        arr = np.empty(ref.shape, dtype=dt)
        got = f.readinto(memoryview(arr.reshape(-1).view(np.uint8))) if arr.size else 0
    if got != ref.nbytes:
        raise ConvertError(f"{ref.path} ended inside tensor {ref.name!r}. HINT: the download may be incomplete.")
    return arr if dt.isnative else arr.astype(dt.newbyteorder("="))


def to_f32(arr: np.ndarray, dtype: str) -> np.ndarray:
    """Values of a stored array as float32; BF16 is the top half of a float32, so shift it back."""
    if dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float32, copy=False)
