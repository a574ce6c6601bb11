"""`flashdesk train-draft`: capture data, train, export and pair a DFlash 2 draft, resumably.

    flashdesk train-draft --target smollm2 [--prompts FILE ...] [--out PATH] [--budget 2h]
                          [--tokens 1M] [--resume] [--eval-prompts FILE] [--init-from paired]
                          [--samples 1] [--self-prompts 2000] [--passes 2]

Stages, each with a progress bar and each resumable after a kill (`--resume`): (1) the
target answers the prompt mix (built-in generator + the user's files) and the same decodes
capture its layer features into shards; (2) training for `--budget` of wall-clock time,
with checkpoints; (3) export to GGUF, offline tau on held-out sequences, and with
`--eval-prompts` online tau per path selector through the engine plus an acceptance plot;
(4) pairing with the target when it is a store model. `--init-from` continues a draft (the
paired one, or a file) on new prompts, e.g. a shop's own: the run then exports the draft it
started from unchanged unless training beat it on held-out sequences. Bulky intermediates live in
`--work` (default: the flashdesk home's `train/<target>` folder), never in the output.

What it is not: the training code itself (`train.py`) or the `flashdesk` entry point
(`server/cli.py` registers this sub-command and imports it only when it runs, so serving
never needs PyTorch).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

HINT_TORCH = "HINT: install the training extra: pip install 'flashdesk[train]' (PyTorch, CPU build)."


def parse_budget(text: str) -> float:
    """'2h', '90m', '1h30m', '45s', '600' (seconds) -> seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise argparse.ArgumentTypeError(f"budget {text!r}: use e.g. 2h, 90m, 1h30m or 600 (seconds)")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def parse_count(text: str) -> int:
    """'1M', '500k', '20000' -> int."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: use e.g. 1M, 500k or 20000")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()])


def add_parser(sub) -> None:
    s = sub.add_parser("train-draft", help="train a DFlash 2 draft for a model (needs the [train] extra)")
    s.add_argument("--target", required=True, help="store name or path to the target .gguf")
    s.add_argument("--prompts", nargs="*", default=[], help="your prompt/document files (.jsonl, .txt, .md)")
    s.add_argument("--out", help="draft .gguf to write (default: <work>/draft.gguf)")
    s.add_argument("--work", help="folder for data, checkpoints and reports (default: <home>/train/<target>)")
    s.add_argument("--budget", type=parse_budget, default=parse_budget("2h"), help="training time (default 2h)")
    s.add_argument("--tokens", type=parse_count, default=parse_count("1M"),
                   help="answer tokens to capture (default 1M; about 9 GB of features and top-k per million)")
    s.add_argument("--builtin", type=parse_count, default=parse_count("12k"), help="built-in prompts to draw")
    s.add_argument("--self-prompts", type=parse_count, default=0,
                   help="prompts the target writes itself (Magpie style) added to the mix (default 0)")
    s.add_argument("--samples", type=int, default=0,
                   help="extra answers per prompt sampled at a mild temperature (default 0; the recipe: 1-2)")
    s.add_argument("--resume", action="store_true", help="continue a killed run from its data and checkpoint")
    s.add_argument("--eval-prompts", help="prompts .jsonl for online tau through the engine after export")
    s.add_argument("--init-from", help="continue a draft: 'paired' (the target's) or a draft .gguf")
    # None: the recipe's default (TrainConfig in train.py, not imported here: it needs PyTorch)
    s.add_argument("--passes", type=float, help="passes over the data the schedule is sized to (0 = the budget)")
    s.add_argument("--n-layer", type=int, help="draft layers")
    s.add_argument("--vocab", type=parse_count, help="reduced draft vocabulary (0 = full)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--no-pair", action="store_true", help="do not pair the draft with a store target")
    s.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def run(a) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        return _fail(f"training needs PyTorch. {HINT_TORCH}")
    from engine.models.store import ModelStore
    from gguf_tools.dflash import capture_refusal

    store = ModelStore(a.home)
    target = store.resolve(a.target)
    why = capture_refusal(target.architecture)
    if why:
        return _fail(f"{target.name}: {why}. HINT: use prompt lookup (`--speculative lookup`) for this model.")
    init_from = None
    if a.init_from:
        init_from = target.draft_path if a.init_from == "paired" else a.init_from
        if not init_from:
            return _fail(f"{target.name} has no paired draft to continue. HINT: pass a draft .gguf to --init-from.")
        if not Path(init_from).is_file():
            return _fail(f"--init-from {init_from}: no such file")
    work = Path(a.work) if a.work else store.home / "train" / target.name
    if work.exists() and any(work.iterdir()) and not a.resume:
        return _fail(f"{work} already holds a run. HINT: add --resume to continue it, or pass another --work.")
    work.mkdir(parents=True, exist_ok=True)
    man = capture_stage(a, target, work)
    if man is None:
        return 130
    try:
        trainer = train_stage(a, target, work, init_from)
    except ValueError as e:  # a draft of another target or data; data with no training sequences
        return _fail(str(e))
    if trainer is None:
        return 130
    report = export_stage(a, target, work, man, trainer)
    if report["online"].get("mismatches"):
        return _fail(f"the draft changed the output on {report['online']['mismatches']}: it was not paired")
    if target.source.startswith(("catalog:", "import:")) and not a.no_pair:
        store.pair(target.name, report["draft"])
        print(f"    paired with {target.name}: `flashdesk serve --model {target.name}` uses it.")
    return 0


def _prompt_mix(a, target, work: Path) -> list[dict]:
    """Built-in prompts, the target's own (written once, kept in the work folder so a resumed run
    asks the same ones) and the user's files."""
    from .prompts import builtin_prompts
    from .user_prompts import file_prompts

    prompts = builtin_prompts(a.builtin, seed=a.seed)
    if a.self_prompts:
        from tqdm import tqdm

        from .self_prompts import self_prompts

        saved = work / "self-prompts.jsonl"
        mine = [json.loads(x) for x in saved.read_text("utf-8").splitlines()] if saved.exists() else []
        if len(mine) < a.self_prompts:
            bar = tqdm(total=a.self_prompts, desc="self-written prompts", file=sys.stderr)
            mine = self_prompts(target.path, a.self_prompts, seed=a.seed, n_threads=a.threads,
                                chat_template_vars=target.options.get("chat_template", {}),
                                progress=lambda n: bar.update(min(n, bar.total) - bar.n))
            bar.close()
            saved.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in mine), "utf-8")
        prompts += mine[: a.self_prompts]
    return prompts + file_prompts(a.prompts)


