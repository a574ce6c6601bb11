"""Online evaluation of an exported draft through the engine, and the acceptance plot.

What it is: `online_eval` loads the target with the draft GGUF in the engine and decodes
prompts greedily with speculation fixed at one block length, once per path selector
(and plainly once), and reports per selector the tau (tokens per target verify),
acceptance per block position and whether every output equalled plain decoding (it must:
lossless). `plot_acceptance` draws acceptance per position for offline and online
results into a PNG. What it is not: a speed benchmark (bench/spec.py is).
"""

from __future__ import annotations

import os
from dataclasses import asdict

from engine import Engine, EngineConfig, SamplingParams
from engine.speculative.params import SpecParams

from .loss import SELECTORS

GREEDY = SamplingParams(temperature=0)


def online_eval(target_path: str | os.PathLike, draft_path: str | os.PathLike, prompts: list[dict], *,
                block: int = 8, max_tokens: int = 128, selectors=SELECTORS, threads: int = 2, progress=None) -> dict:
    """prompts: {"messages", optional "max_tokens", optional "category"}. Returns {"selectors": {name:
    {...}}, "categories": {category: {selector: tau}}, "n_prompts", "mismatches": [(prompt index, selector)]}."""
    eng = Engine.load(str(target_path), EngineConfig(n_ctx=2048, n_parallel=1, n_threads=threads,
                                                     draft=str(draft_path)))
    acc = {s: {"verifies": 0, "committed": 0, "accepted_at": [0] * (block - 1), "drafted_at": [0] * (block - 1)}
           for s in selectors}
    by_cat: dict[str, dict[str, list[int]]] = {}  # category -> selector -> [verifies, committed]
    mismatches = []
    try:
        if "dflash" not in eng.drafters:
            raise ValueError(f"the engine did not attach the draft {draft_path}")
        for i, p in enumerate(prompts):
            ids = eng.tokenize_prompt(eng.render_chat(p["messages"]))
            n = min(int(p.get("max_tokens", max_tokens)), max_tokens)
            ref = eng.complete(ids, sampling=GREEDY, max_tokens=n, speculative=SpecParams(mode="off")).tokens
            for s in selectors:
                c = eng.complete(ids, sampling=GREEDY, max_tokens=n,
                                 speculative=SpecParams(mode="dflash", selector=s, block=block))
                if c.tokens != ref:
                    mismatches.append((i, s))
                st = asdict(c.usage.speculation) if c.usage.speculation else {}
                a = acc[s]
                a["verifies"] += st.get("verifies", 0)
                a["committed"] += st.get("accepted", 0) + st.get("verifies", 0)
                tally = by_cat.setdefault(p.get("category", "all"), {}).setdefault(s, [0, 0])
                tally[0] += st.get("verifies", 0)
                tally[1] += st.get("accepted", 0) + st.get("verifies", 0)
                for k, (x, d) in enumerate(zip(st.get("accepted_at", []), st.get("drafted_at", []))):
                    if k < block - 1:
                        a["accepted_at"][k] += x
                        a["drafted_at"][k] += d
            if progress is not None:
                progress(i + 1)
    finally:
        eng.close()
    out = {}
    for s, a in acc.items():
        # P(position k accepted | positions < k accepted), as the offline slot_accept
        cond = [round(a["accepted_at"][k] / (a["accepted_at"][k - 1] if k else a["drafted_at"][0]), 3)
                if (a["accepted_at"][k - 1] if k else a["drafted_at"][0]) else 0.0 for k in range(block - 1)]
        out[s] = {"tau": round(a["committed"] / a["verifies"], 3) if a["verifies"] else 0.0,
                  "verifies": a["verifies"], "slot_accept": cond}
    cats = {cat: {s: round(c / v, 3) if v else 0.0 for s, (v, c) in sel.items()} for cat, sel in by_cat.items()}
    return {"selectors": out, "categories": cats, "n_prompts": len(prompts), "block": block, "mismatches": mismatches}


def plot_acceptance(path: str | os.PathLike, curves: dict[str, list[float]], title: str) -> None:
    """curves: label -> acceptance per block position (conditional on the earlier ones)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for label, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker="o", label=label)
    ax.set_xlabel("block position (1 = first token after the anchor)")
    ax.set_ylabel("P(accepted | earlier accepted)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_history(path: str | os.PathLike, history: list[dict], title: str) -> None:
    """Learning curves from the trainer's history: losses (smoothed) and offline tau per selector."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib import pyplot as plt

    if not history:
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    steps = np.array([h["step"] for h in history])
    w = max(1, len(history) // 50)  # moving average over ~2% of the run
    for key in ("block_ce", "selector_ce"):
        y = np.convolve([h[key] for h in history], np.ones(w) / w, mode="valid")
        a1.plot(steps[w - 1:], y, label=key)
    a1.set_xlabel("step")
    a1.set_ylabel("loss")
    a1.legend(fontsize=8)
    a1.grid(alpha=0.3)
    evals = [h for h in history if h.get("eval", {}).get("tau")]
    for s in SELECTORS:
        a2.plot([h["step"] for h in evals], [h["eval"]["tau"][s] for h in evals], marker="o", label=s)
    a2.set_xlabel("step")
    a2.set_ylabel("offline trajectory tau (held out)")
    a2.legend(fontsize=8)
    a2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
