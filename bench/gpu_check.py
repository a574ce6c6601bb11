"""The GPU check of flashdesk's batch-invariant patch (native/llama-patches), in one run.

On a GPU machine, after bench/gpu_build.sh has built the patched llama.cpp with CUDA:

    LLAMA_CPP_LIB_PATH=build/gpu/lib .venv/bin/python -m bench gpu_check all --model MODEL.gguf [--draft D.gguf]
    .venv/bin/python -m bench gpu_check random-model --model OUT.gguf  # an 8B-shaped llama, random Q4_K_M weights

`all` runs each part in a child process twice (`gpu_check exactness|speculative|cost`), with the
mode on and with GGML_BATCH_INVARIANT=0 (read once per process), into one record:
  exactness    16 tokens decoded singly, then in chunks of 2..16 at every offset, after a 40- and
               a 250-token prompt (chunks then cross n_kv's 256 padding); and 4 sequences (37, 120,
               250, 300 prompt tokens) decoded together against each alone. Every row's logits
               compared byte for byte. With the mode off, rows must differ (the control).
  speculative  greedy output with lookup and DFlash against plain, 1 and 4 sequences, on the dev
               prompts (through the engine, which caps verify rows at the band itself).
  cost         c(k), one decode of k rows after 256 tokens, k = 1..16 (median of --reps), and
               plain decoding's tok/s.
On the CPU (`--smoke`: fewer sizes and prompts) it runs the same code: every row is exact, and the
control cannot differ there, which the report says.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.datasets import dev_prompts
from bench.harness import ROOT
from bench.lib import Record
from engine.llama import ggml
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model

N = 16
MULTI_PROMPTS = (37, 120, 250, 300)


def filler(n: int, n_vocab: int, salt: int = 0) -> list[int]:
    return [(31 * i + 7 + 101 * salt) % n_vocab for i in range(n)]


def logits_of(ctx: Context, seq: int, toks: list[int], start: int) -> list[bytes]:
    b = ctx.batch
    b.clear()
    rows = [b.add(t, start + j, seq, logits=True) for j, t in enumerate(toks)]
    ctx.decode(b)
    return [np.array(r, dtype=np.float32).tobytes() for r in ctx.logits(rows)]


def prefill(ctx: Context, seq: int, toks: list[int]) -> None:
    b = ctx.batch
    for s in range(0, len(toks), b.capacity):
        b.clear()
        for j, t in enumerate(toks[s:s + b.capacity]):
            b.add(t, s + j, seq, logits=False)
        ctx.decode(b)


def exactness(model: Model, smoke: bool) -> dict:
    """Which (prompt, k, offset) give rows other than single tokens, and the multi-sequence case."""
    ctx = Context(model, ContextConfig(n_ctx_seq=512, n_seq=4, n_batch=512, n_threads=os.cpu_count() or 2))
    v = model.n_vocab
    toks = filler(N, v, salt=1)
    out = {"chunks": [], "multi": []}
    try:
        for p in (40,) if smoke else (40, 250):
            prompt = filler(p, v)
            prefill(ctx, 0, prompt)
            ref = [logits_of(ctx, 0, [t], p + j)[0] for j, t in enumerate(toks)]
            for k in (2, 5, 8) if smoke else range(2, N + 1):
                for o in range(k):
                    if not ctx.forget(0, p):  # a recurrent memory cannot drop a tail: the prompt again
                        ctx.forget(0)
                        prefill(ctx, 0, prompt)
                    got = [logits_of(ctx, 0, [toks[j]], p + j)[0] for j in range(o)]
                    for s in range(o, N, k):
                        got += logits_of(ctx, 0, toks[s:s + k], p + s)
                    bad = [j for j in range(N) if got[j] != ref[j]]
                    diff = max((float(np.max(np.abs(np.frombuffer(got[j], np.float32) -
                                                     np.frombuffer(ref[j], np.float32)))) for j in bad), default=0.0)
                    out["chunks"].append({"prompt": p, "k": k, "offset": o, "rows_differ": bad, "max_diff": diff})
            ctx.forget(0)
        # four sequences, one token each per decode, together against alone
        prompts = [filler(n, v, salt=2 + i) for i, n in enumerate(MULTI_PROMPTS[:2] if smoke else MULTI_PROMPTS)]
        alone = []
        for i, pr in enumerate(prompts):
            prefill(ctx, i, pr)
            alone.append([logits_of(ctx, i, [t], len(pr) + j)[0] for j, t in enumerate(toks[:4])])
            ctx.forget(i)
        for i, pr in enumerate(prompts):
            prefill(ctx, i, pr)
        together = [[] for _ in prompts]
        for j in range(4):
            b = ctx.batch
            b.clear()
            rows = [b.add(toks[j], len(pr) + j, i, logits=True) for i, pr in enumerate(prompts)]
            ctx.decode(b)
            for i, r in enumerate(rows):
                together[i].append(np.array(ctx.logits([r])[0], dtype=np.float32).tobytes())
        for i, pr in enumerate(prompts):
            differ = [j for j in range(4) if together[i][j] != alone[i][j]]
            out["multi"].append({"prompt": len(pr), "rows_differ": differ})
            ctx.forget(i)
    finally:
        ctx.close()
    out["exact"] = not any(c["rows_differ"] for c in out["chunks"] + out["multi"])
    return out


def cost(model: Model, reps: int) -> dict:
    """c(k) after 256 tokens of history, and plain decoding's tokens per second."""
    ctx = Context(model, ContextConfig(n_ctx_seq=512, n_seq=1, n_batch=512, n_threads=os.cpu_count() or 2))
    v = model.n_vocab
    try:
        prefill(ctx, 0, filler(256, v))
        ms = {}
        for k in range(1, N + 1):
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                logits_of(ctx, 0, filler(k, v, salt=k), 256)
                times.append((time.perf_counter() - t0) * 1000.0)
                ctx.forget(0, 256)
            ms[k] = statistics.median(times)
        t0, n = time.perf_counter(), 64
        for j in range(n):
            logits_of(ctx, 0, [filler(1, v, salt=j)[0]], 256 + j)
        return {"c_ms": ms, "c_ratio": {k: ms[k] / ms[1] for k in ms}, "plain_tok_s": n / (time.perf_counter() - t0)}
    finally:
        ctx.close()


