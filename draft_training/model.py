"""The DFlash 2 draft in PyTorch: what llama.cpp's `dflash` graph computes, trainable.

What it is: `DFlashDraft`, whose parameters carry the GGUF tensor names and NumPy shapes
of `gguf_tools.dflash.tensor_shapes` (so export is a copy), and whose forward
follows the pinned llama.cpp `src/models/dflash.cpp` op by op:
- KV injection: g = rms(fc(features)) * enc.output_norm; per layer K = rope(k_norm(W_k g)),
  V = W_v g (no attn_norm on the injected rows);
- block [anchor, mask, ...]: x = target token_embd; per layer an attention and an MLP
  sub-block, each wrapped in the dual-tap dynamic convolution (side 0 on its input, side 1
  on its output, coefficients = conv_proj(normed input) + conv_base, causal along the
  block, zero left padding); queries see every injected position before the anchor and
  their whole block (non-causal);
- head: rms(x) * output_norm @ the target's frozen output matrix (or the kept rows of a
  reduced vocabulary, `d2t`), then the selector: top-K candidates per slot, and
  score[a][b] = unary(b) + <selector_predecessor[a] * selector_hidden(h), selector_successor[b]>.
RoPE is NEOX style (pairs i, i + d/2), as llama.cpp applies it for this architecture.
The optional `DraftConfig` settings (sliding window per layer, embedding / attention / value /
logit scales, logit soft-capping, GELU) are applied where dflash.cpp applies them (see
gguf_tools/dflash/write.py's module doc); with their defaults the forward is the plain one.

Features are scaled per channel by a fixed `feat_scale` before `fc` (SmolLM2's deep taps
carry massive activations): export folds it into `fc.weight`, so llama.cpp sees plain fc.

Selector codebooks (`codebooks`): "free" trains the [V, R] tables themselves; "factorised"
trains projections P [E, R] of the frozen target token embedding, table = emb @ P
(docs/training.md: free rows only learn the few thousand tokens the data
shows, a projection generalises to every token). Training gathers rows first
(emb[ids] @ P); export materialises the tables, so the GGUF layout is the same.
What it is not: the loss (`loss.py`) or the data pipeline. Tests: tests/draft_training/
test_parity.py compares this module with llama.cpp through the engine.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from gguf_tools.dflash import DraftConfig, tensor_shapes

CODEBOOKS = ("free", "factorised")
CODEBOOK_TABLES = ("selector_predecessor.weight", "selector_successor.weight")


def proj_name(table: str) -> str:
    """Parameter name of the projection that makes a factorised codebook table."""
    return table.replace(".weight", ".proj")


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_neox(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """x [..., T, H, D] rotated at positions pos [..., T] (pairs i, i + D/2)."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)  # [D/2]
    ang = (pos.to(torch.float64)[..., None] * inv).to(x.dtype)[..., None, :]  # [..., T, 1, D/2]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def dyn_conv(x: torch.Tensor, dyn: torch.Tensor, base: torch.Tensor, side: int, kernel: int,
             group: int) -> torch.Tensor:
    """Dual-tap dynamic convolution along the block. x [..., B, E]; dyn [..., B, 2*kernel*G]
    laid out [side, tap, group]; base [2, kernel, E]. out[t] = sum_j w[t, j] * x[t - j] with
    w[t, j, c] = dyn[t, side, j, c // group] + base[side, j, c].

    Computed per tap as x_j * base_j + (x_j viewed [..., G, group]) * coefficient [..., G, 1],
    never materialising w [..., B, kernel, E] (its backward was most of a training step)."""
    *lead, n, e = x.shape
    g = e // group
    coeff = dyn.reshape(*lead, n, 2, kernel, g)[..., side, :, :]  # [..., B, kernel, G]
    out = None
    for tap in range(min(kernel, n)):
        xs = x if tap == 0 else F.pad(x[..., : n - tap, :], (0, 0, tap, 0))  # [..., B, E], zeros before the block
        term = xs * base[side, tap] + (xs.reshape(*lead, n, g, group) * coeff[..., tap, :, None]).reshape(*lead, n, e)
        out = term if out is None else out + term
    return out


