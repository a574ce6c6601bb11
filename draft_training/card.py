"""The model card of a trained draft: how it was made and what it measured, from report.json.

What it is: `model_card(report)` renders Markdown from the report `flashdesk train-draft`
writes (data, training with its recipe switches, offline and online acceptance, per-category
online tau and an A/B table when the report holds them). A shipped draft keeps its card
beside the GGUF. What it is not: a place for claims the report does not hold: every line
comes from a report field, and a missing field is left out, not guessed.
"""

from __future__ import annotations

from engine.speculative.params import SELECTORS

# the TrainConfig fields that make the recipe (train.py); shown as "name value"
SWITCHES = ("position_weights", "kl_weight", "codebooks", "warm_start", "init_from", "feature_noise", "passes",
            "patience", "min_delta")


def _row(name: str, vals: dict) -> str:
    return f"| {name} | " + " | ".join(str(vals.get(s, "-")) for s in SELECTORS) + " |"


def _training(t: dict) -> list[str]:
    tc = t["config"]
    where = t.get("hardware") or f"{tc.get('threads', '?')} CPU threads"
    line = (f"- Training: {t['steps']:,} steps"
            + (f" ({t['passes_done']:.2f} passes over the train anchors)" if t.get("passes_done") is not None else "")
            + f", {t['seconds'] / 60:.0f} min on {where}, seed {tc['seed']}, AdamW lr {tc['lr']} (codebooks "
            f"x{tc['codebook_lr_mult']}), batch {tc['n_seqs']} sequences x {tc['n_anchors']} blocks, selector weight "
            f"{tc['selector_weight']}.")
    weights = tc.get("position_weights", "decay")
    switches = [f"{k} {tc[k]}" for k in SWITCHES if k in tc and tc[k] is not None and tc[k] != ""]
    if weights == "decay":
        switches.insert(1, f"decay {tc['decay']}")
    elif "dpace_alpha" in tc:
        switches.insert(1, f"dpace_alpha {tc['dpace_alpha']}")
    out = [line, "- Recipe switches: " + ", ".join(switches) + "."]
    if t.get("stopped") or t.get("best_step") is not None:
        out.append("- Stopped: " + (t.get("stopped") or "time budget spent")
                   + (f"; exported the best evaluation, step {t['best_step']:,}." if t.get("best_step") else "."))
    return out


def model_card(report: dict, notes: str = "") -> str:
    d, t = report["data"], report["train"]
    dc, tc = t["draft_config"], t["config"]
    off = report.get("offline", {})
    on = report.get("online", {})
    lines = [
        f"# {dc.get('name', 'DFlash 2 draft')}",
        "",
        f"A DFlash 2 draft (llama.cpp architecture `dflash`) for the target `{report['target']}`, trained by "
        "`flashdesk train-draft` on the target's own greedy answers (self-distillation). Lossless: the engine "
        "verifies every drafted token against the target, so output is identical to plain decoding; the draft "
        "only changes speed.",
        "",
        "## How it was made",
        "",
        f"- Data: {d['n_answer_tokens']:,} answer tokens ({d['n_tokens']:,} with prompts), "
        f"{d['bytes'] / 1e9:.2f} GB of fp16 features, {d['seconds'] / 60:.0f} min of capture.",
        f"- Draft: {dc['n_layer']} layers, block {dc['block_size']}, K = {dc['selector_top_k']} candidates, "
        f"selector rank {dc['selector_rank']}, taps {dc['target_layers']}, "
        + (f"reduced vocabulary of {tc['n_keep']} ids (d2t)" if tc.get("n_keep") else "full vocabulary")
        + f"; {report.get('draft_bytes', 0) / 1e6:.1f} MB.",
        *_training(t),
        "",
        "## What it measured (block 8, temperature 0)",
        "",
        "tau = tokens committed per target verify (accepted + the target's own next token).",
        "",
        "| tau | " + " | ".join(SELECTORS) + " |",
        "|---" * (len(SELECTORS) + 1) + "|",
    ]
    start = t.get("start_eval") or {}
    if start.get("tau"):
        lines.append(_row(f"offline, {tc.get('init_from')} before training", start["tau"]))
    if off.get("tau"):
        lines.append(_row(f"offline, {off.get('n_seqs')} held-out sequences", off["tau"]))
    if on.get("selectors"):
        taus = {s: v["tau"] for s, v in on["selectors"].items()}
        lines.append(_row(f"online, {on.get('n_prompts')} dev prompts", taus))
        for cat, v in (on.get("categories") or {}).items():
            lines.append(_row(f"online, {cat}", v))
        lines += ["", "Online acceptance per block position (given the earlier ones were accepted):", "",
                  "| selector | " + " | ".join(str(i + 1) for i in range(on["block"] - 1)) + " |",
                  "|---|" + "---|" * (on["block"] - 1)]
        for s, v in on["selectors"].items():
            lines.append(f"| {s} | " + " | ".join(f"{x:.2f}" for x in v["slot_accept"]) + " |")
        lines += ["", "Outputs equal to plain decoding: " + ("all" if not on.get("mismatches") else
                                                              f"NO, {on['mismatches']}")]
    if report.get("ab"):
        lines += ["", "## A/B (one change at a time, same data)", "",
                  "| change | a | b | metric |", "|---|---|---|---|"]
        lines += [f"| {r['change']} | {r['a']} | {r['b']} | {r['metric']} |" for r in report["ab"]]
    if notes:
        lines += ["", "## Notes", "", notes.strip()]
    return "\n".join(lines) + "\n"