def capture_stage(a, target, work: Path) -> dict | None:
    """Stage 1: the target answers the prompt mix; its features, argmax and top-k go to work/data.
    None when stopped with Ctrl-C (the finished answers are kept)."""
    from tqdm import tqdm

    from gguf_tools import check_gguf
    from gguf_tools.dflash import default_target_layers

    from .capture import CaptureConfig, capture

    taps = default_target_layers(int(check_gguf(target.path).metadata[f"{target.architecture}.block_count"]))
    prompts = _prompt_mix(a, target, work)
    print(f"1/3 data: {target.name} answers {len(prompts)} prompts ({a.tokens} answer tokens at most"
          + (f", {a.samples} sampled answers each" if a.samples else "")
          + f"), features of layers {list(taps)} -> {work / 'data'}", flush=True)
    bar = tqdm(total=a.tokens, unit="tok", unit_scale=True, desc="answers", file=sys.stderr)
    seen = [0]

    def on_tokens(n: int) -> None:
        bar.update(n - seen[0])
        seen[0] = n

    # the catalog's template variables (Qwen3's enable_thinking=false): prompts as the server renders them
    cfg = CaptureConfig(target_layers=taps, n_threads=a.threads, samples=a.samples,
                        chat_template_vars=target.options.get("chat_template", {}))
    try:
        man = capture(target.path, prompts, work / "data", cfg, max_answer_tokens=a.tokens, progress=on_tokens)
    except KeyboardInterrupt:
        print("\nstopped; the finished answers are saved. HINT: run the same command with --resume to continue.",
              file=sys.stderr)
        return None
    bar.close()
    print(f"    {man['n_answer_tokens']} answer tokens ({man['n_tokens']} with prompts) in {len(man['shards'])} "
          f"shards, {man['bytes'] / 1e9:.2f} GB, {man['seconds'] / 60:.0f} min of capture", flush=True)
    return man


