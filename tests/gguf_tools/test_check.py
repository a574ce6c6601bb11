"""check_gguf: a valid file passes; each hostile file fails fast with its own reason."""

from __future__ import annotations

import struct
import time

import pytest
from gguf import GGUFValueType
from tiny_gguf import write_valid

from gguf_tools import GGUFFormatError, check_gguf


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def tensor_info(name: bytes, dims: tuple[int, ...], ttype: int, offset: int) -> bytes:
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, offset)


def test_valid_file_and_the_real_model_pass(tmp_path, model_path):
    write_valid(tmp_path / "ok.gguf")
    s = check_gguf(tmp_path / "ok.gguf")
    assert s.architecture == "llama" and len(s.tensors) == 2 and s.metadata["tokenizer.ggml.tokens"] == 3
    real = check_gguf(model_path)
    assert real.architecture == "llama" and len(real.tensors) == 272


def test_arrays_come_back_whole_only_when_asked(tmp_path, model_path):
    write_valid(tmp_path / "ok.gguf")
    whole = check_gguf(tmp_path / "ok.gguf", arrays=("tokenizer.",))
    assert whole.metadata["tokenizer.ggml.tokens"] == [b"a", b"b", b"c"]  # token texts stay bytes
    assert whole.metadata["general.name"] == "tiny" and whole.metadata["llama.block_count"] == 1
    assert whole.types["tokenizer.ggml.tokens"] == (GGUFValueType.ARRAY, GGUFValueType.STRING)
    assert whole.types["llama.block_count"] == (GGUFValueType.UINT32, None)
    real = check_gguf(model_path, arrays=("tokenizer.ggml.token_type", "tokenizer.ggml.tokens"))
    assert len(real.metadata["tokenizer.ggml.tokens"]) == 49152 and real.metadata["tokenizer.ggml.tokens"][2] == \
        b"<|im_end|>"
    assert real.metadata["tokenizer.ggml.token_type"][:3] == [3, 3, 3]  # control tokens
    assert real.metadata["tokenizer.ggml.merges"] == 48900  # not asked for: its length


def _valid_bytes(tmp_path) -> bytes:
    write_valid(tmp_path / "base.gguf")
    return (tmp_path / "base.gguf").read_bytes()


HOSTILE = {
    "bad_magic": lambda b: b"GGML" + b[4:],
    "bad_version": lambda b: b[:4] + struct.pack("<I", 99) + b[8:],
    "truncated_header": lambda b: b[:40],
    "truncated_data": lambda b: b[:-100],
    "absurd_count": lambda b: header(1 << 40, 1),
    "string_too_long": lambda b: header(0, 1) + struct.pack("<Q", 1 << 60) + b"x",
    "array_too_long": lambda b: header(0, 1) + gstr(b"k") + struct.pack("<IIQ", 9, 4, 1 << 62),
    "bad_value_type": lambda b: header(0, 1) + gstr(b"k") + struct.pack("<I", 77),
    "overlap": lambda b: header(2, 0) + tensor_info(b"a", (32,), 0, 0) + tensor_info(b"b", (32,), 0, 64)
    + b"\0" * (32 - (24 + 2 * 45) % 32) + b"\0" * 256,
    "misaligned": lambda b: header(1, 0) + tensor_info(b"a", (32,), 0, 8) + b"\0" * 300,
    "bad_dims": lambda b: header(1, 0) + gstr(b"a") + struct.pack("<I", 9) + b"\0" * 200,
    "bad_tensor_type": lambda b: header(1, 0) + tensor_info(b"a", (32,), 999, 0) + b"\0" * 300,
    "duplicate_key": lambda b: header(0, 2) + (gstr(b"k") + struct.pack("<II", 4, 1)) * 2,
    "duplicate_tensor": lambda b: header(2, 0) + tensor_info(b"a", (32,), 0, 0) + tensor_info(b"a", (32,), 0, 128)
    + b"\0" * 400,
    "bad_shape": lambda b: header(1, 0) + tensor_info(b"a", (32, 0), 0, 0) + b"\0" * 300,
    "huge_tensor": lambda b: header(1, 0) + tensor_info(b"a", (1 << 40, 1 << 40, 1 << 40, 1 << 40), 0, 0) + b"\0" * 300,
    "bad_alignment": lambda b: header(0, 1) + gstr(b"general.alignment") + struct.pack("<II", 4, 3) + b"\0" * 64,
    "nested_array": lambda b: header(0, 1) + gstr(b"k") + struct.pack("<IIQ", 9, 9, 1) + b"\0" * 64,
}
REASONS = {"truncated_header": "truncated", "truncated_data": "truncated", "huge_tensor": "truncated"}


@pytest.mark.parametrize("arrays", [(), ("",)], ids=["lengths", "whole"])
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_fail_cleanly_and_fast(tmp_path, name, arrays):
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(HOSTILE[name](_valid_bytes(tmp_path)))
    t0 = time.perf_counter()
    with pytest.raises(GGUFFormatError) as e:
        check_gguf(path, arrays=arrays)
    assert time.perf_counter() - t0 < 1.0
    assert e.value.reason == REASONS.get(name, name)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_inspect_says_one_line_for_each_hostile_file(tmp_path, name):
    """What a user sees: `flashdesk inspect` on each file is one `error:` line and exit status 2."""
    from gguf_tools.cli import cmd_inspect

    path = tmp_path / f"{name}.gguf"
    path.write_bytes(HOSTILE[name](_valid_bytes(tmp_path)))

    class Args:
        json = False
    Args.path = str(path)
    assert cmd_inspect(Args) == 2


def test_empty_and_text_files_fail(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "text.gguf").write_text("hello, I am not a model at all" * 10)
    for f in ("empty.gguf", "text.gguf"):
        with pytest.raises(GGUFFormatError):
            check_gguf(tmp_path / f)
