"""Issue 7's round-trip proof on the real default model (SmolLM2-135M-Instruct Q4_1).

GGUF -> `export_hf` (dequantized safetensors, tokenizer.json rebuilt from the GGUF's
vocabulary and merges, config.json) -> `convert_hf` at f32 -> GGUF again. Shown here:
- the rebuilt tokenizer.json tokenizes every dev prompt exactly like llama.cpp does;
- the round-trip GGUF carries the same tokenizer metadata and tokenizes identically;
- its f32 weights are bit-equal to the original's dequantized weights (q/k rotary order
  restored both ways), and quantizing them back to Q4_1 gives the original bytes;
- the fair "original at f32" is llama.cpp's own f32 dequantization of the original file:
  the round trip equals it byte for byte, so greedy output and logits are identical;
- against the Q4_1 file itself, logits are only near: it multiplies Q4_1 weights with
  activations llama.cpp quantizes to Q8_1, the f32 file multiplies in f32.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest
from tokenizers import Tokenizer

from conftest import dev_prompts
from reference import greedy_with_logits
from engine.llama.chat_template import ChatTemplate
from engine.llama.model import Model, init_backend
from gguf_tools import check_gguf
from gguf_tools.convert import convert_hf
from gguf_tools.export_hf import export_hf

GREEDY_PROMPTS = 3
GREEDY_TOKENS = 24
LOGIT_PROMPTS = 8
LOGIT_RELATIVE_TOLERANCE = 0.08  # measured 0.037 at most over all dev prompts (Q4_1 vs f32 kernels)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, model_path):
    """The exported HF folder; its parent also holds this module's GGUFs (~1.7 GB, removed after)."""
    work = tmp_path_factory.mktemp("roundtrip")
    t0 = time.perf_counter()
    report = export_hf(model_path, work / "hf")
    print(f"\nexport_hf: {time.perf_counter() - t0:.1f} s, {report.bytes_written / 1e6:.0f} MB of safetensors")
    yield work / "hf"
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def original(target_model):
    """The model the round trip starts from."""
    return target_model


@pytest.fixture(scope="module")
def texts(original) -> list[str]:
    """Every dev prompt as the model sees it (chat template applied) and each message alone."""
    chat = ChatTemplate(original)
    out = []
    for p in dev_prompts():
        out.append(chat.render(p["messages"]))
        out.extend(m["content"] for m in p["messages"])
    return out


def test_rebuilt_tokenizer_json_tokenizes_every_dev_prompt_like_llama_cpp(exported, original, texts):
    tok = Tokenizer.from_file(str(exported / "tokenizer.json"))
    assert tok.get_vocab_size() == original.n_vocab
    for text in texts:
        assert tok.encode(text, add_special_tokens=False).ids == original.tokenize(text, add_bos=False), text[:80]


def test_exported_config_describes_the_model(exported):
    cfg = json.loads((exported / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["vocab_size"]) == (576, 30, 9, 3, 49152)
    assert cfg["tie_word_embeddings"] is True and cfg["rms_norm_eps"] == 1e-5 and cfg["rope_theta"] == 100000.0
    tcfg = json.loads((exported / "tokenizer_config.json").read_text())
    assert tcfg["eos_token"] == "<|im_end|>" and tcfg["add_bos_token"] is False
    assert "<|im_start|>" in tcfg["chat_template"]


# -- back to GGUF with the converter -------------------------------------------------------


@pytest.fixture(scope="module")
def roundtrip(exported) -> Path:
    out = exported.parent / "roundtrip-f32.gguf"
    t0 = time.perf_counter()
    convert_hf(exported, out, outtype="f32")
    print(f"\nconvert_hf f32: {time.perf_counter() - t0:.1f} s")
    return out


@pytest.fixture(scope="module")
def roundtrip_model(roundtrip):
    m = Model(roundtrip)
    yield m
    m.close()


def test_roundtrip_keeps_the_tokenizer_metadata(model_path, roundtrip):
    a, b = ({k: v for k, v in check_gguf(p, arrays=("tokenizer.",)).metadata.items() if k.startswith("tokenizer.")}
            for p in (model_path, roundtrip))
    b.pop("tokenizer.ggml.add_eos_token")  # the converter always writes it; the original leaves it out (false)
    assert a == b


def _llama_quantize(src: Path | str, dst: Path, ftype: int, **params) -> Path:
    """libllama's own quantizer (what `llama-quantize` runs), for references independent of ours."""
    init_backend()
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.nthread = ftype, 2
    for key, value in params.items():
        setattr(p, key, value)
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p) == 0
    return dst


@pytest.fixture(scope="module")
def original_f32(model_path, exported) -> Path:
    """The original at f32, dequantized by llama.cpp itself (no code of ours involved)."""
    return _llama_quantize(model_path, exported.parent / "original-f32.gguf", llama_cpp.LLAMA_FTYPE_ALL_F32,
                           allow_requantize=True)


