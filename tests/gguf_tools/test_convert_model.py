"""Hugging Face -> GGUF conversion: llama.cpp's logits of the converted file match an
independent NumPy forward pass of the same HF weights (tests/gguf_tools/tiny_hf.py).

Also: sharded == single-file output, BF16 sources, f16/bf16/q8_0 outputs close to f32,
clear refusals, output-file handling, the CLI, and bounded memory on a ~340 MB model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from gguf_tools.convert import ConvertError, convert_hf, default_out_path, llama
from gguf_tools.convert.cli import add_convert_parser

import tiny_hf as T  # tests/gguf_tools is on sys.path (pytest rootdir-relative imports, like tiny_gguf)

TOKENS = [5, 17, 200, 3, 99, 250, 1, 42, 7, 299, 11, 64, 128, 31]  # positions 0..13
ROOT = Path(__file__).resolve().parents[2]


def cfg_of(base: dict, **over) -> dict:
    return json.loads(json.dumps(base)) | over  # a deep copy with overrides


def checkpoint(tmp_path: Path, cfg: dict, dtype: str = "F32", shards: int = 1, name: str = "hf", seed: int = 0):
    weights = T.random_weights(cfg, seed)
    return tmp_path / name, T.write_checkpoint(tmp_path / name, cfg, weights, dtype, shards)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got[:, :ref.shape[1]] - ref).max() / np.abs(ref).max())


def tensors(path: Path) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def field(path: Path, key: str):
    f = gguf.GGUFReader(path).fields[key]
    return f.contents()


CASES = {
    "llama": T.LLAMA,
    # Tied embeddings, llama3 rope scaling (one frequency kept, one blended, six divided) and
    # q/k/v biases, whose rows are reordered like the weights'.
    "llama-tied-llama3rope-bias": cfg_of(T.LLAMA, tie_word_embeddings=True, attention_bias=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32}),
    "mistral-linear-rope": cfg_of(T.LLAMA, architectures=["MistralForCausalLM"], model_type="mistral",
                                  sliding_window=None, rope_scaling={"type": "linear", "factor": 2.0}),
    "qwen3": T.QWEN3,
}


@pytest.mark.parametrize("case", CASES)
def test_f32_logits_match_numpy_reference(tmp_path, case):
    cfg = CASES[case]
    hf_dir, weights = checkpoint(tmp_path, cfg)
    report = convert_hf(hf_dir, outtype="f32")
    ref = T.hf_forward(cfg, weights, TOKENS)
    got = T.llama_logits(report.path, TOKENS)
    assert got.shape == (len(TOKENS), cfg["vocab_size"])
    assert rel_err(got, ref) < 1e-4, rel_err(got, ref)
    assert (got.argmax(-1) == ref.argmax(-1)).all()

    names = tensors(report.path)
    assert ("output.weight" in names) == (not cfg["tie_word_embeddings"])  # tied: llama.cpp reuses token_embd
    assert ("rope_freqs.weight" in names) == (case == "llama-tied-llama3rope-bias")
    arch = report.arch
    assert field(report.path, "general.architecture") == arch == ("qwen3" if case == "qwen3" else "llama")
    assert field(report.path, f"{arch}.rope.dimension_count") == T.head_dim(cfg)
    assert field(report.path, f"{arch}.attention.head_count_kv") == 2
    assert field(report.path, "general.file_type") == gguf.LlamaFileType.ALL_F32
    if arch == "qwen3":  # head_dim 32 != 64 / 4: only key_length tells llama.cpp
        assert field(report.path, "qwen3.attention.key_length") == 32


def test_reference_catches_a_missing_rope_reorder(tmp_path, monkeypatch):
    """The comparison is sharp enough to see Llama's q/k row reorder: without it, logits differ."""
    hf_dir, weights = checkpoint(tmp_path, T.LLAMA)
    monkeypatch.setattr(llama, "transform", lambda name, x, m: x)
    report = convert_hf(hf_dir, outtype="f32")
    assert rel_err(T.llama_logits(report.path, TOKENS), T.hf_forward(T.LLAMA, weights, TOKENS)) > 0.05


