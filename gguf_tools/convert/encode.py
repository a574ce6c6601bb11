"""Store one tensor in the output type: f32, f16, bf16 or q8_0.

`storage_type` decides the GGML type of a tensor (norms and other 1-D tensors stay F32
whatever the output type: they are tiny and llama.cpp computes norms in F32; a q8_0 row
whose length is not a multiple of 32 falls back to F16). `encode` converts the stored
array in slices of rows into one preallocated output, so the temporaries of a conversion
(float32 copies, the uint64 rounding of bf16, Q8_0's blocks) stay a few MB whatever the
tensor size. q8_0 is computed by `gguf.quants`, bit-exact with ggml's reference.

Not here: reading tensors (`safetensors_reader`) or renaming them (`llama`, `qwen3`).
"""

from __future__ import annotations

import math

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType
from gguf.quants import quantize

from .errors import ConvertError
from .safetensors_reader import to_f32

Q = GGMLQuantizationType
# --outtype -> (GGML type of the big tensors, general.file_type)
OUTTYPES: dict[str, tuple[GGMLQuantizationType, LlamaFileType]] = {
    "f32": (Q.F32, LlamaFileType.ALL_F32),
    "f16": (Q.F16, LlamaFileType.MOSTLY_F16),
    "bf16": (Q.BF16, LlamaFileType.MOSTLY_BF16),
    "q8_0": (Q.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}
_SLICE_ELEMENTS = 1 << 22  # rows converted together: ~16 MB of float32 per slice
_NUMPY_OUT = {Q.F32: np.float32, Q.F16: np.float16, Q.BF16: np.uint16}


def storage_type(gguf_name: str, shape: tuple[int, ...], outtype: str) -> GGMLQuantizationType:
    if outtype not in OUTTYPES:
        raise ConvertError(f"outtype {outtype!r} is not one of {', '.join(OUTTYPES)}")
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight"):
        return Q.F32
    qtype = OUTTYPES[outtype][0]
    block = GGML_QUANT_SIZES[qtype][0]
    if shape[-1] % block:
        return Q.F16
    return qtype


def stored_nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, type_size = GGML_QUANT_SIZES[qtype]
    return math.prod(shape[:-1]) * (shape[-1] // block) * type_size if shape else type_size


def encode(name: str, arr: np.ndarray, src_dtype: str, qtype: GGMLQuantizationType) -> np.ndarray:
    """`arr` as read from safetensors (BF16 as uint16 bits) -> the bytes GGUF stores for `qtype`.

    Returns an array whose `nbytes` equals `stored_nbytes(arr.shape, qtype)`.
    """
    # Same type in and out: no copy at all (bf16 -> bf16 keeps the exact bits).
    if (src_dtype, qtype) in (("F32", Q.F32), ("F16", Q.F16), ("BF16", Q.BF16)):
        return arr
    shape = arr.shape
    rows = arr.reshape(-1, shape[-1]) if arr.ndim >= 1 else arr.reshape(1, 1)  # [n_rows, n_cols]
    if qtype in _NUMPY_OUT:
        out = np.empty(rows.shape, dtype=_NUMPY_OUT[qtype])
    else:
        out = np.empty((rows.shape[0], stored_nbytes((rows.shape[1],), qtype)), dtype=np.uint8)
    step = max(1, _SLICE_ELEMENTS // max(1, rows.shape[1]))
    for r0 in range(0, rows.shape[0], step):
        x = to_f32(rows[r0:r0 + step], src_dtype)  # [step, n_cols] float32
        if qtype == Q.F32:
            out[r0:r0 + step] = x
        elif qtype == Q.F16:
            y = x.astype(np.float16)
            if np.isinf(y).any() and np.isfinite(x).all():
                raise ConvertError(f"tensor {name} has values beyond the float16 range (|x| > 65504). "
                                   "HINT: convert with --outtype bf16 (or f32) instead.")
            out[r0:r0 + step] = y
        else:  # BF16 (round to nearest even) and Q8_0, both from gguf.quants
            out[r0:r0 + step] = quantize(x, qtype).view(out.dtype).reshape(out[r0:r0 + step].shape)
    return out.reshape(shape) if qtype in _NUMPY_OUT else out