def test_roundtrip_weights_are_the_dequantized_original(model_path, original_f32, roundtrip):
    """Bit-equal to the original's tensors dequantized by gguf-py and by llama.cpp's C code
    (which also proves export and convert undo each other's q/k rotary reordering)."""
    a, b, c = (gguf.GGUFReader(str(p)) for p in (model_path, roundtrip, original_f32))
    ours, theirs = {t.name: t for t in b.tensors}, {t.name: t for t in c.tensors}
    assert sorted(ours) == sorted(t.name for t in a.tensors)
    for t in a.tensors:
        assert ours[t.name].tensor_type == gguf.GGMLQuantizationType.F32
        got = np.asarray(ours[t.name].data)
        assert np.array_equal(got.reshape(-1), gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)), t.name
        assert got.tobytes() == np.asarray(theirs[t.name].data).tobytes(), t.name


def test_requantizing_the_roundtrip_gives_the_original_bytes(model_path, roundtrip, tmp_path):
    """Q4_1 (and the Q8_0 embedding) of the exact dequantized values is the original encoding."""
    out = _llama_quantize(roundtrip, tmp_path / "requant-q4_1.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1,
                          token_embedding_type=int(gguf.GGMLQuantizationType.Q8_0))  # as in the original
    a, b = gguf.GGUFReader(model_path), gguf.GGUFReader(str(out))
    ours = {t.name: t for t in b.tensors}
    for t in a.tensors:
        assert ours[t.name].tensor_type == t.tensor_type, t.name
        assert np.asarray(ours[t.name].data).tobytes() == np.asarray(t.data).tobytes(), t.name


def test_roundtrip_tokenizes_every_dev_prompt_identically(original, roundtrip_model, texts):
    for text in texts:
        assert roundtrip_model.tokenize(text) == original.tokenize(text), text[:80]
    assert roundtrip_model.chat_template() == original.chat_template()


def _some_prompts(n: int) -> list[dict]:
    ps = dev_prompts()
    return ps[:: max(1, len(ps) // n)][:n]


def test_greedy_output_and_logits_equal_the_original_at_f32(original, original_f32, roundtrip_model):
    chat = ChatTemplate(original)
    reference = Model(original_f32)
    try:
        for p in _some_prompts(GREEDY_PROMPTS):
            prompt = original.tokenize(chat.render(p["messages"]))
            a_tokens, a_logits = greedy_with_logits(reference, prompt, GREEDY_TOKENS)
            b_tokens, b_logits = greedy_with_logits(roundtrip_model, prompt, GREEDY_TOKENS)
            assert b_tokens == a_tokens, (p["id"], reference.detokenize(a_tokens), roundtrip_model.detokenize(b_tokens))
            assert len(a_tokens) >= 8
            assert np.array_equal(a_logits, b_logits), (p["id"], float(np.abs(a_logits - b_logits).max()))
    finally:
        reference.close()


def test_logits_are_near_the_q4_1_original(original, roundtrip_model):
    """Same weights, different kernels: llama.cpp multiplies Q4_1 weights by activations it
    quantizes to Q8_1, so the Q4_1 file's logits only approximate the f32 ones, and greedy
    paths may part at a near tie (measured over the 60 dev prompts: first-token logits
    differ by at most 1.09, median 0.67, 3.7% of the largest logit; argmax agrees on 55/60;
    dev-001 parts at its 2nd token, dev-016 at its 10th)."""
    chat = ChatTemplate(original)
    diffs, agree = [], 0
    prompts = _some_prompts(LOGIT_PROMPTS)
    for p in prompts:
        prompt = original.tokenize(chat.render(p["messages"]))
        (a_token,), a_logits = greedy_with_logits(original, prompt, 1)
        (b_token,), b_logits = greedy_with_logits(roundtrip_model, prompt, 1)
        diffs.append(float(np.abs(a_logits - b_logits).max() / np.abs(a_logits).max()))
        agree += a_token == b_token
    print(f"\nQ4_1 vs round-trip f32, first token of {len(prompts)} prompts: argmax agrees on {agree}, "
          f"max |logit diff| / max |logit| = {max(diffs):.4f}")
    assert max(diffs) < LOGIT_RELATIVE_TOLERANCE
    assert agree >= len(prompts) - 2


def test_the_commands_do_the_same(model_path, tmp_path):
    """`flashdesk export-hf`, `convert` and `inspect` as a user types them."""
    def flashdesk(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "server.cli", *args], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=600)

    hf = tmp_path / "hf"
    r = flashdesk("export-hf", model_path, str(hf), "--dtype", "bfloat16")
    assert r.returncode == 0, r.stderr
    assert (hf / "model.safetensors").is_file() and (hf / "tokenizer.json").is_file()
    out = tmp_path / "smol-q8.gguf"
    r = flashdesk("convert", str(hf), "--out", str(out), "--outtype", "q8_0")
    assert r.returncode == 0, r.stderr
    assert "llama" in r.stdout
    r = flashdesk("inspect", str(out), "--json")
    info = json.loads(r.stdout)
    assert info["architecture"] == "llama" and info["tokenizer"]["vocab_size"] == 49152
    assert info["quantization"] == "Q8_0" and info["tokenizer"]["pre"] == "smollm"
    r = flashdesk("convert", str(hf), "--out", str(out))  # never replaces a file without --force
    assert r.returncode == 2 and "error:" in r.stderr
    r = flashdesk("export-hf", model_path, str(hf))  # nor writes into a folder that is not empty
    assert r.returncode == 2 and "error:" in r.stderr
