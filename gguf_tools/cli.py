"""The GGUF tools as `flashdesk` sub-commands: inspect, quantize, convert, export-hf.

    flashdesk inspect FILE.gguf [--json]
    flashdesk quantize IN.gguf OUT.gguf --type Q4_K_M [--threads N] [--allow-requantize] [--force]
    flashdesk convert HF_DIR [--out PATH] [--outtype f32|f16|bf16|q8_0]   (gguf_tools/convert/cli.py)
    flashdesk export-hf FILE.gguf OUT_DIR [--dtype float32|float16|bfloat16]

`server/cli.py` registers these with `add_parsers(sub)`; the work is done by the library
functions (`gguf_tools.inspect.inspect_gguf`, `gguf_tools.quantize.quantize`), which the UI
can call too. Exit status 2 for a refused request or a broken file (one line, never a
traceback; `inspect` also for a draft that pairing and loading would refuse, after its report),
1 when llama.cpp failed, 130 on Ctrl+C.

Not the place for GGUF logic: this file parses flags, draws the progress bar and words
the messages. It never imports the engine: the trial load of a quantized file runs
`python -m engine.models.load_check` as a child process (llama.cpp may abort on a bad file, and the
light gguf_tools layer must not pull in the engine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from .check import GGUFFormatError
from .dflash.convert import DTYPES
from .convert.cli import add_convert_parser
from .inspect import format_report, inspect_gguf
from .quantize import QTYPES, QuantizeFailed, QuantizeRefused, partial_path, quantize

HINT_BROKEN = "HINT: download or convert the model again; this file cannot be used."


def add_parsers(sub) -> None:
    s = sub.add_parser("inspect", help="show what is in a .gguf model file")
    s.add_argument("path", help="the .gguf file")
    s.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("quantize", help="make a smaller (quantized) copy of a .gguf model with llama.cpp")
    s.add_argument("src", metavar="IN.gguf")
    s.add_argument("dst", metavar="OUT.gguf")
    s.add_argument("--type", required=True, type=str.upper, choices=list(QTYPES), metavar="TYPE",
                   help=f"target type: {', '.join(QTYPES)} (Q4_K_M is a good default)")
    s.add_argument("--threads", type=int, help="CPU threads (default: all)")
    s.add_argument("--allow-requantize", action="store_true",
                   help="quantize a file that is already quantized (loses quality)")
    s.add_argument("--force", action="store_true", help="replace OUT.gguf if it exists")
    s.add_argument("--no-load-check", action="store_true", help="skip the trial load of the result by llama.cpp")
    s.add_argument("--json", action="store_true", help="print the report as one JSON object")
    s.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    s.set_defaults(func=cmd_quantize)

    add_convert_parser(sub)

    s = sub.add_parser("convert-draft", help="convert a published DFlash 2 or DFlash draft (Hugging Face folder) to "
                                             "GGUF",
                       description="Convert a DFlash draft checkpoint in the published z-lab layout (config.json "
                                   "with DFlash2DraftModel or DFlashDraftModel and dflash_config, *.safetensors) "
                                   "or vLLM speculators' layout (speculators_model_type dflash2 or dflash) "
                                   "to the dflash GGUF llama.cpp loads, with the target model's tokenizer.")
    s.add_argument("hf_dir", metavar="DRAFT_HF_DIR", help="the draft's folder (holds config.json)")
    s.add_argument("--target", required=True, metavar="TARGET.gguf", help="the GGUF of the model the draft is for")
    s.add_argument("--out", help="GGUF file to write (default: DRAFT_HF_DIR/<name>-<dtype>.gguf)")
    s.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="matrix type: auto (the checkpoint's own: bf16 or f16, else f32), f32, f16, bf16 or q8_0")
    s.add_argument("--force", action="store_true", help="overwrite an existing output file")
    s.add_argument("--json", action="store_true", help="print the report as one JSON object")
    s.set_defaults(func=cmd_convert_draft)

    s = sub.add_parser("export-hf", help="write a Hugging Face folder (safetensors, tokenizer.json) from a llama .gguf",
                       description="The reverse of convert, for llama-architecture files: weights dequantized to "
                                   "float, tokenizer.json rebuilt from the GGUF's vocabulary and merges.")
    s.add_argument("path", metavar="FILE.gguf")
    s.add_argument("out_dir", metavar="OUT_DIR", help="an empty or new folder")
    s.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    s.set_defaults(func=cmd_export_hf)


def cmd_export_hf(a) -> int:
    from .export_hf import ExportError, export_hf

    try:
        r = export_hf(a.path, a.out_dir, a.dtype)
    except (ExportError, GGUFFormatError) as e:
        return _fail(str(e))
    print(f"{r.out_dir}: {r.n_tensors} tensors, {r.bytes_written / 1e6:.1f} MB in {r.seconds:.1f} s")
    return 0


def cmd_convert_draft(a) -> int:
    from tqdm import tqdm

    from .convert.errors import ConvertError
    from .dflash import kind_words
    from .dflash.convert import convert_draft

    bar = tqdm(total=0, unit="B", unit_scale=True, desc="convert-draft", file=sys.stderr, disable=a.json or None)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        r = convert_draft(a.hf_dir, a.target, a.out, progress, force=a.force, dtype=a.dtype)
    except ConvertError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{e.filename or a.hf_dir}: {e.strerror or e}. HINT: check the paths and free disk space.", 1)
    finally:
        bar.close()
    if a.json:
        print(json.dumps(r.as_dict(), indent=2))
        return 0
    print(f"{r.path}: {r.hf_class} {r.name}, {kind_words(r.kind, r.selector_top_k)}, {r.n_layer} layers, "
          f"block {r.block_size}, "
          f"taps {list(r.target_layers)}, {r.n_params / 1e6:.1f}M parameters, {r.dtype}, "
          f"{r.file_bytes / 1e6:.1f} MB in {r.seconds:.1f} s")
    return 0


def _fail(msg: str, status: int = 2) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return status


def cmd_inspect(a) -> int:
    try:
        r = inspect_gguf(a.path)
    except GGUFFormatError as e:
        return _fail(f"{a.path} is not a valid GGUF file: {e}. {HINT_BROKEN}")
    except OSError as e:
        return _fail(f"cannot read {a.path}: {e.strerror or e}. HINT: check the path.")
    print(json.dumps(r, indent=2) if a.json else format_report(r))
    if r["draft_refusal"]:  # the report still shows what the file holds; the status says it is unusable
        return _fail(r["draft_refusal"])
    return 0


def _load_check(path: str) -> tuple[bool, str]:
    """(ok, what llama.cpp said): a trial load in a child process, as `flashdesk import` does."""
    try:
        out = subprocess.run([sys.executable, "-m", "engine.models.load_check", path], capture_output=True, text=True,
                             timeout=600)
    except subprocess.TimeoutExpired:
        return False, "llama.cpp took over 10 minutes to load it"
    if out.returncode == 0:
        info = json.loads(out.stdout.strip().splitlines()[-1])
        return True, f"{info['description']}, {info['n_params'] / 1e6:.1f}M parameters"
    lines = [ln.strip() for ln in out.stderr.splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit status {out.returncode}"


def _on_interrupt(dst: str, bar):
    """Ctrl+C: llama.cpp cannot be stopped mid-way, so end the process here (the handler
    runs at the next tensor) after removing the partial output; DST was never touched."""

    def handler(signum, frame):
        if bar[0] is not None:
            bar[0].close()
        hint = ""
        try:
            os.remove(partial_path(dst))
        except FileNotFoundError:
            pass
        except OSError:  # Windows will not delete a file llama.cpp still has open
            hint = f" HINT: delete {partial_path(dst)}."
        print(f"\nstopped; {dst} was not written.{hint}", file=sys.stderr, flush=True)
        os._exit(130)

    return handler


def cmd_quantize(a) -> int:
    from tqdm import tqdm

    bar = [None]

    def progress(done: int, total: int) -> None:
        if bar[0] is None:
            bar[0] = tqdm(total=total, unit="tensor", desc=f"quantizing to {a.type}", file=sys.stderr,
                          disable=a.json or None)
        bar[0].update(done - bar[0].n)

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, _on_interrupt(a.dst, bar)) if main else None
    try:
        report = quantize(a.src, a.dst, a.type, threads=a.threads, progress=progress,
                          allow_requantize=a.allow_requantize, force=a.force, verbose=a.verbose)
    except GGUFFormatError as e:
        return _fail(f"{a.src} is not a valid GGUF file: {e}. {HINT_BROKEN}")
    except QuantizeRefused as e:
        return _fail(str(e))
    except QuantizeFailed as e:
        return _fail(str(e), 1)
    except OSError as e:
        return _fail(f"{e.filename or a.dst}: {e.strerror or e}. HINT: check the paths and free disk space.", 1)
    finally:
        if bar[0] is not None:
            bar[0].close()
        if main:
            signal.signal(signal.SIGINT, old)
    r = report.as_dict()
    if not a.no_load_check:
        ok, said = _load_check(report.dst)
        r["loads"] = ok
        if not ok:
            os.remove(report.dst)
            return _fail(f"llama.cpp cannot load the quantized file ({said}); it was removed. HINT: try another "
                         "--type, or run with --verbose and report the log.", 1)
    if a.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"{os.path.basename(report.src)} -> {report.dst} ({report.qtype})")
    print(f"  {report.input_bytes / 1e6:.1f} MB -> {report.output_bytes / 1e6:.1f} MB "
          f"({report.ratio:.2f} of the size) in {report.seconds:.1f} s, {report.n_tensors} tensors")
    if report.fallback_tensors:
        print(f"  {report.fallback_tensors} tensor(s) stored at a fallback type: their row length does not fit "
              "the planned type (common in small models)")
    if not a.no_load_check:
        print(f"  llama.cpp loads it: {said}")
    return 0
