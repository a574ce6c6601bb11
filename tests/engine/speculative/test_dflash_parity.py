"""Lattice parity: a NumPy recomputation of the DFlash 2 draft (KV injection, block forward,
selector) from the draft's own weights, against what llama.cpp returns for one block.

The reference follows `src/models/dflash.cpp` of the pinned llama.cpp and rounds where
the CPU build rounds (f16 KV cache, f16 attention operands, Q8_0 activations against
SmolLM2's Q8_0 output head). Measured on this CPU: transition scores agree to ~1e-4 of
their scale, whole scores to ~3e-4 relative (without the f16/Q8_0 emulation: ~1e-2).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from engine.llama import ext
from engine.speculative.drafters.dflash import DFlashDrafter
from engine.speculative.drafters.base import SeqView
from gguf_tools.dflash import DraftConfig, random_tensors, write_dflash_draft

K, SEED, WIDTH = 16, 7, 6


def rms(x, w, eps):  # x: [..., d]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def f16(x):
    return x.astype(np.float16).astype(np.float64)


def rope_neox(x, pos, base):  # x: [T, H, D], pos: [T]
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)  # [D/2]
    ang = pos[:, None, None] * inv[None, None, :]
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)], axis=-1)


def conv(x, dyn, base, side, kernel, group):  # x: [B, E], dyn: [B, 2*kernel*G], base: [2, kernel, E]
    n, e = x.shape
    g = e // group
    coeff = dyn.reshape(n, 2, kernel, g)[:, side]  # [B, kernel, G]
    w = np.repeat(coeff, group, axis=2) + base[side][None]  # [B, kernel, E]
    out = np.zeros_like(x)
    for tap in range(min(kernel, n)):
        shifted = np.zeros_like(x)
        shifted[tap:] = x[:n - tap]
        out += w[:, tap] * shifted
    return out


def q8_0(x):  # activations as ggml quantizes them for a Q8_0 weight: blocks of 32
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    d = amax / 127.0
    q = np.round(b * np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0))
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


def reference_lattice(cfg: DraftConfig, t: dict, emb: np.ndarray, feats: np.ndarray, block: list[int]) -> np.ndarray:
    """[WIDTH, n_embd] lattice for `block` at positions P.., after injecting feats [P, n_enc]."""
    e, hd, eps = cfg.n_embd, cfg.head_dim, cfg.rms_eps
    w = {k: v.astype(np.float64) for k, v in t.items()}
    p0, n = len(feats), len(block)
    g = rms(feats.astype(np.float64) @ w["fc.weight"].T, w["enc.output_norm.weight"], eps)  # [P, E]
    pos_ctx, pos_blk = np.arange(p0, dtype=np.float64), np.arange(p0, p0 + n, dtype=np.float64)
    h = emb[block].astype(np.float64)  # [B, E] the target's token embedding
    for i in range(cfg.n_layer):
        L = lambda name: w[f"blk.{i}.{name}"]  # noqa: E731
        k_ctx = rope_neox(rms((g @ L("attn_k.weight").T).reshape(p0, -1, hd), L("attn_k_norm.weight"), eps),
                          pos_ctx, cfg.rope_freq_base)
        v_ctx = (g @ L("attn_v.weight").T).reshape(p0, -1, hd)
        x = rms(h, L("attn_norm.weight"), eps)
        dyn = x @ L("attn_conv_proj.weight").T
        x = conv(x, dyn, L("attn_conv_base"), 0, cfg.conv_kernel_size, cfg.conv_group_size)
        q = rope_neox(rms((x @ L("attn_q.weight").T).reshape(n, -1, hd), L("attn_q_norm.weight"), eps),
                      pos_blk, cfg.rope_freq_base)
        k = rope_neox(rms((x @ L("attn_k.weight").T).reshape(n, -1, hd), L("attn_k_norm.weight"), eps),
                      pos_blk, cfg.rope_freq_base)
        v = (x @ L("attn_v.weight").T).reshape(n, -1, hd)
        kk, vv = f16(np.concatenate([k_ctx, k])), f16(np.concatenate([v_ctx, v]))  # [P+B, Hkv, D] f16 cache
        rep = cfg.n_head // cfg.n_head_kv
        kk, vv = np.repeat(kk, rep, axis=1), np.repeat(vv, rep, axis=1)  # query head h reads kv head h // rep
        s = np.einsum("thd,chd->htc", f16(q), kk) / np.sqrt(hd)  # [H, B, P+B]: non-causal, every cell
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = np.einsum("htc,chd->thd", f16(s), vv).reshape(n, -1)  # [B, H*D]
        a = conv(a @ L("attn_output.weight").T, dyn, L("attn_conv_base"), 1, cfg.conv_kernel_size, cfg.conv_group_size)
        f_in = a + h
        x = rms(f_in, L("ffn_norm.weight"), eps)
        dyn = x @ L("ffn_conv_proj.weight").T
        x = conv(x, dyn, L("ffn_conv_base"), 0, cfg.conv_kernel_size, cfg.conv_group_size)
        gate, up = x @ L("ffn_gate.weight").T, x @ L("ffn_up.weight").T
        x = (gate / (1 + np.exp(-gate)) * up) @ L("ffn_down.weight").T
        h = conv(x, dyn, L("ffn_conv_base"), 1, cfg.conv_kernel_size, cfg.conv_group_size) + f_in
    hn = rms(h, w["output_norm.weight"], eps)  # [B, E]
    logits = q8_0(hn) @ emb.T.astype(np.float64)  # [B, V] tied output head = token_embd
    gate = hn @ w["selector_hidden.weight"].T  # [B, R]
    out = np.zeros((n, e))
    cands = np.argsort(-logits, axis=1)[:, :K]  # [B, K]
    for slot in range(1, n):
        prev = [block[0]] if slot == 1 else cands[slot - 1]
        cond = w["selector_predecessor.weight"][prev] * gate[slot]  # [n_pred, R]
        score = cond @ w["selector_successor.weight"][cands[slot]].T + logits[slot, cands[slot]]  # [n_pred, K]
        out[slot, :K] = cands[slot]
        out[slot, K:K + K * K] = np.broadcast_to(score, (K, K)).reshape(-1)
    return out


@pytest.mark.timeout(120)
def test_lattice_matches_numpy_reference(model_path, tmp_path):
    cfg = DraftConfig.for_target(model_path, block_size=8)
    tensors = random_tensors(cfg, seed=SEED, conv_std=0.05)
    path = tmp_path / "parity.gguf"
    write_dflash_draft(path, cfg, tensors, model_path)
    target = Model(model_path)
    ctx = Context(target, ContextConfig(n_ctx_seq=256, n_seq=1, n_batch=64, n_threads=1))
    drafter = DFlashDrafter(str(path), target)
    try:
        drafter.attach(ctx)
        toks = target.tokenize("Invoice 7: two hundred mugs, printed in red, shipped to")
        ctx.batch.clear()
        rows = [ctx.batch.add(tok, i, 0, i == len(toks) - 1) for i, tok in enumerate(toks)]
        ctx.decode(ctx.batch)
        f32p = ctypes.POINTER(ctypes.c_float)
        taps = [np.ctypeslib.as_array(ctypes.cast(ext.llama_get_embeddings_layer_inp(ctx.ptr, lid), f32p),
                                      shape=(ctx.n_batch, 576)) for lid in cfg.target_layers]
        feats = np.concatenate([tap[rows] for tap in taps], axis=1)  # [P, 5 * 576]
        drafter.observe([(0, i, r) for i, r in enumerate(rows)])
        anchor = target.tokenize(" the")[0]
        got = drafter.propose([SeqView(0, toks + [anchor], len(toks))], WIDTH - 1)[0].lattice.rows
        n_emb = int(ext.llama_model_get_tok_embd(target.ptr, None))
        emb = np.empty(n_emb, np.float32)
        ext.llama_model_get_tok_embd(target.ptr, emb.ctypes.data_as(ext._float_p))
        ref = reference_lattice(cfg, tensors, emb.reshape(-1, 576), feats, [anchor] + [cfg.mask_token_id] * (WIDTH - 1))
    finally:
        drafter.close()
        ctx.close()
        target.close()
    for slot in range(1, WIDTH):
        ids_got, ids_ref = got[slot, :K].astype(np.int64), ref[slot, :K].astype(np.int64)
        assert set(ids_got) == set(ids_ref), f"slot {slot}: candidate sets differ"
        # align both lattices by token id: candidates by this slot's ids, predecessors by the
        # previous slot's (top-K returns its ids in no particular order)
        prev = max(slot - 1, 1)
        pred_got, pred_ref = np.argsort(got[prev, :K]), np.argsort(ref[prev, :K])
        cand_got, cand_ref = np.argsort(ids_got), np.argsort(ids_ref)
        s_got = got[slot, K:K + K * K].reshape(K, K)[np.ix_(pred_got, cand_got)]  # [pred, cand]
        s_ref = ref[slot, K:K + K * K].reshape(K, K)[np.ix_(pred_ref, cand_ref)]
        # The transition part alone (the unary logit of each candidate cancels when rows are
        # centred over predecessors): measured ~1e-4 of its own scale. A transposed or
        # mis-indexed lattice is off by the whole scale.
        p_got, p_ref = s_got - s_got.mean(0), s_ref - s_ref.mean(0)
        if slot > 1:
            assert np.abs(p_got - p_ref).max() <= 1e-3 * np.abs(p_ref).max(), f"slot {slot} transitions"
        # Whole scores (unary logits ~17 through the Q8_0 head): measured <= 3e-4 relative.
        scale = np.abs(s_ref).max()
        assert np.abs(s_got - s_ref).max() <= 2e-3 * scale, f"slot {slot}: {np.abs(s_got - s_ref).max()}"