def train_stage(a, target, work: Path, init_from: str | None):
    """Stage 2: train (or continue) the draft for the budget. None when stopped with Ctrl-C
    (the checkpoint is saved)."""
    from tqdm import tqdm

    from .recipe import TrainConfig
    from .train import Trainer

    print(f"2/3 training for {a.budget / 60:.0f} min (checkpoints in {work / 'train'})"
          + (f", continuing {Path(init_from).name}" if init_from else ""), flush=True)
    given = {"n_layer": a.n_layer, "n_keep": a.vocab, "passes": a.passes}  # 0 vocab, 0 passes: none
    given = {k: (v if k == "n_layer" else v or None) for k, v in given.items() if v is not None}
    cfg = TrainConfig(seed=a.seed, threads=a.threads, init_from=init_from, **given)
    trainer = Trainer(target.path, work / "data", work / "train", cfg, resume=a.resume,
                      log=lambda msg: tqdm.write(msg, file=sys.stderr))
    tbar = tqdm(total=round(a.budget), initial=round(trainer.elapsed), unit="s", desc="training", file=sys.stderr)

    def on_step(t: Trainer, m: dict) -> None:
        tbar.update(round(t.elapsed) - tbar.n)
        tbar.set_postfix(step=t.step, loss=f"{m['loss']:.3f}", top1=f"{m['top1_acc']:.2f}", refresh=False)

    try:
        trainer.run(a.budget, progress=on_step)
    except KeyboardInterrupt:
        trainer.save()
        print("\nstopped; checkpoint saved. HINT: run the same command with --resume to continue.", file=sys.stderr)
        return None
    tbar.close()
    return trainer


def export_stage(a, target, work: Path, man: dict, trainer) -> dict:
    """Stage 3: export the draft (its best evaluation), measure it online with --eval-prompts,
    write report.json, MODEL_CARD.md and the plots. Returns the report."""
    from tqdm import tqdm

    from .card import model_card
    from .evaluate import online_eval, plot_acceptance, plot_history

    out = Path(a.out) if a.out else work / "draft.gguf"
    name = f"flashdesk DFlash2 draft for {target.name}"
    trainer.export(out, name=name)
    offline = trainer.best_eval
    report = {"target": target.name, "draft": str(out), "draft_bytes": out.stat().st_size, "created": time.time(),
              "data": {k: man[k] for k in ("n_tokens", "n_answer_tokens", "bytes", "seconds")}
              | {"n_sampled": man.get("n_sampled", 0)},
              "train": trainer.report(), "offline": offline, "online": {}}
    print(f"3/3 exported {out} ({out.stat().st_size / 1e6:.1f} MB); offline tau {offline.get('tau')}", flush=True)
    curves = {f"offline {s}": v for s, v in offline.get("slot_accept", {}).items()}
    if a.eval_prompts:
        evp = [json.loads(line) for line in Path(a.eval_prompts).read_text("utf-8").splitlines() if line.strip()]
        ebar = tqdm(total=len(evp), desc="online eval", file=sys.stderr)
        online = online_eval(target.path, out, evp, block=trainer.cfg.block, threads=a.threads,
                             progress=lambda i: ebar.update(i - ebar.n))
        ebar.close()
        report["online"] = online
        curves.update({f"online {s}": v["slot_accept"] for s, v in online["selectors"].items()})
        print("    online tau " + ", ".join(f"{s} {v['tau']}" for s, v in online["selectors"].items())
              + ("" if not online["mismatches"] else f"; OUTPUT DIFFERED FROM PLAIN: {online['mismatches']}"))
    if curves:
        plot_acceptance(work / "acceptance.png", curves, f"{name}, block {trainer.cfg.block}")
    plot_history(work / "learning.png", trainer.history, name)
    (work / "report.json").write_text(json.dumps(report, indent=1))
    (work / "MODEL_CARD.md").write_text(model_card(report), "utf-8")
    print(f"    report: {work / 'report.json'}, model card: {work / 'MODEL_CARD.md'}, plots: "
          f"{work / 'acceptance.png'}, {work / 'learning.png'}")
    return report
