"""quantize through libllama: the real model (Q4_1) is refused without allow_requantize, then
dequantized to F16 with it; that F16 file quantizes to Q8_0 and Q4_K_M, and the results
load in llama.cpp and predict like their source. Nothing half-written is ever left at the
output path, and the log callback in place before a run is in place after it."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import pytest
from reference import greedy_with_logits
from tiny_gguf import write_valid

from gguf_tools import QuantizeFailed, QuantizeRefused, inspect_gguf, quantize
from gguf_tools.quantize import partial_path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "<|im_start|>user\nName three colours of T-shirts.<|im_end|>\n<|im_start|>assistant\n"


def current_log_callback() -> int | None:
    cb, data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(cb), ctypes.byref(data))
    return ctypes.cast(cb, ctypes.c_void_p).value


def greedy(path, n: int = 3) -> tuple[list[int], np.ndarray]:
    """n greedy tokens after PROMPT and the logits of the first (one thread: a busy CI machine
    makes ggml's spinning thread barrier crawl)."""
    from engine.llama.model import Model

    m = Model(path, n_gpu_layers=0)
    try:
        tokens, logits = greedy_with_logits(m, m.tokenize(PROMPT), n, n_threads=1, n_ctx=256)
        return tokens, logits[0]
    finally:
        m.close()


@pytest.fixture(scope="module")
def f16(model_path, tmp_path_factory):
    """The test model dequantized to F16 (a requantize: every weight tensor changes type)."""
    dst = tmp_path_factory.mktemp("quant") / "smollm2-f16.gguf"
    seen = []
    report = quantize(model_path, dst, "F16", threads=2, allow_requantize=True,
                      progress=lambda done, total: seen.append((done, total)))
    return dst, report, seen


def test_already_quantized_input_is_refused_and_nothing_written(model_path, tmp_path):
    dst = tmp_path / "again.gguf"
    with pytest.raises(QuantizeRefused, match=r"already Q4_1; quantizing it again loses quality\. HINT: start "
                                              r"from the F16/F32 file, or pass --allow-requantize"):
        quantize(model_path, dst, "Q8_0")
    assert not dst.exists() and not Path(partial_path(dst)).exists()


def test_dequantize_to_f16_with_allow_requantize(f16, model_path):
    dst, report, seen = f16
    assert report.requantized and report.qtype == "F16" and report.n_tensors == 272
    assert report.tensor_types == {"F16": 211, "F32": 61}  # norms stay F32
    assert report.output_bytes == dst.stat().st_size and report.input_bytes == Path(model_path).stat().st_size
    assert 2.5 < report.ratio < 3.0
    assert seen[0] == (0, 272) and seen[-1] == (272, 272)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert not Path(partial_path(dst)).exists()
    r = inspect_gguf(dst)
    assert r["quantization"] == "F16" and r["parameters"] == inspect_gguf(model_path)["parameters"]
    assert r["chat_template"]["present"] and r["tokenizer"]["vocab_size"] == 49152
    ours, ours_logits = greedy(dst)
    orig, orig_logits = greedy(model_path)
    assert ours == orig  # same model, other numerics (F16 dot products)
    assert np.abs(ours_logits - orig_logits).max() < 2.0


def test_f16_to_q8_0_loads_and_predicts_like_its_source(f16, tmp_path):
    src, _, _ = f16
    before = current_log_callback()
    dst = tmp_path / "smollm2-q8_0.gguf"
    report = quantize(src, dst, "q8_0", threads=2)
    assert current_log_callback() == before
    assert not report.requantized and report.qtype == "Q8_0" and 0.5 < report.ratio < 0.56
    assert inspect_gguf(dst)["quantization"] == "Q8_0"
    q8, q8_logits = greedy(dst)
    ref, ref_logits = greedy(src)
    assert q8 == ref  # "1. Red"; the 4th token is a near-tie that Q8_0 flips
    assert np.corrcoef(q8_logits, ref_logits)[0, 1] > 0.995


def test_existing_output_needs_force(f16, tmp_path):
    src, _, _ = f16
    dst = tmp_path / "taken.gguf"
    dst.write_bytes(b"keep me")
    with pytest.raises(QuantizeRefused, match="already exists. HINT: pass --force"):
        quantize(src, dst, "Q8_0", threads=2)
    assert dst.read_bytes() == b"keep me"
    with pytest.raises(QuantizeRefused, match="is the input file"):
        quantize(src, src, "Q8_0", force=True)
    with pytest.raises(QuantizeRefused, match="unknown type 'IQ2_XS'"):
        quantize(src, tmp_path / "x.gguf", "IQ2_XS")


def test_cancel_from_progress_leaves_nothing(f16, tmp_path):
    """llama.cpp cannot stop mid-way; the exception surfaces when it returns, and no output remains."""
    src, _, _ = f16
    dst = tmp_path / "cancelled.gguf"

    def progress(done, total):
        if done == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize(src, dst, "Q8_0", threads=2, progress=progress)
    assert not dst.exists() and not Path(partial_path(dst)).exists()


def test_llama_cpp_failure_is_reported_forwarded_and_cleaned_up(tmp_path):
    """A structurally valid GGUF that is no model: llama.cpp refuses it. Its error line reaches the
    callback that was installed before (the engine's, in a server), which is put back afterwards."""
    src, dst = tmp_path / "nomodel.gguf", tmp_path / "out.gguf"
    write_valid(src)
    got = []

    @llama_cpp.llama_log_callback
    def recorder(level, text, user_data):
        got.append((level, text.decode()))

    before, before_data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(before), ctypes.byref(before_data))
    llama_cpp.llama_log_set(recorder, None)
    try:
        with pytest.raises(QuantizeFailed, match="key not found in model: llama.context_length"):
            quantize(src, dst, "Q8_0")
        assert current_log_callback() == ctypes.cast(recorder, ctypes.c_void_p).value
    finally:
        llama_cpp.llama_log_set(before, before_data)  # whatever the earlier tests had installed
    assert any(level == 4 and "failed to quantize" in text for level, text in got)
    assert not any("[   1/" in text for _, text in got)  # info lines are not forwarded
    assert not dst.exists() and not Path(partial_path(dst)).exists()


def test_cli_quantize_to_q4_k_m_with_load_check(f16, tmp_path):
    src, _, _ = f16
    dst = tmp_path / "smollm2-q4_k_m.gguf"
    cmd = [sys.executable, "-m", "server.cli", "quantize", str(src), str(dst), "--type", "Q4_K_M", "--threads", "2"]
    out = subprocess.run([*cmd, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["loads"] and r["qtype"] == "Q4_K_M" and r["output_bytes"] == dst.stat().st_size
    assert r["fallback_tensors"] > 0  # 576-wide rows are not a multiple of the K-quant block of 256
    assert inspect_gguf(dst)["quantization"] == "Q4_K_M"
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and again.stderr.strip().count("\n") == 0 and "--force" in again.stderr


def test_gguf_tools_stays_light():
    code = "import sys, gguf_tools, gguf_tools.cli; print(sorted({'llama_cpp', 'engine'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
