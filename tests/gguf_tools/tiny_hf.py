"""Tiny random Hugging Face checkpoints for the converter tests, and an independent reference.

- `write_checkpoint` writes config.json, safetensors (one file or shards + index, F32, F16
  or BF16), and a tiny byte-level BPE tokenizer trained with the `tokenizers` library.
- `hf_forward` is a NumPy forward pass written from the Hugging Face modeling code's
  conventions (RMSNorm, `rotate_half` RoPE with its scaling variants, GQA with a causal
  mask, SwiGLU, Qwen3's per-head q/k norms). It shares no code with gguf_tools.convert:
  it is what the converted GGUF's llama.cpp logits are checked against.
- `llama_logits` runs a GGUF through llama.cpp (F32 KV cache, so only the weights'
  storage type differs between the two sides) and returns logits for every position.
"""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": "org/tiny-llama",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu", "rope_scaling": None,
}
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "_name_or_path": "org/tiny-qwen3",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 320, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True, "hidden_act": "silu",
    "attention_bias": False, "use_sliding_window": False, "sliding_window": None, "rope_scaling": None,
}
TEXT = ("Order 42: print 300 shirts, blue ink, size M and L. Deliver to the shop by Friday. "
        "The customer asks for a proof before printing. Cut 12 panels of oak, sand and oil them. ") * 4


