"""Training a DFlash 2 draft on captured shards: schedule, checkpoints, evaluation, export.

What it is: `Trainer`, which builds a draft for a target (random, warm-started from the
target's layers, or continued from an existing draft GGUF: `init_from`), or resumes one from
`checkpoint.pt`, and trains it with AdamW (codebooks at 3x the learning rate, warmup then
cosine to 10%). The cosine spans the time budget (v1) or, with `passes`, min(the steps for
that many passes over the train split's answer anchors, the steps the time budget fits at
the measured step time). It writes a checkpoint every few minutes and at the end (a killed
run resumes from the last one, with optimizer, schedule position and RNG; the folder holds
no absolute paths, so a copy resumes elsewhere), evaluates held-out trajectory tau every
`eval_every_s` / `eval_every_steps`, keeps the best evaluation's weights in `best.pt` and
stops after `patience` evaluations without a gain of `min_delta`. `export` writes the GGUF
llama.cpp loads (the best weights by default).

What it is not: the recipe's fields, V1 and what a run fixes from its data before the first
step (`recipe.py`), the data capture (`capture.py`), the batches (`batches.py`) or the command
line (`cli.py`).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from gguf_tools import check_gguf
from gguf_tools.dflash import DraftConfig, random_tensors, write_dflash_draft

from .batches import anchors_of, make_batch, sample_batch
from .loss import SELECTORS, accepted_lengths, draft_loss, trajectory_tau
from .model import CODEBOOK_TABLES, DFlashDraft
from .recipe import (WARM_STARTS, TrainConfig, config_from_dict, feature_scale, frequent_ids, steps_for_passes,
                     train_anchor_count)
from .shards import Shards
from .target import read_target_tensors
from .warm_start import load_warm_start, target_warm_start

CHECKPOINT = "checkpoint.pt"
BEST = "best.pt"
FIT_LOG_STEP = 20  # steps of this process after which the budget's fit is logged from measured step times
TIMING_SKIP = 3  # first steps of a process not timed (allocation, caches)


def _to(batch, device: torch.device):
    """The batch with every tensor on `device` (fields the batch may not have are left alone)."""
    if device.type == "cpu":
        return batch
    return replace(batch, **{k: v.to(device, non_blocking=True) for k, v in vars(batch).items()
                             if isinstance(v, torch.Tensor)})


def best_tau(ev: dict) -> float:
    """The best selector's held-out trajectory tau of an evaluation (nan if none)."""
    vals = [v for v in ev.get("tau", {}).values() if v is not None and math.isfinite(v)]
    return max(vals) if vals else math.nan


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
        src = None
        if ckpt is not None:
            cfg = config_from_dict(ckpt["train_cfg"], cfg)
            self.dcfg = DraftConfig(**{**ckpt["draft_cfg"], "target_layers": tuple(ckpt["draft_cfg"]["target_layers"])})
            keep = ckpt["keep_ids"]
            scale = ckpt["feat_scale"]
        else:
            if cfg.warm_start not in WARM_STARTS:
                raise ValueError(f"warm_start {cfg.warm_start!r}: use one of {', '.join(WARM_STARTS)}")
            if cfg.init_from and cfg.warm_start != "none":
                raise ValueError("init_from continues a draft; warm_start starts one: give one of them")
            taps = tuple(self.shards.manifest["target_layers"])
            if cfg.init_from:
                self.dcfg, src = load_warm_start(cfg.init_from)
                meta = check_gguf(target_path).metadata
                self.dcfg = replace(self.dcfg, target_n_layer=int(meta[f"{meta['general.architecture']}.block_count"]))
                if self.dcfg.target_layers != taps or self.dcfg.n_vocab != tt.emb.shape[0]:
                    raise ValueError(f"{cfg.init_from} taps layers {list(self.dcfg.target_layers)} of a "
                                     f"{self.dcfg.n_vocab}-token vocabulary; the data holds taps {list(taps)} of "
                                     f"{tt.emb.shape[0]}: it is no draft of this target and data")
                keep = src.get("d2t")
                # the source's shape wins; the config records what was trained (the path by name only:
                # a checkpoint holds no absolute paths)
                cfg = replace(cfg, n_layer=self.dcfg.n_layer, block=self.dcfg.block_size,
                              selector_rank=self.dcfg.selector_rank, n_keep=None if keep is None else len(keep),
                              init_from=os.path.basename(cfg.init_from))
            else:
                self.dcfg = DraftConfig.for_target(target_path, target_layers=taps, n_layer=cfg.n_layer,
                                                   block_size=cfg.block, selector_rank=cfg.selector_rank)
                keep = frequent_ids(self.shards, cfg.n_keep, self.dcfg.n_vocab) if cfg.n_keep else None
            scale = feature_scale(self.shards)
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self.model = DFlashDraft(self.dcfg, tt.emb, tt.head, scale, keep, codebooks=cfg.codebooks)
        t2d = np.full(self.dcfg.n_vocab, -1, np.int64)
        t2d[self.model.d2t.numpy()] = np.arange(len(self.model.d2t))
        self.t2d = torch.from_numpy(t2d).to(self.device)
        if ckpt is None:
            self._init_weights(tt, scale, src)
        self.model.to(self.device)
        codebooks = [p for k, p in self.model.p.items() if k.startswith("selector_")]
        rest = [p for k, p in self.model.p.items() if not k.startswith("selector_")]
        self.opt = torch.optim.AdamW([{"params": rest, "lr_mult": 1.0},
                                      {"params": codebooks, "lr_mult": cfg.codebook_lr_mult}],
                                     lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
        self.step, self.elapsed, self.budget_s, self.history = 0, 0.0, None, []
        self.step_time: float | None = None  # measured seconds per training step (mean after TIMING_SKIP)
        self.best = {"tau": -math.inf, "step": None, "eval": None, "ref": -math.inf, "stale": 0}
        self.stopped = None  # why the last run() ended early, in words
        self.rng = np.random.default_rng(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.n_train_anchors = train_anchor_count(self.shards)
        self.pass_steps = (steps_for_passes(cfg.passes, self.n_train_anchors, cfg.n_seqs, cfg.n_anchors)
                           if cfg.passes else None)
        if ckpt is not None:
            self.model.p.load_state_dict(ckpt["params"])
            self.opt.load_state_dict(ckpt["opt"])
            self.step, self.elapsed, self.budget_s = ckpt["step"], ckpt["elapsed"], ckpt["budget_s"]
            self.history = ckpt["history"]
            self.rng.bit_generator.state = ckpt["rng"]
            if "torch_rng" in ckpt:
                torch.set_rng_state(ckpt["torch_rng"])
            self.step_time = ckpt.get("step_time")
            self.best.update(ckpt.get("best", {}))
            log(f"resumed at step {self.step} ({self.elapsed / 60:.1f} min trained)")
        self._timed = [0.0, 0]  # (seconds, steps) measured by this process

    def _init_weights(self, tt, scale: np.ndarray, src: dict | None) -> None:
        c = self.cfg
        if src is not None:  # continue a draft: its weights, fc un-folded from this data's feature scale
            init = {k: v for k, v in src.items() if k not in ("d2t", "output.weight")}
            init["fc.weight"] = src["fc.weight"] / scale[None, :]
            self.model.load_numpy(init)
            return
        init = random_tensors(self.dcfg, c.seed)
        init["output_norm.weight"] = 0.2 * tt.output_norm  # a plain copy starts the CE near 26
        if c.warm_start == "target":
            init.update(target_warm_start(self.target_path, self.dcfg, scale))
        if c.codebooks == "factorised":  # random projections, not a fit to random tables
            init = {k: v for k, v in init.items() if k not in CODEBOOK_TABLES}
            self.model.init_codebooks(c.seed)
        self.model.load_numpy(init)

    # -- schedule -------------------------------------------------------------------------

    def budget_steps(self) -> int | None:
        """Steps the time budget fits at the measured step time (None before a measure)."""
        if not self.budget_s or not self.step_time:
            return None
        return self.step + max(0, int((self.budget_s - self.elapsed) / self.step_time))

    def schedule_steps(self) -> int | None:
        """Steps the cosine spans with `passes`: min(steps for the passes, steps the budget fits)."""
        cands = [n for n in (self.pass_steps, self.budget_steps()) if n]
        return min(cands) if cands else None

    @property
    def passes_done(self) -> float:
        return self.step * self.cfg.n_seqs * self.cfg.n_anchors / max(self.n_train_anchors, 1)

    def lr_factor(self) -> float:
        c = self.cfg
        if self.step < c.warmup_steps:
            return (self.step + 1) / c.warmup_steps
        if c.passes:
            total = self.schedule_steps()
            frac = min(self.step / total, 1.0) if total else 0.0
        else:  # v1: the cosine spans the time budget
            frac = min(self.elapsed / self.budget_s, 1.0) if self.budget_s else 0.0
        return c.min_lr_frac + (1 - c.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac))

    def log_fit(self) -> None:
        """What the time budget fits, so a user sees what the time given buys."""
        c = self.cfg
        per_pass = steps_for_passes(1.0, self.n_train_anchors, c.n_seqs, c.n_anchors)
        if self.budget_s and self.step_time:
            fit = self.budget_s / self.step_time
            self.log(f"the budget fits {fit / per_pass:.2f} passes ({int(fit)} steps at {self.step_time:.3f} s/step); "
                     f"schedule: {self.schedule_steps() or 'the budget'} steps"
                     + (f" ({c.passes} passes = {self.pass_steps})" if self.pass_steps else ""))
        else:
            self.log(f"{self.n_train_anchors} train anchors, {per_pass} steps per pass; schedule: "
                     + (f"{self.pass_steps} steps ({c.passes} passes), or fewer if the budget fits fewer"
                        if self.pass_steps else "the time budget") + "; step time not measured yet")

    # -- training -------------------------------------------------------------------------

    def train_step(self) -> dict:
        c = self.cfg
        b = sample_batch(self.shards, self.rng, "train", c.n_seqs, c.n_anchors, c.block, self.dcfg.mask_token_id)
        b = _to(b, self.device)
        self.model.train()
        g = self.model.inject(b.feats, noise=c.feature_noise)
        h = self.model.hidden(g, b.ctx_pos, b.ctx_ok, b.tokens, b.anchor_pos)
        loss, m = draft_loss(self.model, h, b.anchor, b.labels, self.t2d, c.decay, c.selector_weight,
                             position_weights=c.position_weights, dpace_alpha=c.dpace_alpha, kl_weight=c.kl_weight,
                             teacher_ids=getattr(b, "teacher_ids", None), teacher_lp=getattr(b, "teacher_lp", None))
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

    def _timed_step(self, seconds: float) -> None:
        """Fold one step's duration into the step-time estimate (re-estimated as the run goes)."""
        self._timed[1] += 1
        if self._timed[1] > TIMING_SKIP:
            self._timed[0] += seconds
            self.step_time = self._timed[0] / (self._timed[1] - TIMING_SKIP)

    def _done(self) -> str | None:
        """Why training should end before the budget is spent (None: go on)."""
        if self.pass_steps and self.step >= self.pass_steps:
            return f"{self.cfg.passes} passes done ({self.step} steps)"
        if self.cfg.patience and self.best["stale"] >= self.cfg.patience:
            return (f"plateau: {self.best['stale']} evaluations without a gain of {self.cfg.min_delta}; "
                    f"best tau {self.best['tau']} at step {self.best['step']}")
        return None

    def run(self, budget_s: float, progress=None) -> None:
        """Train until `budget_s` seconds of training in total (a resumed run continues the count),
        the passes are done, or held-out tau stops improving."""
        c = self.cfg
        self.budget_s = float(budget_s)  # a resumed run may be given more (or less) time: the schedule follows
        self.stopped = None
        self.log_fit()
        if self.step == 0 and self.cfg.init_from and self.best.get("start") is None:
            # a continued draft is measured before it moves: best.pt starts as the draft it
            # continues, so a run that does not beat it exports it unchanged, never a worse one
            self.best["start"] = self.evaluate()
            self.track(self.best["start"])
        last_ckpt = last_eval = time.perf_counter()
        n_here = 0
        while self.elapsed < self.budget_s:
            self.stopped = self._done()
            if self.stopped:
                break
            t0 = time.perf_counter()
            m = self.train_step()
            dt = time.perf_counter() - t0
            self.elapsed += dt
            self._timed_step(dt)
            n_here += 1
            if n_here == FIT_LOG_STEP:
                self.log_fit()
            rounded = {k: (v if k == "lr" else round(v, 4)) for k, v in m.items()}
            self.history.append({"step": self.step, "t": round(self.elapsed, 1), **rounded})
            if progress is not None:
                progress(self, m)
            now = time.perf_counter()
            if ((c.eval_every_s and now - last_eval >= c.eval_every_s)
                    or (c.eval_every_steps and self.step % c.eval_every_steps == 0)):
                self.history[-1]["eval"] = self.evaluate()
                self.track(self.history[-1]["eval"])
                last_eval = time.perf_counter()
            if now - last_ckpt >= c.checkpoint_every_s:
                self.save()
                last_ckpt = now
        if self.stopped:
            self.log(f"stopped: {self.stopped}")
        if self.history and "eval" not in self.history[-1]:  # a run with no step at all has nothing new to evaluate
            self.history[-1]["eval"] = self.evaluate()
            self.track(self.history[-1]["eval"])
        self.save()

    def track(self, ev: dict) -> None:
        """Keep the best evaluation (best.pt) and count evaluations without a gain of min_delta."""
        tau = best_tau(ev)
        if not math.isfinite(tau):
            return
        b = self.best
        if tau > b["tau"]:
            b.update(tau=tau, step=self.step, eval=ev)
            if self.cfg.keep_best:
                self._write(BEST, {"params": self.model.p.state_dict(), "step": self.step, "eval": ev})
        if tau >= b["ref"] + self.cfg.min_delta:
            b.update(ref=tau, stale=0)
        else:
            b["stale"] += 1

    def _meta(self) -> dict:
        return {"train_cfg": asdict(self.cfg), "draft_cfg": self.dcfg.to_dict(), "keep_ids": self.model.keep_ids,
                "feat_scale": self.model.feat_scale.cpu().numpy()}

    def _write(self, name: str, obj: dict) -> None:
        tmp = self.out / (name + ".tmp")
        torch.save({**obj, **self._meta()}, tmp)
        os.replace(tmp, self.out / name)

    def save(self) -> None:
        self._write(CHECKPOINT, {"params": self.model.p.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                                 "elapsed": self.elapsed, "budget_s": self.budget_s, "history": self.history,
                                 "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                                 "step_time": self.step_time, "best": self.best})
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
                b = _to(make_batch(self.shards, [(sh, q)], [anc], B, self.dcfg.mask_token_id), self.device)
                g = self.model.inject(b.feats)
                h = self.model.hidden(g, b.ctx_pos, b.ctx_ok, b.tokens, b.anchor_pos)[0]  # [A, B, E]
                cand, scores = self.model.lattice(h, b.anchor[0])
                unary = self.model.logits(h[:, 1:]).gather(-1, self.t2d[cand])  # [A, T, K] candidates' draft logits
                got = accepted_lengths(cand.cpu().numpy(), scores.float().cpu().numpy(), unary.float().cpu().numpy(),
                                       b.labels[0].cpu().numpy(), stride)
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

    def export(self, path: str | os.PathLike, matrix_dtype: str = "f16", name: str | None = None,
               best: bool | None = None) -> DraftConfig:
        """Write the draft GGUF: the weights of the best evaluation (best.pt) when `best` (default:
        cfg.keep_best) and one exists, else the current ones."""
        cfg = replace(self.dcfg, name=name or self.dcfg.name)
        best_path = self.out / BEST
        use_best = (self.cfg.keep_best if best is None else best) and best_path.exists()
        now = None
        if use_best:
            now = {k: v.detach().clone() for k, v in self.model.p.state_dict().items()}
            self.model.p.load_state_dict(torch.load(best_path, weights_only=False)["params"])
        try:
            write_dflash_draft(path, cfg, self.model.export_numpy(), self.target_path, matrix_dtype=matrix_dtype)
        finally:
            if now is not None:
                self.model.p.load_state_dict(now)
        return cfg

    def report(self) -> dict:
        """The "train" part of report.json (card.py renders it)."""
        if self.device.type == "cuda":
            hw = f"GPU {torch.cuda.get_device_name(self.device)}"
        else:
            hw = f"CPU ({self.cfg.threads} threads)"
        return {"steps": self.step, "seconds": round(self.elapsed), "passes_done": round(self.passes_done, 3),
                "hardware": hw, "stopped": self.stopped, "best_step": self.best.get("step") if self.cfg.keep_best
                else None, "start_eval": self.best.get("start"), "config": asdict(self.cfg),
                "draft_config": self.dcfg.to_dict()}

    @property
    def best_eval(self) -> dict:
        """The evaluation of what `export` writes by default (the best one, else the last)."""
        if self.cfg.keep_best and self.best.get("eval") and (self.out / BEST).exists():
            return self.best["eval"]
        return next((h["eval"] for h in reversed(self.history) if "eval" in h), {})
