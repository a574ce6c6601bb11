"""Validate a GGUF file's structure before anything trusts it.

Walks the header, metadata and tensor table with every count, length, offset and
size bounds-checked against caps and the file size, so a truncated or hostile file
fails fast with one clear error instead of making a reader allocate gigabytes or
llama.cpp read out of bounds. Type tables come from the `gguf` package.
The one metadata walker of gguf_tools: arrays come back as their length unless the
caller names them (`arrays=`), so the common call stays cheap on a 49k vocabulary while
a draft's taps or a tokenizer to copy come back whole from the same bounds-checked walk.
Not a full reader: it returns a summary (`GGUFSummary`), not tensor data.

Reference: the GGUF specification, versions 2 and 3 (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

MAGIC = b"GGUF"
MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20
MAX_STRING = 16 << 20  # chat templates and vocab entries are far smaller
MAX_ARRAY = 1 << 26
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32

_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}


class GGUFFormatError(ValueError):
    """The file is not a well-formed GGUF. `reason` is a short machine-readable tag."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    type_name: str
    offset: int  # relative to the data section
    nbytes: int


@dataclass
class GGUFSummary:
    path: str
    version: int
    file_size: int
    # scalars and strings (str); an array as its length, or whole if asked for: a list of
    # numbers, or of bytes for strings (token texts are bytes to llama.cpp, not always UTF-8)
    metadata: dict = field(default_factory=dict)
    # key -> (value type, item type of an array or None): what a writer needs to copy a key unchanged
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = field(default_factory=dict)
    tensors: list[TensorEntry] = field(default_factory=list)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")


class _Cursor:
    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise GGUFFormatError("truncated", f"file ends inside {what} (offset {self.pos}, needs {n} bytes)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def raw_string(self, what: str) -> bytes:
        n = self.unpack("<Q", what)
        if n > MAX_STRING:
            raise GGUFFormatError("string_too_long", f"{what} claims {n} bytes (limit {MAX_STRING})")
        return self.take(n, what)

    def string(self, what: str) -> str:
        return self.raw_string(what).decode("utf-8", errors="replace")


def _value(cur: _Cursor, vtype: int, key: str, whole: bool):
    """(value, value type, item type) of one metadata value; an array is its length unless `whole`."""
    try:
        t = GGUFValueType(vtype)
    except ValueError:
        raise GGUFFormatError("bad_value_type", f"key {key!r} has unknown value type {vtype}") from None
    if t in _SCALARS:
        return cur.unpack(_SCALARS[t], f"value of {key!r}"), t, None
    if t == GGUFValueType.STRING:
        return cur.string(f"value of {key!r}"), t, None
    # ARRAY: element type, count, elements
    etype = cur.unpack("<I", f"array type of {key!r}")
    count = cur.unpack("<Q", f"array length of {key!r}")
    if count > MAX_ARRAY:
        raise GGUFFormatError("array_too_long", f"array {key!r} claims {count} items (limit {MAX_ARRAY})")
    if etype == GGUFValueType.ARRAY:
        raise GGUFFormatError("nested_array", f"array {key!r} nests arrays, which llama.cpp does not read")
    if etype in _SCALARS:
        fmt = _SCALARS[GGUFValueType(etype)]
        data = cur.take(count * struct.calcsize(fmt), f"array {key!r}")  # bounds-checked before unpacking
        return (list(struct.unpack(f"<{count}{fmt[1]}", data)) if whole else count), t, GGUFValueType(etype)
    if etype == GGUFValueType.STRING:
        # every item is read (and bounds-checked) either way; keeping them costs one list
        what = f"item of array {key!r}"
        items = [cur.raw_string(what) for _ in range(count)]
        return (items if whole else count), t, GGUFValueType(etype)
    raise GGUFFormatError("bad_value_type", f"array {key!r} has unknown item type {etype}")


def check_gguf(path: str | os.PathLike, arrays: tuple[str, ...] = ()) -> GGUFSummary:
    """Validate `path` and summarise it; raises GGUFFormatError or OSError.

    `arrays`: keys, or key prefixes (`"tokenizer.ggml."`), whose arrays come back whole
    instead of as their length.
    """
    arrays = tuple(arrays)
    path = os.fspath(path)
    size = os.path.getsize(path)
    if size < 24:
        raise GGUFFormatError("truncated", f"{size} bytes is too small for a GGUF header")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, size)
        if cur.take(4, "magic") != MAGIC:
            raise GGUFFormatError("bad_magic", "not a GGUF file (it does not start with 'GGUF')")
        version = cur.unpack("<I", "version")
        if version not in (2, 3):
            raise GGUFFormatError("bad_version", f"GGUF version {version} is not supported (2 or 3 are)")
        n_tensors = cur.unpack("<Q", "tensor count")
        n_kv = cur.unpack("<Q", "metadata count")
        if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
            raise GGUFFormatError("absurd_count", f"header claims {n_tensors} tensors and {n_kv} metadata keys")
        out = GGUFSummary(path, version, size)
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}")
            if key in out.metadata:
                raise GGUFFormatError("duplicate_key", f"metadata key {key!r} appears twice")
            whole = bool(arrays) and key.startswith(arrays)
            value, vtype, itype = _value(cur, cur.unpack("<I", f"type of {key!r}"), key, whole)
            out.metadata[key], out.types[key] = value, (vtype, itype)
        for i in range(n_tensors):
            out.tensors.append(_tensor_info(cur, i))
        align = out.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise GGUFFormatError("bad_alignment", f"general.alignment {align!r} is not a power of two")
        data_start = (cur.pos + align - 1) // align * align
        _check_layout(out.tensors, align, size - data_start)
    return out


def _tensor_info(cur: _Cursor, i: int) -> TensorEntry:
    name = cur.string(f"name of tensor #{i}")
    n_dims = cur.unpack("<I", f"dims of {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFFormatError("bad_dims", f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    shape = tuple(cur.unpack("<Q", f"shape of {name!r}") for _ in range(n_dims))
    if any(d == 0 or d > (1 << 40) for d in shape):
        raise GGUFFormatError("bad_shape", f"tensor {name!r} has shape {shape}")
    ttype = cur.unpack("<I", f"type of {name!r}")
    try:
        qtype = GGMLQuantizationType(ttype)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise GGUFFormatError("bad_tensor_type", f"tensor {name!r} has unknown type {ttype}") from None
    if shape[0] % block:
        raise GGUFFormatError("bad_shape", f"tensor {name!r}: row of {shape[0]} is not a multiple of {block}")
    n = 1
    for d in shape:
        n *= d
    offset = cur.unpack("<Q", f"offset of {name!r}")
    return TensorEntry(name, shape, qtype.name, offset, n // block * type_size)


def _check_layout(tensors: list[TensorEntry], align: int, data_size: int) -> None:
    names = set()
    end = 0
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.name in names:
            raise GGUFFormatError("duplicate_tensor", f"tensor {t.name!r} appears twice")
        names.add(t.name)
        if t.offset % align:
            raise GGUFFormatError("misaligned", f"tensor {t.name!r} at offset {t.offset} is not {align}-aligned")
        if t.offset < end:
            raise GGUFFormatError("overlap", f"tensor {t.name!r} overlaps the tensor before it")
        end = t.offset + t.nbytes
        if end > data_size:
            raise GGUFFormatError("truncated", f"tensor {t.name!r} ends past the end of the file")
