"""Hostile DFlash drafts: a valid draft with its array and count keys rewritten the way a malformed file
would have them. The first is the disclosed shape (llama.cpp's DFlash loader, CWE-190 -> 787): an
unbounded `dflash.target_layers` array whose length times the hidden size wraps the 32-bit width a
feature buffer is sized from, so the copy into it writes past its end. The others are its neighbours:
every array or count the loader reads that sizes a buffer, a loop or a lattice row.

Each file keeps everything else of a valid draft, so only the rewritten key can be why it is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

TAPS = "dflash.target_layers"
I32, U32 = GGUFValueType.INT32, GGUFValueType.UINT32

# name -> (key, value, value type, element type for arrays): what each hostile draft says
HOSTILE = {
    "overlong_taps": (TAPS, [2] * (1 << 20), GGUFValueType.ARRAY, I32),  # the disclosed shape: 4 MB of valid ids
    "taps_past_any_target": (TAPS, [2] * 65, GGUFValueType.ARRAY, I32),  # more taps than llama.cpp's bound
    "taps_disagree_with_fc": (TAPS, [2, 9, 15], GGUFValueType.ARRAY, I32),  # fc.weight holds five taps' features
    "negative_tap": (TAPS, [2, 9, -7, 21, 28], GGUFValueType.ARRAY, I32),
    "tap_past_the_layer_limit": (TAPS, [2, 9, 15, 21, 1 << 30], GGUFValueType.ARRAY, I32),
    "huge_block": ("dflash.block_size", 1 << 31, U32, None),
    "block_as_an_array": ("dflash.block_size", [1] * 8, GGUFValueType.ARRAY, U32),  # a count read as its length
    "huge_top_k": ("dflash.selector_top_k", 65536, U32, None),  # K * (K + 1) wraps a uint32 to K
    "huge_conv_kernel": ("dflash.conv_kernel_size", 1 << 30, U32, None),
    "window_pattern_of_another_depth": ("dflash.attention.sliding_window_pattern", [True] * 300,
                                        GGUFValueType.ARRAY, GGUFValueType.BOOL),
}


def write_hostile(src: str | Path, dst: str | Path, name: str) -> Path:
    """`src`, a valid draft GGUF, rewritten with HOSTILE[name]'s key (added if absent), tensors unchanged."""
    key, value, vtype, sub = HOSTILE[name]
    r = GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(str(dst), arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name in ("general.architecture", key):
            continue
        types = f.types
        w.add_key_value(f.name, f.contents(), types[0], sub_type=types[1] if len(types) > 1 else None)
    w.add_key_value(key, value, vtype, sub_type=sub)
    for t in r.tensors:  # quantized rows stay bytes: written as read
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(np.asarray(t.data))
    w.close()
    return Path(dst)