def test_sharded_checkpoint_gives_the_identical_file(tmp_path):
    single, _ = checkpoint(tmp_path, T.QWEN3, name="single")
    sharded, _ = checkpoint(tmp_path, T.QWEN3, shards=2, name="sharded")
    assert len(list(sharded.glob("model-*-of-00002.safetensors"))) == 2
    a = convert_hf(single, tmp_path / "a.gguf", "f16")
    b = convert_hf(sharded, tmp_path / "b.gguf", "f16")
    assert a.path.read_bytes() == b.path.read_bytes()


@pytest.mark.parametrize("base", [T.LLAMA, T.QWEN3], ids=["llama", "qwen3"])
def test_bf16_source(tmp_path, base):
    hf_dir, weights = checkpoint(tmp_path, base, dtype="BF16")
    f32 = convert_hf(hf_dir, outtype="f32")
    assert rel_err(T.llama_logits(f32.path, TOKENS), T.hf_forward(base, weights, TOKENS)) < 1e-4
    # bf16 -> bf16 keeps the exact bits (checked on a tensor the converter does not reorder).
    bf16 = convert_hf(hf_dir, outtype="bf16")
    t = tensors(bf16.path)["blk.1.ffn_up.weight"]
    assert t.tensor_type == gguf.GGMLQuantizationType.BF16
    assert bytes(t.data.tobytes()) == T.bf16_bits(weights["model.layers.1.mlp.up_proj.weight"]).tobytes()


