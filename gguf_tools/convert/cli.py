"""`flashdesk convert HF_DIR [--out PATH] [--outtype f32|f16|bf16|q8_0] [--force]`.

`add_convert_parser(sub)` registers the sub-command on the `flashdesk` parser
(`gguf_tools/cli.py` calls it); the work is `convert_hf`, wrapped in a tqdm bar over the bytes
read. Errors print as `error: ...` with their HINT and exit with status 2.
"""

from __future__ import annotations

import sys

OUTTYPE_CHOICES = ("f32", "f16", "bf16", "q8_0")  # same as encode.OUTTYPES; literal so --help loads no numpy


def add_convert_parser(sub) -> None:
    s = sub.add_parser("convert", help="convert a Hugging Face model folder (safetensors) to a GGUF file",
                       description="Convert a Hugging Face checkpoint (config.json, *.safetensors, tokenizer "
                                   "files) of a Llama, SmolLM, Mistral-style or Qwen3 model to GGUF.")
    s.add_argument("hf_dir", metavar="HF_DIR", help="the model folder (holds config.json)")
    s.add_argument("--out", help="GGUF file to write (default: HF_DIR/<name>-<outtype>.gguf)")
    s.add_argument("--outtype", choices=OUTTYPE_CHOICES, default="f16",
                   help="weight type: f32, f16 (default), bf16 or q8_0; norms stay f32")
    s.add_argument("--force", action="store_true", help="overwrite an existing output file")
    s.set_defaults(func=cmd_convert)


def cmd_convert(a) -> int:
    from tqdm import tqdm

    from .convert import convert_hf
    from .errors import ConvertError

    bar = tqdm(total=0, unit="B", unit_scale=True, desc="convert", disable=None)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        r = convert_hf(a.hf_dir, a.out, a.outtype, progress, force=a.force)
    except ConvertError as e:
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar.close()
    print(f"{r.path}: {r.arch} {r.name}, {r.n_params / 1e6:.1f}M parameters, {r.outtype}, "
          f"{r.file_bytes / 1e6:.1f} MB in {r.seconds:.1f} s")
    if r.f16_fallbacks:
        print(f"note: {len(r.f16_fallbacks)} tensors stay f16 (rows not a multiple of 32): "
              f"{', '.join(r.f16_fallbacks[:4])}{' ...' if len(r.f16_fallbacks) > 4 else ''}")
    return 0
