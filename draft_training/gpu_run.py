"""The GPU path (issue 21): on a lent GPU machine, build CUDA llama.cpp, capture millions of
answer tokens with hundreds of parallel sequences, train on cuda and export the draft, bringing
back only the draft GGUF in parts of at most 16 MiB and a small JSON report.

What it is: the one script the device calls run (draft_training/GPU.md has the exact calls and
why there are several). Steps, one per call:

    gpu_run.py prepare   call 1: wheels into .gpu-keep/site, native library, llama.cpp build
                         started in the background (its own process session, so it outlives
                         the call), the model parts this call carried put aside
    gpu_run.py stash     middle calls: put aside the model parts this call carried
    gpu_run.py run       last call: join the model, wait for the build, then the phases
                         capture -> train -> export within --minutes, parts into --out

`run --cpu --tiny --target T.gguf --out DIR` does the same phases here on the CPU with the
installed llama_cpp, at toy sizes (tests/draft_training/test_gpu_run.py).

Time plan: each phase gets the time left times its share of the shares still to come
(SHARES), so a build that is already done leaves its minutes to capture and training. Capture
stops at its deadline through capture()'s Ctrl-C path (finished answers are kept); training
stops by lowering the trainer's budget to the time trained; export always runs.

What it is not: the machine's setup that `prepare`, `stash` and `run` call (folders, wheels,
native library, llama.cpp build, model parts: gpu_machine.py), the packing done on the
developer's machine (scripts/gpu_pack.py), the parts format (parts.py) or the trainer (train.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a file (the device's calls): the repository's packages
    sys.path.insert(0, str(ROOT))

from draft_training.gpu_machine import (BUILD, KEEP, build_native, build_state, install_wheels,  # noqa: E402
                                        join_model, stash_parts, start_llama_build, use_device_paths, wait_build)

SHARES = {"build": 3.0, "capture": 3.0, "train": 2.5, "export": 0.5}  # minutes in a 9-minute plan
BACK_PARTS = 6  # files back: at most 8, minus report.json and the parts manifest
EVAL_RESERVE = 0.15  # share of the train phase kept for the trainer's final evaluation and save


def _log(msg: str) -> None:
    print(f"[gpu_run {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Plan:
    """Deadlines for the phases still to run, from one end time."""

    def __init__(self, minutes: float, phases: list[str]):
        self.end, self.todo = time.monotonic() + 60.0 * minutes, list(phases)

    def start(self, phase: str) -> float:
        """Seconds `phase` may take from now."""
        left = max(self.end - time.monotonic(), 0.0)
        share = SHARES[phase] / sum(SHARES[p] for p in self.todo)
        self.todo.remove(phase)
        return left * share


# -- phases ---------------------------------------------------------------------------------

def _fields(cls, **want) -> dict:
    """The keyword arguments `cls` (a dataclass) has: code that runs before and after a field is added."""
    have = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in want.items() if k in have}


def _overrides(pairs: list[str]) -> dict:
    """['n_seq=256', 'top_logprobs=0'] -> {'n_seq': 256, 'top_logprobs': 0} (JSON values, else strings)."""
    out = {}
    for p in pairs:
        k, _, v = p.partition("=")
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _capture_worker(target: str, prompts: list, out: str, cfg_kw: dict, max_tokens: int, deadline: float) -> None:
    """One capture process (or the only one): stops at `deadline` (time.time()) through capture()'s
    Ctrl-C path, which writes every finished answer before it returns."""
    from draft_training.capture import CaptureConfig, capture

    def progress(n: int) -> None:
        if time.time() >= deadline:
            raise KeyboardInterrupt

    try:
        capture(target, prompts, out, CaptureConfig(**cfg_kw), max_answer_tokens=max_tokens, progress=progress)
    except KeyboardInterrupt:
        pass


def merge_captures(parts: list[Path], dest: Path) -> dict:
    """Workers' data folders -> one folder Shards reads: shard files renamed in order, the
    manifest's lists joined and its totals summed."""
    from draft_training.shards import MANIFEST, save_manifest

    dest.mkdir(parents=True, exist_ok=True)
    merged = None
    for folder in parts:
        if not (folder / MANIFEST).exists():
            continue
        man = json.loads((folder / MANIFEST).read_text())
        if merged is None:
            merged = {**man, "shards": [], "done": []}
            for k in ("n_tokens", "n_answer_tokens", "n_sampled", "bytes"):
                if k in merged:
                    merged[k] = 0
        for sh in man["shards"]:
            name = f"shard-{len(merged['shards']):05d}"
            for f in folder.glob(sh["name"] + ".*"):
                os.replace(f, dest / (name + f.name[len(sh["name"]):]))
            merged["shards"].append({**sh, "name": name})
        merged["done"] += man["done"]
        for k in ("n_tokens", "n_answer_tokens", "n_sampled", "bytes"):
            if k in merged:
                merged[k] += man.get(k, 0)
        merged["seconds"] = max(merged.get("seconds", 0.0), man.get("seconds", 0.0))
        if "topk" in merged:
            merged["topk"] = max(merged["topk"], man.get("topk", 0))
    if merged is None:
        raise RuntimeError("no capture worker finished an answer before the capture deadline (a worker writes "
                           "its first shard only then). HINT: more --minutes, or fewer --workers on a slow machine")
    save_manifest(dest, merged)
    return merged