def speculative(model_path: str, draft: str | None, smoke: bool) -> dict:
    """Greedy lookup and DFlash output against plain, one and four sequences at a time."""
    from bench.lib import GREEDY as greedy
    from engine import Completion, Engine, EngineConfig
    from engine.speculative.params import SpecParams

    prompts = dev_prompts()[::12 if smoke else 3]
    eng = Engine.load(model_path, EngineConfig(n_ctx=2048, n_parallel=4, n_threads=os.cpu_count() or 2,
                                               draft=draft, spec_inexact=True))
    try:
        eng.speculation.curve_ready.wait(300)

        def run(spec, parallel):
            out = {}
            for i in range(0, len(prompts), parallel):
                hs = {p["id"]: eng.generate(eng.render_chat(p["messages"]), sampling=greedy, max_tokens=p["max_tokens"],
                                            speculative=spec) for p in prompts[i:i + parallel]}
                out |= {k: Completion.collect(iter(h)).tokens for k, h in hs.items()}
            return out

        plain = run(SpecParams(mode="off"), 1)
        ex = eng.speculation.exactness
        res = {"exact_at_load": ex.exact, "why": ex.why, "max_rows": ex.max_rows, "runs": []}
        for mode in ["lookup"] + (["dflash"] if "dflash" in eng.drafters else []):
            for parallel in (1, 4):
                got = run(SpecParams(mode=mode, block=8), parallel)
                res["runs"].append({"mode": mode, "parallel": parallel,
                                    "differ": sorted(k for k in plain if got[k] != plain[k]), "prompts": len(plain)})
        return res
    finally:
        eng.close()


def part(args) -> None:
    """One part in this process, with whatever GGML_BATCH_INVARIANT the parent set."""
    feature = ggml.batch_invariant()
    if args.command == "speculative":
        out = speculative(args.model, args.draft, args.smoke)
    else:
        model = Model(args.model)
        try:
            out = exactness(model, args.smoke) if args.command == "exactness" else cost(model, args.reps)
        finally:
            model.close()
    print(json.dumps({"feature": feature, **out}))