def head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def random_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """HF-named float32 weights, scaled so activations and logits stay O(1)."""
    rng = np.random.default_rng(seed)
    e, f, v, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], head_dim(cfg)
    h, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def lin(n_out, n_in):
        return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((v, e)).astype(np.float32),
         "model.norm.weight": norm(e)}
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = lin(v, e)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(e)
        w[p + "post_attention_layernorm.weight"] = norm(e)
        w[p + "self_attn.q_proj.weight"] = lin(h * d, e)
        w[p + "self_attn.k_proj.weight"] = lin(hkv * d, e)
        w[p + "self_attn.v_proj.weight"] = lin(hkv * d, e)
        w[p + "self_attn.o_proj.weight"] = lin(e, h * d)
        w[p + "mlp.gate_proj.weight"] = lin(f, e)
        w[p + "mlp.up_proj.weight"] = lin(f, e)
        w[p + "mlp.down_proj.weight"] = lin(e, f)
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        if cfg.get("attention_bias"):
            for k, n in (("q", h * d), ("k", hkv * d), ("v", hkv * d)):
                w[p + f"self_attn.{k}_proj.bias"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
    return w


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns by truncation (the reference uses the same rounded values)."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _relabel(path: Path, dtype: str) -> None:
    """safetensors.numpy cannot write BF16: write U16 bits, then rename the dtype in the header."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    for name, info in header.items():
        if name != "__metadata__" and info["dtype"] == "U16":
            info["dtype"] = dtype
    new = json.dumps(header).encode()
    new += b" " * (-len(new) % 8)
    path.write_bytes(struct.pack("<Q", len(new)) + new + raw[8 + n:])


def write_tokenizer(hf_dir: Path) -> int:
    """A byte-level BPE (GPT-2 pre-tokenizer) with about 300 tokens; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([TEXT], trainer)
    tok.save(str(hf_dir / "tokenizer.json"))
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": template}))
    return tok.get_vocab_size()


def write_checkpoint(hf_dir: Path, cfg: dict, weights: dict[str, np.ndarray], dtype: str = "F32",
                     shards: int = 1) -> dict[str, np.ndarray]:
    """Write a checkpoint; returns the weights as stored, in float32 (after F16/BF16 rounding)."""
    hf_dir.mkdir(parents=True, exist_ok=True)
    (hf_dir / "config.json").write_text(json.dumps(cfg, indent=1))
    n_tok = write_tokenizer(hf_dir)
    assert n_tok <= cfg["vocab_size"], (n_tok, cfg["vocab_size"])
    if dtype == "F32":
        stored = {k: v.astype(np.float32) for k, v in weights.items()}
        disk = stored
    elif dtype == "F16":
        disk = {k: v.astype(np.float16) for k, v in weights.items()}
        stored = {k: v.astype(np.float32) for k, v in disk.items()}
    else:
        disk = {k: bf16_bits(v) for k, v in weights.items()}
        stored = {k: (v.astype(np.uint32) << 16).view(np.float32) for k, v in disk.items()}
    names = sorted(disk)
    if shards == 1:
        files = {"model.safetensors": names}
    else:
        files = {f"model-{i + 1:05d}-of-{shards:05d}.safetensors": names[i::shards] for i in range(shards)}
    for fname, part in files.items():
        save_file({k: disk[k] for k in part}, str(hf_dir / fname), metadata={"format": "pt"})
        if dtype == "BF16":
            _relabel(hf_dir / fname, "BF16")
    if shards > 1:
        index = {"metadata": {"total_size": sum(v.nbytes for v in disk.values())},
                 "weight_map": {k: f for f, part in files.items() for k in part}}
        (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return stored


# -- reference forward pass (Hugging Face conventions) -------------------------------------


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _inv_freq(cfg: dict) -> np.ndarray:
    """HF's rotary inverse frequencies [head_dim/2], with the rope_scaling variants we test."""
    d = head_dim(cfg)
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "llama3":
        factor, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        inv = np.where(medium, smoothed, scaled)
    return inv


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def hf_forward(cfg: dict, w: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    """Logits [T, vocab] (float64) of a Llama/Qwen3 decoder for `tokens` at positions 0..T-1."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    t, d = len(tokens), head_dim(cfg)
    h, hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    freqs = np.arange(t)[:, None] * _inv_freq(cfg)[None, :]  # [T, D/2]
    cos, sin = np.cos(np.concatenate([freqs, freqs], -1)), np.sin(np.concatenate([freqs, freqs], -1))  # [T, D]
    causal = np.triu(np.full((t, t), -np.inf), 1)  # [T, T]
    x = w["model.embed_tokens.weight"][tokens]  # [T, E]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = _rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def proj(name, n_heads):
            y = a @ w[p + f"self_attn.{name}_proj.weight"].T + w.get(p + f"self_attn.{name}_proj.bias", 0.0)
            return y.reshape(t, n_heads, d)  # [T, heads, D]

        q, k, v = proj("q", h), proj("k", hkv), proj("v", hkv)
        if cfg["model_type"] == "qwen3":
            q = _rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = _rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos[:, None] + _rotate_half(q) * sin[:, None]
        k = k * cos[:, None] + _rotate_half(k) * sin[:, None]
        group = h // hkv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # [T, H, D]: head j uses kv j // group
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + causal  # [H, T, T]
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        att = np.einsum("hqk,khd->qhd", probs, v).reshape(t, h * d)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        m = _rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = m @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = _rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


# -- llama.cpp side ---------------------------------------------------------------------------


def llama_logits(gguf_path: Path, tokens: list[int]) -> np.ndarray:
    """Logits [T, n_vocab] from llama.cpp for `tokens` decoded as one batch at positions 0..T-1."""
    import llama_cpp

    from engine.llama.model import Model

    model = Model(gguf_path)
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_threads, p.n_threads_batch = 64, 64, 64, 2, 2
    p.type_k = p.type_v = 0  # GGML_TYPE_F32: keep K/V unrounded, so f32 weights compare tightly
    p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = llama_cpp.llama_init_from_model(model.ptr, p)
    assert ctx, "llama.cpp could not create a context"
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, i, 1, True
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(ctx, batch) == 0
        rows = [np.ctypeslib.as_array(ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, i),
                                                  ctypes.POINTER(ctypes.c_float)), shape=(model.n_vocab,)).copy()
                for i in range(len(tokens))]
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        model.close()
    return np.stack(rows)  # [T, n_vocab]
