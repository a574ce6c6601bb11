"""What rolling back rejected tokens costs, per architecture, on its tiny random target.

A speculative step decodes a verify of B rows and drops the rejected tail. Per architecture:
- attention (and a full-size sliding-window cache): the drop is `llama_memory_seq_rm`, cell
  bookkeeping on the host;
- recurrent state (qwen35, qwen35moe): the drop reads one of llama.cpp's per-sequence state
  snapshots, which every decode writes for its last rows (`n_rs_seq`, on the device where the
  state lives). That writing is the cost: the same verify steps are timed on a context with
  snapshots and rollbacks (A) and on one without either (B), alternated A B A B, and the share
  is (A - B) / A of a step.
For recurrent targets it also times the design not taken: a host-memory checkpoint of the state
before each verify (`llama_state_seq_get_data_ext`, partial-only) and its restore after, plus
the re-decode of the accepted rows that a restore needs — the trap reported at ~70% of a GPU step.

    .venv/bin/python -m bench spec --rollback [--archs qwen35,gemma4] [--steps 48] [--rounds 5]

Tiny CPU models make every share an upper bound of what the mechanism adds: their steps are
short, so fixed costs weigh more than on an 8-30B target.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model
from gguf_tools.random_targets import architectures, write_random_target

BLOCK = 8  # verify rows: anchor + 7 drafted
PREFIX = 64
TOKENS = [(37 * i + 5) % 49152 for i in range(4096)]


def _decode(ctx: Context, start: int, n: int, logits: bool = True) -> None:
    ctx.batch.clear()
    for j in range(n):
        ctx.batch.add(TOKENS[start + j], start + j, 0, logits=logits)
    ctx.decode(ctx.batch)


def _reset(ctx: Context) -> int:
    ctx.forget(0)
    _decode(ctx, 0, PREFIX, logits=False)
    return PREFIX


def _steps(ctx: Context, n: int, rollback: bool, checkpoint: bool = False) -> tuple[list[float], list[float]]:
    """n verify steps; per step (ms): the whole step, and its rollback part (drop, or checkpoint +
    restore + re-decode). Accepted counts cycle through 0..B-1, the same for every side."""
    step_ms, part_ms = [], []
    p = _reset(ctx)
    for i in range(n):
        if i % 8 == 0:
            p = _reset(ctx)  # keep the sequence short and alike on both sides (not timed)
        a = i % BLOCK  # accepted path tokens this step
        t0 = time.perf_counter()
        extra = 0.0
        if checkpoint:
            c0 = time.perf_counter()
            saved = ctx.state_of(0)
            extra += time.perf_counter() - c0
        _decode(ctx, p, BLOCK)
        r0 = time.perf_counter()
        if rollback:
            assert ctx.forget(0, p + 1 + a), "the rollback was refused"
        elif checkpoint:  # restore the state before the verify, drop the rows, decode the kept ones again
            # (timing only: a real restore would also drop just the attention tail, which llama.cpp's
            # hybrid memory cannot do apart from the recurrent part; the cleared sequence is cheaper)
            ctx.forget(0)
            ctx.set_state(0, saved)
            _decode(ctx, p, a + 1)
        extra += time.perf_counter() - r0
        step_ms.append((time.perf_counter() - t0) * 1000.0)
        part_ms.append(extra * 1000.0)
        p += (1 + a) if rollback or checkpoint else BLOCK
    return step_ms, part_ms


def measure(arch: str, tokenizer_from: str, steps: int, rounds: int, threads: int) -> dict:
    folder = Path(tempfile.mkdtemp())
    model = Model(write_random_target(folder / f"tiny-{arch}.gguf", arch, tokenizer_from=tokenizer_from))
    cfg = dict(n_ctx_seq=1024, n_seq=1, n_batch=512, n_threads=threads)
    with_rs, without = Context(model, ContextConfig(**cfg, rollback=BLOCK - 1)), Context(model, ContextConfig(**cfg))
    try:
        _steps(with_rs, BLOCK, rollback=True)  # warm-up, not timed: first decodes of each shape build graphs
        _steps(without, BLOCK, rollback=False, checkpoint=model.recurrent)
        a_step, a_part, b_step, c_step, c_part = [], [], [], [], []
        for _ in range(rounds):  # A B (C) A B (C) ...
            s, part = _steps(with_rs, steps, rollback=True)
            a_step += s
            a_part += part
            b_step += _steps(without, steps, rollback=False)[0]
            if model.recurrent:
                s, part = _steps(without, steps, rollback=False, checkpoint=True)
                c_step += s
                c_part += part
        a, b = statistics.median(a_step), statistics.median(b_step)
        row = {"arch": arch, "memory": "recurrent" if model.recurrent else
               ("sliding-window" if model.n_swa else "attention"),
               "snapshots": with_rs.rollback, "step_ms": round(a, 3), "no_rollback_step_ms": round(b, 3),
               "drop_ms": round(statistics.median(a_part), 4),
               # recurrent: snapshot writing inside the decode + the drop; attention: the drop alone
               "rollback_share_pct": round(100 * ((a - b) if model.recurrent else statistics.median(a_part)) / a, 2)}
        if c_step:
            c = statistics.median(c_step)
            row |= {"host_checkpoint_step_ms": round(c, 3),
                    "host_checkpoint_share_pct": round(100 * statistics.median(c_part) / c, 1)}
        return row
    finally:
        with_rs.close()
        without.close()
        model.close()


def run(tokenizer_from: str, archs: list[str] | None, steps: int, rounds: int, threads: int) -> list[dict]:
    return [measure(a, tokenizer_from, steps, rounds, threads) for a in (archs or architectures())]


def print_table(rows: list[dict]) -> None:
    print(f"{'arch':14} {'memory':15} {'snap':>4} {'step ms':>8} {'plain-mem ms':>12} {'drop ms':>8} "
          f"{'rollback %':>10} {'host ckpt %':>11}")
    for r in rows:
        print(f"{r['arch']:14} {r['memory']:15} {r['snapshots'] if r['snapshots'] is not None else '-':>4} "
              f"{r['step_ms']:8.3f} {r['no_rollback_step_ms']:12.3f} {r['drop_ms']:8.4f} "
              f"{r['rollback_share_pct']:10.2f} {r.get('host_checkpoint_share_pct', '-'):>11}")