def child(args, name: str, switch: str) -> dict:
    env = dict(os.environ, GGML_BATCH_INVARIANT=switch)
    cmd = [sys.executable, "-m", "bench", "gpu_check", name, "--model", args.model, "--reps", str(args.reps)]
    cmd += (["--draft", args.draft] if args.draft else []) + (["--smoke"] if args.smoke else [])
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if r.returncode:
        return {"error": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


SYNTHETIC_VOCAB = 32000  # llama 2's size: the output matmul's real shape


def random_model(out: Path, n_layer: int, n_embd: int, tokenizer_from: str | None = None,
                 quant: str = "Q4_K_M") -> None:
    """An 8B-shaped llama (32 layers, 4096 wide, GQA 32/8, FFN 14336) with random F16 weights,
    quantized to `quant` (Q4_K_M; Q4_0, Q8_0, ...): real kernel shapes for cost and exactness, not for
    acceptance. Written on the GPU machine itself (16 GB before quantizing), so nothing has to travel
    there. Its tokenizer is the GGUF `tokenizer_from`'s, or a synthetic SentencePiece-style one of
    SYNTHETIC_VOCAB tokens."""
    import gguf

    from gguf_tools.quantize import quantize

    n_head, n_kv, n_ff = n_embd // 128, max(1, n_embd // 512), int(n_embd * 3.5)
    f16 = out.with_suffix(".f16.gguf")
    w = gguf.GGUFWriter(str(f16), "llama")
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    if tokenizer_from:
        src = gguf.GGUFReader(tokenizer_from)
        for field in src.fields.values():
            if field.name.startswith("tokenizer."):
                w.add_key_value(field.name, field.contents(), field.types[0],
                                sub_type=field.types[-1] if len(field.types) > 1 else None)
        n_vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    else:  # <unk> <s> </s>, the 256 byte tokens, then plain pieces
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
        tokens += [f"\u2581t{i}" for i in range(SYNTHETIC_VOCAB - len(tokens))]
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(SYNTHETIC_VOCAB - 259)])
        w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (SYNTHETIC_VOCAB - 259))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        n_vocab = SYNTHETIC_VOCAB
    rng = np.random.default_rng(0)

    def rand(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", rand(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", rand(n_vocab, n_embd))
    hd = n_embd // n_head
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(p + "attn_q.weight", rand(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", rand(n_kv * hd, n_embd))
        w.add_tensor(p + "attn_v.weight", rand(n_kv * hd, n_embd))
        w.add_tensor(p + "attn_output.weight", rand(n_embd, n_embd))
        w.add_tensor(p + "ffn_gate.weight", rand(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    quantize(f16, out, quant)
    f16.unlink()


def add_arguments(ap) -> None:
    ap.add_argument("command", choices=("all", "exactness", "speculative", "cost", "random-model"),
                    help="all: every part, on and off, each in a child; a part: it alone, here; "
                         "random-model: write a random model to --model")
    ap.add_argument("--draft")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="fewer sizes and prompts (a CPU try of the script)")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--embd", type=int, default=4096)
    ap.add_argument("--quant", default="Q4_K_M", help="random-model: the quantization (Q4_K_M, Q4_0, Q8_0, ...)")
    ap.add_argument("--tokenizer-from", help="random-model: a GGUF whose tokenizer it gets (default: a synthetic one)")


def run(args) -> Record | int:
    if not args.model:
        raise SystemExit("gpu_check: --model is missing (the GGUF to check, or for random-model the one to write)")
    if args.command == "random-model":
        random_model(Path(args.model), args.layers, args.embd, args.tokenizer_from, args.quant)
        return 0
    if args.command != "all":
        part(args)
        return 0
    report = {"system_info": ggml.system_info()}
    for name in ("exactness", "speculative", "cost"):
        report[name] = {"on": child(args, name, "1"), "off": child(args, name, "0")}
    ex = report["exactness"]
    report["summary"] = {
        "exact_with_patch": ex["on"].get("exact"),
        "control_differs": ex["off"].get("exact") is False,  # False on the CPU: nothing to switch off there
        "spec_equal_plain": all(not r["differ"] for r in report["speculative"]["on"].get("runs", [{"differ": [1]}])),
        "c_ratio_on": report["cost"]["on"].get("c_ratio"), "c_ratio_off": report["cost"]["off"].get("c_ratio"),
        "plain_tok_s": {m: report["cost"][m].get("plain_tok_s") for m in ("on", "off")},
    }
    print(json.dumps(report["summary"], indent=1))
    return Record("gpu_check", {"draft": args.draft, "reps": args.reps, "smoke": args.smoke},
                  ratios={f"c({k})/c(1) {m}": (report["summary"][f"c_ratio_{m}"] or {}).get(str(k))
                          for m in ("on", "off") for k in (2, 4, 8, 16)},
                  figures=report, model={"path": args.model},
                  ok=bool(report["summary"]["exact_with_patch"] and report["summary"]["spec_equal_plain"]))