class DFlashDraft(nn.Module):
    """Parameters: `self.p[gguf_name]` with NumPy shapes of `tensor_shapes(cfg)`; the target's
    token embedding `emb` [V, E] and output matrix `head` [V or n_keep, E] are frozen buffers."""

    def __init__(self, cfg: DraftConfig, emb: np.ndarray, head: np.ndarray, feat_scale: np.ndarray | None = None,
                 keep_ids: np.ndarray | None = None, codebooks: str = "free"):
        super().__init__()
        cfg.validate()
        if codebooks not in CODEBOOKS:
            raise ValueError(f"codebooks {codebooks!r}: use one of {', '.join(CODEBOOKS)}")
        self.cfg, self.codebooks = cfg, codebooks
        shapes = tensor_shapes(cfg)
        if codebooks == "factorised":
            for t in CODEBOOK_TABLES:
                if t in shapes:
                    del shapes[t]
                    shapes[proj_name(t)] = (cfg.n_embd, cfg.selector_rank)
        self.p = nn.ParameterDict({k.replace(".", "__"): nn.Parameter(torch.zeros(s)) for k, s in shapes.items()})
        self.register_buffer("emb", torch.as_tensor(np.asarray(emb, np.float32)), persistent=False)  # [V, E]
        self.keep_ids = None if keep_ids is None else np.asarray(keep_ids, np.int64)
        rows = head if self.keep_ids is None else np.asarray(head)[self.keep_ids]
        self.register_buffer("head", torch.as_tensor(np.asarray(rows, np.float32)), persistent=False)  # [V', E]
        n_enc = len(cfg.target_layers) * cfg.n_embd
        scale = np.ones(n_enc, np.float32) if feat_scale is None else np.asarray(feat_scale, np.float32)
        self.register_buffer("feat_scale", torch.as_tensor(scale))  # [n_enc]
        # [V'] position of each kept id in the full vocabulary (reduced-vocabulary drafts)
        self.register_buffer("d2t", torch.as_tensor(self.keep_ids if self.keep_ids is not None
                                                    else np.arange(cfg.n_vocab, dtype=np.int64)), persistent=False)

    def w(self, name: str) -> torch.Tensor:
        return self.p[name.replace(".", "__")]

    def load_numpy(self, tensors: dict[str, np.ndarray]) -> None:
        """Set every parameter from GGUF-named arrays (d2t / output.weight are not parameters).
        With factorised codebooks a table [V, R] is fitted by least squares: P = argmin |emb P - table|."""
        with torch.no_grad():
            for k, v in tensors.items():
                if k in ("d2t", "output.weight"):
                    continue
                if self.codebooks == "factorised" and k in CODEBOOK_TABLES:
                    # normal equations in float64: emb is well conditioned (SmolLM2: cond 91), and
                    # this is 3x faster than a QR lstsq of [V, E]
                    e = self.emb.double().cpu()
                    fit = torch.linalg.solve(e.T @ e, e.T @ torch.as_tensor(np.asarray(v, np.float64)))  # [E, R]
                    self.w(proj_name(k)).copy_(fit.float())
                    continue
                self.w(k).copy_(torch.as_tensor(np.asarray(v, np.float32)))

    def init_codebooks(self, seed: int) -> None:
        """Random factorised codebooks whose rows have the scale of `random_tensors`' free ones
        (entries of variance 1/R): P ~ N(0, 1 / (R * mean |emb row|^2))."""
        if self.codebooks != "factorised":
            return
        g = torch.Generator().manual_seed(seed)
        r = self.cfg.selector_rank
        std = 1.0 / math.sqrt(r * float(self.emb.pow(2).sum(-1).mean()))
        with torch.no_grad():
            for t in CODEBOOK_TABLES:
                p = self.w(proj_name(t))
                p.copy_((torch.randn(p.shape, generator=g) * std).to(p.device))

    def codebook(self, table: str, ids: torch.Tensor) -> torch.Tensor:
        """Rows ids [...] of a selector codebook table -> [..., R] (a gather, then the projection)."""
        if self.codebooks == "factorised":
            return self.emb[ids] @ self.w(proj_name(table))
        return self.w(table)[ids]

    def export_numpy(self) -> dict[str, np.ndarray]:
        """GGUF-named float32 arrays for `write_dflash_draft`, feat_scale folded into fc,
        factorised codebooks materialised as [V, R] tables."""
        out = {k.replace("__", "."): v.detach().float().cpu().numpy().copy() for k, v in self.p.items()}
        out["fc.weight"] = out["fc.weight"] * self.feat_scale.cpu().numpy()[None, :]
        if self.codebooks == "factorised":
            with torch.no_grad():
                for t in CODEBOOK_TABLES:
                    out[t] = (self.emb @ self.w(proj_name(t))).float().cpu().numpy()
                    del out[proj_name(t)]
        if self.keep_ids is not None:
            out["d2t"] = self.keep_ids.copy()
            out["output.weight"] = self.head.cpu().numpy().copy()
        return out

    # -- forward ------------------------------------------------------------------------

    def inject(self, feats: torch.Tensor, noise: float = 0.0) -> torch.Tensor:
        """Features [S, L, n_enc] -> g [S, L, E], what the draft's KV rows are computed from.
        `noise`: sigma of Gaussian noise on the scaled features (unit RMS per channel), training only."""
        c = self.cfg
        x = feats * self.feat_scale
        if noise > 0:
            x = x + noise * torch.randn_like(x)
        return rms_norm(x @ self.w("fc.weight").T, self.w("enc.output_norm.weight"), c.rms_eps)

    def hidden(self, g: torch.Tensor, ctx_pos: torch.Tensor, ctx_ok: torch.Tensor,
               tokens: torch.Tensor, anchor_pos: torch.Tensor) -> torch.Tensor:
        """Final hidden states of the blocks (after output_norm).

        g [S, L, E] injected rows at positions ctx_pos [S, L] (ctx_ok [S, L]: a real row);
        tokens [S, N, B] the blocks ([anchor, mask, ...]), anchor_pos [S, N]: the block's
        slot j sits at anchor_pos + j and sees injected rows with position < anchor_pos.
        Returns [S, N, B, E].
        """
        c = self.cfg
        S, N, B = tokens.shape
        L, hd, kvh = g.shape[1], c.head_dim, c.n_head_kv
        pos = anchor_pos[..., None] + torch.arange(B, device=g.device)  # [S, N, B]
        # mask [S, N*B, L + N*B]: injected rows before the anchor, and the query's own block
        see_ctx = ctx_ok[:, None, None, :] & (ctx_pos[:, None, None, :] < anchor_pos[:, :, None, None])  # [S,N,1,L]
        see_ctx = see_ctx.expand(S, N, B, L).reshape(S, N * B, L)
        blk = torch.arange(N, device=g.device).repeat_interleave(B)  # [N*B]
        see_blk = (blk[:, None] == blk[None, :]).expand(S, N * B, N * B)
        mask = torch.cat([see_ctx, see_blk], dim=-1)[:, None]  # [S, 1, N*B, L + N*B]
        mask_swa = None
        if any(c.sliding_layers()):  # llama.cpp hides key k from query q on sliding layers when q - k >= W
            q_pos = pos.reshape(S, N * B)
            k_pos = torch.cat([ctx_pos, q_pos], dim=1)  # [S, L + N*B]
            mask_swa = mask & ((q_pos[:, :, None] - k_pos[:, None, :]) < c.sliding_window)[:, None]
        kq_scale = c.attention_scale if c.attention_scale is not None else 1.0 / math.sqrt(hd)
        act = F.silu if c.hidden_act == "silu" else lambda t: F.gelu(t, approximate="tanh")  # ggml's gelu is tanh
        x = self.emb[tokens]  # [S, N, B, E]
        if c.embedding_scale is not None:
            x = x * c.embedding_scale
        for i in range(c.n_layer):
            L_ = lambda n: self.w(f"blk.{i}.{n}")  # noqa: E731
            k_ctx = rope_neox(rms_norm((g @ L_("attn_k.weight").T).reshape(S, L, kvh, hd), L_("attn_k_norm.weight"),
                                       c.rms_eps), ctx_pos, c.rope_freq_base)  # [S, L, Hkv, D]
            v_ctx = (g @ L_("attn_v.weight").T).reshape(S, L, kvh, hd)
            h = rms_norm(x, L_("attn_norm.weight"), c.rms_eps)
            dyn = h @ L_("attn_conv_proj.weight").T  # [S, N, B, 2*kernel*G]
            h = dyn_conv(h, dyn, L_("attn_conv_base"), 0, c.conv_kernel_size, c.conv_group_size)
            q = rope_neox(rms_norm((h @ L_("attn_q.weight").T).reshape(S, N, B, c.n_head, hd),
                                   L_("attn_q_norm.weight"), c.rms_eps), pos, c.rope_freq_base)
            k = rope_neox(rms_norm((h @ L_("attn_k.weight").T).reshape(S, N, B, kvh, hd),
                                   L_("attn_k_norm.weight"), c.rms_eps), pos, c.rope_freq_base)
            v = (h @ L_("attn_v.weight").T).reshape(S, N, B, kvh, hd)
            kk = torch.cat([k_ctx, k.reshape(S, N * B, kvh, hd)], dim=1).transpose(1, 2)  # [S, Hkv, L+NB, D]
            vv = torch.cat([v_ctx, v.reshape(S, N * B, kvh, hd)], dim=1).transpose(1, 2)
            rep = c.n_head // kvh  # query head h reads kv head h // rep
            kk, vv = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
            qq = q.reshape(S, N * B, c.n_head, hd).transpose(1, 2)  # [S, H, NB, D]
            m = mask_swa if mask_swa is not None and c.sliding_layers()[i] else mask
            a = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=m, scale=kq_scale)
            a = a.transpose(1, 2).reshape(S, N, B, c.n_head * hd) @ L_("attn_output.weight").T
            if c.attention_value_scale is not None:
                a = a * c.attention_value_scale
            a = dyn_conv(a, dyn, L_("attn_conv_base"), 1, c.conv_kernel_size, c.conv_group_size)
            f_in = x + a
            h = rms_norm(f_in, L_("ffn_norm.weight"), c.rms_eps)
            dyn = h @ L_("ffn_conv_proj.weight").T
            h = dyn_conv(h, dyn, L_("ffn_conv_base"), 0, c.conv_kernel_size, c.conv_group_size)
            h = (act(h @ L_("ffn_gate.weight").T) * (h @ L_("ffn_up.weight").T)) @ L_("ffn_down.weight").T
            x = f_in + dyn_conv(h, dyn, L_("ffn_conv_base"), 1, c.conv_kernel_size, c.conv_group_size)
        return rms_norm(x, self.w("output_norm.weight"), c.rms_eps)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """[..., E] -> [..., V'] over the draft vocabulary (full, or the kept ids in d2t order), with the
        optional logit scale and soft-cap applied as llama.cpp does before its top-K."""
        c = self.cfg
        lg = (h.reshape(-1, h.shape[-1]) @ self.head.T).reshape(*h.shape[:-1], -1)  # one mm, not a batched one
        if c.logit_scale is not None:
            lg = lg * c.logit_scale
        if c.final_logit_softcapping is not None:
            lg = torch.tanh(lg / c.final_logit_softcapping) * c.final_logit_softcapping
        return lg

    def transition(self, h: torch.Tensor, pred: torch.Tensor, succ: torch.Tensor) -> torch.Tensor:
        """Selector scores without the unary term: h [..., E], pred [..., P] and succ [..., K]
        target ids -> [..., P, K] = <selector_predecessor[a] * selector_hidden(h), selector_successor[b]>."""
        gate = h @ self.w("selector_hidden.weight").T  # [..., R]
        cond = self.codebook("selector_predecessor.weight", pred) * gate[..., None, :]  # [..., P, R]
        return cond @ self.codebook("selector_successor.weight", succ).transpose(-1, -2)  # [..., P, K]

    def lattice(self, h: torch.Tensor, anchor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What llama.cpp packs into the lattice, for blocks h [..., B, E] with anchor ids [...]:
        candidate target ids [..., B-1, K] (slots 1..B-1, top-K order) and scores
        [..., B-1, K(a), K(b)] (slot 1: every row reads the anchor)."""
        K = self.cfg.selector_top_k
        lg = self.logits(h[..., 1:, :])  # [..., B-1, V']
        unary, top = lg.topk(K, dim=-1)  # [..., B-1, K]
        cand = self.d2t[top]  # [..., B-1, K] target ids
        pred = torch.cat([anchor[..., None, None].expand(*cand.shape[:-2], 1, K), cand[..., :-1, :]], dim=-2)
        scores = self.transition(h[..., 1:, :], pred, cand) + unary[..., None, :]  # [..., B-1, K, K]
        return cand, scores