def phase_capture(a, target: str, work: Path, seconds: float) -> dict:
    from gguf_tools import check_gguf
    from gguf_tools.dflash import default_target_layers

    from draft_training.prompts import builtin_prompts

    meta = check_gguf(target).metadata
    taps = default_target_layers(int(meta[f"{meta['general.architecture']}.block_count"]))
    prompts = builtin_prompts(a.prompts, seed=a.seed)
    from draft_training.capture import CaptureConfig

    cfg_kw = _fields(CaptureConfig, target_layers=taps, n_seq=a.n_seq, max_new=a.max_new, n_batch=a.n_batch,
                     n_threads=a.threads, **_overrides(a.capture))
    deadline = time.time() + seconds
    outs = [work / f"capture-{i}" for i in range(a.workers)]
    per = -(-a.tokens // a.workers)
    _log(f"capture: {len(prompts)} prompts, {a.workers} x n_seq {cfg_kw.get('n_seq')}, {a.tokens} answer tokens "
         f"at most, {seconds:.0f} s")
    if a.workers == 1:
        _capture_worker(target, prompts, str(outs[0]), cfg_kw, per, deadline)
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # a fresh llama.cpp and CUDA context per worker
        procs = [ctx.Process(target=_capture_worker, args=(target, prompts[i::a.workers], str(outs[i]), cfg_kw,
                                                             per, deadline)) for i in range(a.workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    man = merge_captures(outs, work / "data")
    return {k: man.get(k) for k in ("n_tokens", "n_answer_tokens", "n_sampled", "bytes", "seconds")} | {
        "shards": len(man["shards"]), "taps": list(taps), "config": {k: v for k, v in cfg_kw.items()
                                                                     if k != "chat_template_vars"}}


def phase_train(a, target: str, work: Path, seconds: float):
    from draft_training.recipe import TrainConfig
    from draft_training.train import Trainer

    kw = _fields(TrainConfig, device=a.device, threads=a.threads, seed=a.seed, **_overrides(a.train))
    trainer = Trainer(target, work / "data", work / "train", TrainConfig(**kw), log=_log)
    wall_end = time.monotonic() + seconds * (1 - EVAL_RESERVE)

    def stop_on_time(t, m) -> None:
        if time.monotonic() >= wall_end:  # the loop ends at its next check; final eval and save still run
            t.budget_s = t.elapsed

    _log(f"train: {seconds:.0f} s on {kw.get('device', 'cpu')}")
    trainer.run(seconds * (1 - EVAL_RESERVE), progress=stop_on_time)
    last = trainer.history[-1] if trainer.history else {}
    return trainer, {"steps": trainer.step, "seconds": round(trainer.elapsed, 1), "config": kw,
                     "last": {k: v for k, v in last.items() if k != "eval"}, "eval": last.get("eval")}


def phase_export(trainer, target: str, out: Path, work: Path) -> dict:
    from draft_training.parts import split
    from engine.llama.model import Model
    from engine.speculative.drafters.dflash import inspect_draft

    draft = work / "draft.gguf"
    trainer.export(draft, name=f"flashdesk DFlash2 draft for {Path(target).stem} (GPU run)")
    m = Model(target, n_gpu_layers=0)  # a metadata check: no GPU memory needed
    try:
        info = inspect_draft(str(draft), m)
    finally:
        m.close()
    files = split(draft, out, max_parts=BACK_PARTS)
    return {"bytes": draft.stat().st_size, "parts": [p.name for p in files], "block_size": info.block_size,
            "top_k": info.top_k, "target_layers": list(info.target_layers)}


def _facts() -> dict:
    out = {"python": sys.version.split()[0]}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    try:
        import llama_cpp

        out["llama_system_info"] = llama_cpp.llama_print_system_info().decode(errors="replace")
    except Exception as e:  # a report field only
        out["llama_system_info"] = f"unavailable: {e}"
    return out


def cmd_run(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"args": vars(a), "phases": {}, "started": time.time()}
    plan = Plan(a.minutes, ([] if a.cpu else ["build"]) + ["capture", "train", "export"])

    def done(name: str, t0: float, budget: float, **facts) -> None:
        report["phases"][name] = {"seconds": round(time.monotonic() - t0, 1), "budget_s": round(budget, 1), **facts}
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))

    try:
        if a.cpu:
            target = a.target
        else:
            use_device_paths()
            stash_parts()
            target = str(join_model())
            t0, budget = time.monotonic(), plan.start("build")
            state = wait_build(budget)
            done("build", t0, budget, state=state)
            if state != "done":
                raise RuntimeError(f"llama.cpp build {state}; its log: {BUILD / 'log'}")
        work = Path(a.work) if a.work else (KEEP / "work" if not a.cpu else out / "work")
        shutil.rmtree(work, ignore_errors=True)  # one run's data: a resumed capture would mix settings
        report["facts"] = _facts()
        t0, budget = time.monotonic(), plan.start("capture")
        done("capture", t0, budget, **phase_capture(a, target, work, budget))
        t0, budget = time.monotonic(), plan.start("train")
        trainer, facts = phase_train(a, target, work, budget)
        done("train", t0, budget, **facts)
        t0, budget = time.monotonic(), plan.start("export")
        done("export", t0, budget, **phase_export(trainer, target, out, work))
        report["ok"] = True
    except BaseException as e:  # the report says what broke, then the error goes on
        report["ok"], report["error"] = False, f"{type(e).__name__}: {e}"
        raise
    finally:
        report["seconds"] = round(time.time() - report["started"], 1)
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
        if a.cpu and a.work is None:  # only the parts and the report stay in OUT
            shutil.rmtree(out / "work", ignore_errors=True)
    _log(f"done in {report['seconds']} s: {json.dumps(report['phases'], default=str)[:2000]}")
    return 0


def cmd_prepare(a) -> int:
    KEEP.mkdir(exist_ok=True)
    _log(f"wheels: {install_wheels()}")
    _log(f"model parts put aside: {stash_parts()}")
    _log(f"native library: {build_native()}")
    start_llama_build()
    if a.wait:
        _log(f"llama.cpp build: {wait_build(600)}")
    else:
        _log(f"llama.cpp build started in the background: {BUILD / 'log'}")
    return 0


def cmd_stash(a) -> int:
    _log(f"model parts put aside: {stash_parts()}; llama.cpp build {build_state()}")
    log = BUILD / "log"
    if log.exists():
        print("".join(log.read_text(errors="replace").splitlines(True)[-5:]), flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="draft_training/gpu_run.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="call 1: wheels, native library, build started, model part put aside")
    p.add_argument("--wait", action="store_true", help="wait for the llama.cpp build (at most 10 min)")
    p.set_defaults(func=cmd_prepare)
    sub.add_parser("stash", help="a middle call: put the carried model part aside").set_defaults(func=cmd_stash)
    r = sub.add_parser("run", help="the last call: capture, train, export into --out")
    r.add_argument("--out", required=True, help="folder for the draft's parts and report.json ($OUT)")
    r.add_argument("--minutes", type=float, default=8.0, help="total time plan of this call")
    r.add_argument("--cpu", action="store_true", help="no build, no device folders: the installed llama_cpp")
    r.add_argument("--tiny", action="store_true", help="toy sizes for a CPU check (prompts, answers, sequences)")
    r.add_argument("--target", help="target GGUF (--cpu); on the device the joined carried model")
    r.add_argument("--work", help="folder for captured data and checkpoints (default: .gpu-keep/work; --cpu: "
                                  "OUT/work, removed at the end)")
    r.add_argument("--prompts", type=int, default=40000, help="built-in prompts to draw")
    r.add_argument("--tokens", type=int, default=4_000_000, help="answer tokens to capture at most (disk: "
                                                                 "about 8 GB per million with prompts)")
    r.add_argument("--workers", type=int, default=4, help="capture processes (each up to 256 sequences)")
    r.add_argument("--n-seq", type=int, default=256, help="sequences per capture process (llama.cpp max 256)")
    r.add_argument("--n-batch", type=int, default=1024)
    r.add_argument("--max-new", type=int, default=288)
    r.add_argument("--threads", type=int, default=4)
    r.add_argument("--device", default="cuda")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--capture", nargs="*", default=[], metavar="FIELD=VALUE", help="more CaptureConfig fields")
    r.add_argument("--train", nargs="*", default=[], metavar="FIELD=VALUE", help="more TrainConfig fields")
    r.set_defaults(func=cmd_run)
    return ap


TINY = {"prompts": 6, "tokens": 400, "workers": 1, "n_seq": 3, "n_batch": 256, "max_new": 20, "threads": 2,
        "device": "cpu"}
TINY_TRAIN = ["n_keep=512", "n_seqs=2", "n_anchors=4", "eval_seqs=2", "warmup_steps=2", "checkpoint_every_s=1e9",
              "eval_every_s=1e9", "passes=null", "patience=0"]
TINY_CAPTURE = ["shard_tokens=150", "val_every=3"]


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "run":
        if a.cpu and not a.target:
            raise SystemExit("--cpu needs --target")
        if a.tiny:  # toy sizes unless given: flags given on the command line win
            given = set(argv if argv is not None else sys.argv[1:])
            for k, v in TINY.items():
                if f"--{k.replace('_', '-')}" not in given:
                    setattr(a, k, v)
            a.train, a.capture = TINY_TRAIN + a.train, TINY_CAPTURE + a.capture
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())
