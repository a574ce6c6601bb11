"""Training a DFlash 2 draft on captured shards: schedule, checkpoints, evaluation, export.

What it is: `Trainer`, which builds a draft for a target (or resumes one from
`checkpoint.pt`), trains it for a wall-clock budget with AdamW (codebooks at 3x the
learning rate, warmup then cosine to 10% *over the budget*, so a 2-hour run and a
10-minute run both anneal), writes a checkpoint every few minutes and at the end (a
killed run resumes from the last one, with optimizer, schedule position and RNG), and
measures offline acceptance on held-out sequences. `export` writes the GGUF llama.cpp
loads. The recipe is DESIGN.md §9's: identity-initialised conv, final norm at 0.2x the
target's output norm, decay-weighted block CE + selector CE, clip 1.0.

What it is not: the data capture (`data.py`) or the command line (`cli.py`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch

from gguf_tools.dflash import DraftConfig, random_tensors, write_dflash_draft

from .batches import anchors_of, make_batch, sample_batch
from .data import Shards
from .loss import SELECTORS, accepted_lengths, draft_loss, trajectory_tau
from .model import DFlashDraft
from .target import read_target_tensors

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class TrainConfig:
    n_layer: int = 2
    block: int = 8  # anchor + 7 slots, the block length the draft is trained (and shipped) for
    n_keep: int | None = 8192  # reduced output vocabulary (most frequent answer tokens); None = full
    selector_rank: int = 32
    lr: float = 1e-3
    codebook_lr_mult: float = 3.0
    warmup_steps: int = 40
    min_lr_frac: float = 0.1
    weight_decay: float = 0.01
    clip: float = 1.0
    decay: float = 4.0  # slot weights exp(-(k-1)/decay)
    selector_weight: float = 1.0
    n_seqs: int = 8  # sequences per batch
    n_anchors: int = 24  # blocks per sequence
    seed: int = 0
    threads: int = 2
    checkpoint_every_s: float = 300.0
    eval_every_s: float = 900.0
    eval_seqs: int = 24


def feature_scale(shards: Shards, n_seqs: int = 64) -> np.ndarray:
    """[n_enc] 1 / per-channel RMS over train sequences, position 0 (the attention sink,
    RMS ~1000 in deep taps) left out; export folds it into fc."""
    acc, n = np.zeros(shards.n_enc), 0
    for sh, q in shards.seqs["train"][:n_seqs]:
        _, f, _ = shards.get(sh, q)
        x = np.asarray(f[1:-1], np.float64)  # the last row was never decoded (zeros)
        acc += (x * x).sum(0)
        n += len(x)
    return (1.0 / np.sqrt(acc / max(n, 1) + 1e-6)).astype(np.float32)


def frequent_ids(shards: Shards, n_keep: int, n_vocab: int) -> np.ndarray:
    """The n_keep target ids seen most often in train answers (ties by id), sorted."""
    counts = np.zeros(n_vocab, np.int64)
    for sh, q in shards.seqs["train"]:
        toks, _, n_prompt = shards.get(sh, q)
        np.add.at(counts, np.asarray(toks[n_prompt:], np.int64), 1)
    order = np.lexsort((np.arange(n_vocab), -counts))
    return np.sort(order[:n_keep]).astype(np.int64)


class Trainer:
    def __init__(self, target_path: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike,
                 cfg: TrainConfig = TrainConfig(), *, resume: bool = False, log=print):
        torch.set_num_threads(cfg.threads)
        self.target_path, self.out, self.log = str(target_path), Path(out), log
        self.out.mkdir(parents=True, exist_ok=True)
        self.shards = Shards(data)
        if not self.shards.seqs["train"]:
            raise ValueError(f"{data} holds no training sequences: capture data first")
        tt = read_target_tensors(target_path)
        ckpt_path = self.out / CHECKPOINT
        ckpt = torch.load(ckpt_path, weights_only=False) if resume and ckpt_path.exists() else None
        if resume and ckpt is None:
            log(f"no checkpoint in {self.out}: starting a new draft")
        if ckpt is not None:
            cfg = TrainConfig(**ckpt["train_cfg"])
            self.dcfg = DraftConfig(**{**ckpt["draft_cfg"], "target_layers": tuple(ckpt["draft_cfg"]["target_layers"])})
            keep = ckpt["keep_ids"]
            scale = ckpt["feat_scale"]
        else:
            taps = tuple(self.shards.manifest["target_layers"])
            self.dcfg = DraftConfig.for_target(target_path, target_layers=taps, n_layer=cfg.n_layer,
                                               block_size=cfg.block, selector_rank=cfg.selector_rank)
            keep = frequent_ids(self.shards, cfg.n_keep, self.dcfg.n_vocab) if cfg.n_keep else None
            scale = feature_scale(self.shards)
        self.cfg = cfg
        self.model = DFlashDraft(self.dcfg, tt.emb, tt.head, scale, keep)
        t2d = np.full(self.dcfg.n_vocab, -1, np.int64)
        t2d[self.model.d2t.numpy()] = np.arange(len(self.model.d2t))
        self.t2d = torch.from_numpy(t2d)
        if ckpt is None:
            init = random_tensors(self.dcfg, cfg.seed)
            init["output_norm.weight"] = 0.2 * tt.output_norm  # a plain copy starts the CE near 26
            self.model.load_numpy(init)
        codebooks = [p for k, p in self.model.p.items() if k.startswith("selector_")]
        rest = [p for k, p in self.model.p.items() if not k.startswith("selector_")]
        self.opt = torch.optim.AdamW([{"params": rest, "lr_mult": 1.0},
                                      {"params": codebooks, "lr_mult": cfg.codebook_lr_mult}],
                                     lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
        self.step, self.elapsed, self.budget_s, self.history = 0, 0.0, None, []
        self.rng = np.random.default_rng(cfg.seed)
        if ckpt is not None:
            self.model.p.load_state_dict(ckpt["params"])
            self.opt.load_state_dict(ckpt["opt"])
            self.step, self.elapsed, self.budget_s = ckpt["step"], ckpt["elapsed"], ckpt["budget_s"]
            self.history = ckpt["history"]
            self.rng.bit_generator.state = ckpt["rng"]
            log(f"resumed at step {self.step} ({self.elapsed / 60:.1f} min trained)")

    # -- schedule -------------------------------------------------------------------------

    def lr_factor(self) -> float:
        if self.step < self.cfg.warmup_steps:
            return (self.step + 1) / self.cfg.warmup_steps
        frac = min(self.elapsed / self.budget_s, 1.0) if self.budget_s else 0.0
        return self.cfg.min_lr_frac + (1 - self.cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac))

    # -- training -------------------------------------------------------------------------

    def train_step(self) -> dict:
        c = self.cfg
        b = sample_batch(self.shards, self.rng, "train", c.n_seqs, c.n_anchors, c.block, self.dcfg.mask_token_id)
        self.model.train()
        g = self.model.inject(b.feats)
        h = self.model.hidden(g, b.ctx_pos, b.ctx_ok, b.tokens, b.anchor_pos)
        loss, m = draft_loss(self.model, h, b.anchor, b.labels, self.t2d, c.decay, c.selector_weight)
        f = self.lr_factor()
        for grp in self.opt.param_groups:
            grp["lr"] = c.lr * f * grp["lr_mult"]
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        m["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.clip))
        self.opt.step()
        self.step += 1
        m.update(loss=loss.item(), lr=c.lr * f)
        return m

    def run(self, budget_s: float, progress=None) -> None:
        """Train until `budget_s` seconds of training in total (a resumed run continues the count)."""
        self.budget_s = float(budget_s)  # a resumed run may be given more (or less) time: the schedule follows
        last_ckpt = last_eval = time.perf_counter()
        while self.elapsed < self.budget_s:
            t0 = time.perf_counter()
            m = self.train_step()
            self.elapsed += time.perf_counter() - t0
            rounded = {k: (v if k == "lr" else round(v, 4)) for k, v in m.items()}
            self.history.append({"step": self.step, "t": round(self.elapsed, 1), **rounded})
            if progress is not None:
                progress(self, m)
            now = time.perf_counter()
            if now - last_eval >= self.cfg.eval_every_s:
                self.history[-1]["eval"] = self.evaluate()
                last_eval = time.perf_counter()
            if now - last_ckpt >= self.cfg.checkpoint_every_s:
                self.save()
                last_ckpt = now
        if self.history:  # a run with no step at all has nothing new to evaluate
            self.history[-1]["eval"] = self.evaluate()
        self.save()

    def save(self) -> None:
        ckpt = {"params": self.model.p.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                "elapsed": self.elapsed, "budget_s": self.budget_s, "history": self.history,
                "rng": self.rng.bit_generator.state, "train_cfg": asdict(self.cfg), "draft_cfg": self.dcfg.to_dict(),
                "keep_ids": self.model.keep_ids, "feat_scale": self.model.feat_scale.numpy()}
        tmp = self.out / (CHECKPOINT + ".tmp")
        torch.save(ckpt, tmp)
        os.replace(tmp, self.out / CHECKPOINT)
        (self.out / "history.json").write_text(json.dumps(self.history))

    # -- evaluation -----------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, n_seqs: int | None = None, chunk: int = 48) -> dict:
        """Offline acceptance on held-out sequences at every answer anchor: per selector the
        trajectory tau (start at the first answer token, jump by accepted + 1, as the engine
        runs) and the acceptance rate per block slot."""
        self.model.eval()
        B, T = self.cfg.block, self.cfg.block - 1
        stride = self.dcfg.n_embd
        seqs = self.shards.seqs["val"][: n_seqs or self.cfg.eval_seqs]
        if not seqs:
            self.log("no held-out sequences to evaluate on")
            return {"tau": {}, "slot_accept": {}, "n_seqs": 0}
        taus = {s: [] for s in SELECTORS}
        reach = {s: np.zeros(T + 1) for s in SELECTORS}  # reach[s][k]: anchors that accepted >= k slots
        for sh, q in seqs:
            n, n_prompt = self.shards.length(sh, q)
            anc_all = anchors_of(n, n_prompt)
            if len(anc_all) == 0:
                continue
            acc = {s: np.zeros(n, np.int64) for s in SELECTORS}
            for i in range(0, len(anc_all), chunk):
                anc = anc_all[i:i + chunk]
                b = make_batch(self.shards, [(sh, q)], [anc], B, self.dcfg.mask_token_id)
                g = self.model.inject(b.feats)
                h = self.model.hidden(g, b.ctx_pos, b.ctx_ok, b.tokens, b.anchor_pos)[0]  # [A, B, E]
                cand, scores = self.model.lattice(h, b.anchor[0])
                unary = self.model.logits(h[:, 1:]).gather(-1, self.t2d[cand])  # [A, T, K] candidates' draft logits
                got = accepted_lengths(cand.numpy(), scores.numpy(), unary.numpy(), b.labels[0].numpy(), stride)
                for s in SELECTORS:
                    acc[s][anc] = got[s]
            for s in SELECTORS:
                taus[s].append(trajectory_tau(acc[s], int(anc_all[0]), int(anc_all[-1])))
                a = acc[s][anc_all]
                reach[s] += np.array([(a >= k).sum() for k in range(T + 1)])
        out = {"tau": {s: round(float(np.nanmean(v)), 3) for s, v in taus.items()},
               "slot_accept": {s: [round(float(r[k + 1] / max(r[k], 1)), 3) for k in range(T)]
                               for s, r in reach.items()},
               "n_seqs": len(seqs)}
        self.log(f"eval step {self.step}: tau " + ", ".join(f"{s} {v}" for s, v in out["tau"].items()))
        return out

    # -- export ---------------------------------------------------------------------------

    def export(self, path: str | os.PathLike, matrix_dtype: str = "f16", name: str | None = None) -> DraftConfig:
        cfg = replace(self.dcfg, name=name or self.dcfg.name)
        write_dflash_draft(path, cfg, self.model.export_numpy(), self.target_path, matrix_dtype=matrix_dtype)
        return cfg