# Measured over 3 seeds x 2 architectures: f16 <= 0.09%, bf16 <= 0.7%, q8_0 <= 2.0% of the largest logit
# (llama.cpp also rounds activations to 8 bits for q8_0 matmuls on CPU).
@pytest.mark.parametrize("outtype,tol", [("f16", 3e-3), ("bf16", 2e-2), ("q8_0", 5e-2)])
def test_smaller_outtypes_load_and_stay_close_to_f32(tmp_path, outtype, tol):
    # intermediate_size 80: ffn_down rows are not a multiple of 32, so q8_0 keeps it in f16.
    cfg = cfg_of(T.LLAMA, intermediate_size=80)
    hf_dir, weights = checkpoint(tmp_path, cfg)
    f32_report = convert_hf(hf_dir, outtype="f32")
    f32 = T.llama_logits(f32_report.path, TOKENS)
    report = convert_hf(hf_dir, outtype=outtype)
    got = T.llama_logits(report.path, TOKENS)
    err = rel_err(got, f32)
    assert err < tol, err
    assert (got.argmax(-1) == f32.argmax(-1)).mean() >= 0.8

    want = {"f16": gguf.GGMLQuantizationType.F16, "bf16": gguf.GGMLQuantizationType.BF16,
            "q8_0": gguf.GGMLQuantizationType.Q8_0}[outtype]
    ts = tensors(report.path)
    assert ts["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32  # norms stay f32
    assert ts["blk.0.attn_q.weight"].tensor_type == want
    assert ts["token_embd.weight"].tensor_type == want
    if outtype == "q8_0":
        assert ts["blk.0.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.F16
        assert report.f16_fallbacks == ("blk.0.ffn_down.weight", "blk.1.ffn_down.weight")
        # The encoding itself: each value within half a step (block max / 127 / 2) of the source.
        t = ts["blk.1.attn_v.weight"]
        src = weights["model.layers.1.self_attn.v_proj.weight"]  # [n_kv * head_dim, n_embd]
        deq = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(src.shape)
        step = np.abs(src.reshape(-1, 32)).max(-1, keepdims=True) / 127
        assert (np.abs(deq - src).reshape(-1, 32) <= step * (0.5 + 127 * 2.0**-11)).all()
    assert report.file_bytes < f32_report.file_bytes


def test_unsupported_architecture_names_the_supported_ones(tmp_path):
    hf_dir, _ = checkpoint(tmp_path, T.LLAMA)
    (hf_dir / "config.json").write_text(json.dumps(cfg_of(T.LLAMA, architectures=["GPT2LMHeadModel"],
                                                          model_type="gpt2")))
    with pytest.raises(ConvertError) as e:
        convert_hf(hf_dir)
    msg = str(e.value)
    assert "GPT2LMHeadModel" in msg and "not supported" in msg
    assert "LlamaForCausalLM" in msg and "Qwen3ForCausalLM" in msg and "HINT" in msg


REFUSALS = {
    "yarn rope": (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "'yarn' is not supported"),
    "sliding window": (dict(architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16),
                       "sliding-window"),
    "prequantized": (dict(quantization_config={"quant_method": "gptq"}), "already quantized"),
    "gelu": (dict(hidden_act="gelu"), "hidden_act"),
    "shape": (dict(intermediate_size=96), "config.json implies"),
    "llama3 rope on qwen3": (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "not supported yet for qwen3"),
}


@pytest.mark.parametrize("what", REFUSALS)
def test_config_refusals(tmp_path, what):
    over, words = REFUSALS[what]
    base = T.QWEN3 if "qwen3" in what else T.LLAMA
    hf_dir, _ = checkpoint(tmp_path, base)
    (hf_dir / "config.json").write_text(json.dumps(cfg_of(base, **over)))
    with pytest.raises(ConvertError, match=words):
        convert_hf(hf_dir)
    assert not list(hf_dir.glob("*.gguf*"))  # refused before any output existed


def _drop(hf_dir: Path, name: str, extra: dict | None = None) -> None:
    from safetensors.numpy import load_file, save_file

    w = load_file(str(hf_dir / "model.safetensors"))
    w.pop(name, None)
    save_file(w | (extra or {}), str(hf_dir / "model.safetensors"))


def test_checkpoint_refusals(tmp_path):
    hf_dir, _ = checkpoint(tmp_path, T.LLAMA)
    _drop(hf_dir, "model.layers.1.mlp.up_proj.weight")
    with pytest.raises(ConvertError, match="lacks blk.1.ffn_up.weight"):
        convert_hf(hf_dir)

    hf_dir, _ = checkpoint(tmp_path, T.LLAMA, name="extra")
    _drop(hf_dir, "", {"vision_tower.proj.weight": np.zeros((4, 4), np.float32)})
    with pytest.raises(ConvertError, match="vision_tower.proj.weight.*no place"):
        convert_hf(hf_dir)

    hf_dir, _ = checkpoint(tmp_path, T.LLAMA, name="inv_freq")  # old checkpoints carry it: ignored
    _drop(hf_dir, "", {"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(8, np.float32)})
    assert convert_hf(hf_dir).n_tensors == 21

    hf_dir, _ = checkpoint(tmp_path, T.LLAMA, name="cut")
    st = hf_dir / "model.safetensors"
    st.write_bytes(st.read_bytes()[:-1000])
    with pytest.raises(ConvertError, match="incomplete"):
        convert_hf(hf_dir)

    st.unlink()
    (hf_dir / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ConvertError, match="no safetensors.*pytorch_model.bin.*PyTorch"):
        convert_hf(hf_dir)

    with pytest.raises(ConvertError, match="no config.json"):
        convert_hf(tmp_path)
    with pytest.raises(ConvertError, match="outtype 'q4_0'"):
        convert_hf(hf_dir, outtype="q4_0")


def test_output_file_handling(tmp_path, monkeypatch):
    hf_dir, _ = checkpoint(tmp_path, T.LLAMA)
    out = default_out_path(hf_dir, "f16")
    assert out == hf_dir / "tiny-llama-f16.gguf"
    seen: list[tuple[int, int]] = []
    report = convert_hf(hf_dir, progress=lambda done, total: seen.append((done, total)))
    assert report.path == out and out.is_file()
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] == report.source_bytes
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))

    with pytest.raises(ConvertError, match="already exists.*--force"):
        convert_hf(hf_dir)
    before = out.read_bytes()

    # A failure mid-way leaves neither a .partial nor a damaged OUT behind.
    import gguf_tools.convert.convert as driver

    def boom(name, *a):
        if name == "blk.1.ffn_up.weight":
            raise ConvertError("disk trouble")
        return real(name, *a)

    real = driver.encode
    monkeypatch.setattr(driver, "encode", boom)
    with pytest.raises(ConvertError, match="disk trouble"):
        convert_hf(hf_dir, force=True)
    assert out.read_bytes() == before
    assert not out.with_name(out.name + ".partial").exists()
    monkeypatch.undo()
    assert convert_hf(hf_dir, force=True).path == out


def test_cli(tmp_path, capsys):
    hf_dir, _ = checkpoint(tmp_path, T.QWEN3)
    p = argparse.ArgumentParser(prog="flashdesk")
    add_convert_parser(p.add_subparsers(dest="command"))
    out = tmp_path / "q.gguf"
    a = p.parse_args(["convert", str(hf_dir), "--out", str(out), "--outtype", "q8_0"])
    assert a.func(a) == 0
    assert out.is_file() and "qwen3 tiny-qwen3" in capsys.readouterr().out
    assert a.func(a) == 2
    assert "already exists" in capsys.readouterr().err
    a = p.parse_args(["convert", str(hf_dir), "--out", str(out), "--outtype", "q8_0", "--force"])
    assert a.func(a) == 0


BIG = cfg_of(T.LLAMA, _name_or_path="org/big-llama", hidden_size=1024, intermediate_size=2816,
             num_hidden_layers=12, num_attention_heads=16, num_key_value_heads=4, vocab_size=16384,
             tie_word_embeddings=False)
_MEASURE = """
import json, resource, sys
from gguf_tools.convert import convert_hf
r = convert_hf(sys.argv[1], sys.argv[2], sys.argv[3]) if sys.argv[1] != "-" else None
# VmHWM is this process's own peak; ru_maxrss also counts the parent's RSS at fork (Linux keeps
# it across exec), which is the test process holding the generated weights.
try:
    hwm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
except OSError:
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_rss": hwm, "seconds": r and r.seconds, "source": r and r.source_bytes,
                  "file": r and r.file_bytes}))
"""


def _measure(*argv: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
def test_memory_stays_bounded_on_a_bigger_model(tmp_path):
    """~340 MB BF16 checkpoint (168M parameters): the converter's peak RSS is the import
    baseline plus a few copies of the largest tensor, far below the model size."""
    rng = np.random.default_rng(1)
    hf_dir = tmp_path / "big"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps(BIG))
    T.write_tokenizer(hf_dir)
    from safetensors.numpy import save_file

    e, f, v, hd = BIG["hidden_size"], BIG["intermediate_size"], BIG["vocab_size"], T.head_dim(BIG)
    kv = BIG["num_key_value_heads"] * hd
    shard = {"model.embed_tokens.weight": (v, e), "lm_head.weight": (v, e), "model.norm.weight": (e,)}
    for i in range(BIG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shard |= {p + "input_layernorm.weight": (e,), p + "post_attention_layernorm.weight": (e,),
                  p + "self_attn.q_proj.weight": (e, e), p + "self_attn.k_proj.weight": (kv, e),
                  p + "self_attn.v_proj.weight": (kv, e), p + "self_attn.o_proj.weight": (e, e),
                  p + "mlp.gate_proj.weight": (f, e), p + "mlp.up_proj.weight": (f, e),
                  p + "mlp.down_proj.weight": (e, f)}
    weights = {k: T.bf16_bits(0.02 * rng.standard_normal(s, dtype=np.float32)) for k, s in shard.items()}
    save_file(weights, str(hf_dir / "model.safetensors"))
    model_bytes = sum(w.nbytes for w in weights.values())
    del weights
    T._relabel(hf_dir / "model.safetensors", "BF16")

    base = _measure("-")
    runs = {t: _measure(str(hf_dir), str(tmp_path / f"big-{t}.gguf"), t) for t in ("f16", "q8_0")}
    largest = v * e * 4  # the embedding as float32
    lines = [f"model {model_bytes / 1e6:.0f} MB bf16, import baseline {base['peak_rss'] / 1e6:.0f} MB"]
    for t, r in runs.items():
        lines.append(f"{t}: {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / 1e6:.0f} MB, file {r['file'] / 1e6:.0f} MB")
        assert r["source"] == model_bytes
        assert r["peak_rss"] < base["peak_rss"] + 3 * largest, lines
        assert r["peak_rss"] < 0.75 * model_bytes, lines
    print("\n".join(lines))
    (tmp_path / "measurements.txt").write_text("\n".join(lines))
