"""`convert_hf`: a Hugging Face checkpoint folder -> one GGUF file, streaming one tensor at a time.

The order of work is what keeps memory bounded and failures clean:
1. read config.json and every safetensors header, map each HF tensor name to its GGUF
   name and check its shape against the config (all refusals happen here, before any
   output exists);
2. write the GGUF header, metadata (hyper-parameters, tokenizer) and tensor table;
3. for each tensor: read it, transform it (Llama's q/k row order), encode it (f32, f16,
   bf16, q8_0), append it, drop it. Peak memory is about two copies of the largest tensor;
4. write to `OUT.partial` and rename at the end, so a half-written file never carries
   the final name; an existing OUT is kept unless `force`.

Not here: the per-architecture facts (`llama`, `qwen3`), the tokenizer (`tokenizer`),
the command line (`cli`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_VERSION, GGMLQuantizationType, GGUFWriter, get_tensor_name_map

from . import llama, qwen3
from .encode import OUTTYPES, encode, storage_type, stored_nbytes
from .errors import ConvertError
from .hf_config import HFModel, file_stem, read_hf_config
from .safetensors_reader import TensorRef, find_tensors, read_tensor

ARCH_MODULES = {"llama": llama, "qwen3": qwen3}
# HF tensors that carry nothing llama.cpp needs (recomputed from rope_theta).
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ConvertReport:
    path: Path
    name: str
    arch: str
    outtype: str
    n_tensors: int
    n_params: int
    source_bytes: int  # tensor bytes read from the checkpoint
    file_bytes: int
    seconds: float
    f16_fallbacks: tuple[str, ...]  # tensors a q8_0 file keeps in f16 (rows not a multiple of 32)


@dataclass(frozen=True)
class _Planned:
    gguf_name: str
    shape: tuple[int, ...]  # NumPy order (GGUF ne reversed)
    qtype: GGMLQuantizationType
    ref: TensorRef | None  # None for tensors computed from the config (`extra`)
    extra: np.ndarray | None = None


def default_out_path(hf_dir: str | Path, outtype: str, name: str | None = None) -> Path:
    """`<hf_dir>/<name>-<outtype>.gguf`, name from config.json when not given."""
    hf_dir = Path(hf_dir)
    if name is None:
        name = read_hf_config(hf_dir).name
    return hf_dir / f"{file_stem(name)}-{outtype}.gguf"


def _plan(m: HFModel, refs: dict[str, TensorRef], outtype: str) -> list[_Planned]:
    mod = ARCH_MODULES[m.arch]
    name_map = get_tensor_name_map(mod.GGUF_ARCH, m.n_layer)
    expected = mod.expected_tensors(m)
    rank = {name: i for i, name in enumerate(expected)}
    plan: dict[str, _Planned] = {}
    for hf_name, ref in refs.items():
        if hf_name.endswith(_IGNORED_SUFFIXES) or (hf_name == "lm_head.weight" and m.tie_embeddings):
            continue  # a tied lm_head is the embedding: llama.cpp reuses token_embd
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None or gguf_name not in expected:
            raise ConvertError(f"tensor {hf_name!r} has no place in a {m.arch} GGUF with {m.n_layer} layers. "
                               f"HINT: is this really a plain {m.hf_class} checkpoint? (adapters, vision towers "
                               "and extra heads are not supported)")
        shape, _ = expected[gguf_name]
        if ref.shape != shape:
            raise ConvertError(f"tensor {hf_name!r} has shape {list(ref.shape)}, but config.json implies "
                               f"{list(shape)}. HINT: config.json and the weights do not belong together.")
        if gguf_name in plan:
            raise ConvertError(f"two checkpoint tensors map to {gguf_name} (one is {hf_name!r})")
        plan[gguf_name] = _Planned(gguf_name, shape, storage_type(gguf_name, shape, outtype), ref)
    missing = [name for name, (_, required) in expected.items() if required and name not in plan]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        hint = (" HINT: config.json says tie_word_embeddings=false but there is no lm_head.weight."
                if missing == ["output.weight"] else " HINT: the checkpoint is incomplete or not this architecture.")
        raise ConvertError(f"the checkpoint lacks {', '.join(missing[:5])}{more}.{hint}")
    ordered = sorted(plan.values(), key=lambda p: rank[p.gguf_name])
    extras = [_Planned(n, a.shape, GGMLQuantizationType.F32, None, a) for n, a in mod.extra_tensors(m).items()]
    return extras + ordered


def _tokenizer_writer() -> Callable[[GGUFWriter, Path, str], None]:
    # Imported when used: the tokenizer part is its own module (and may be absent in a partial install).
    try:
        from .tokenizer import add_tokenizer
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.tokenizer":
            raise
        raise ConvertError("this flashdesk lacks the tokenizer converter (gguf_tools/convert/tokenizer.py). "
                           "HINT: reinstall flashdesk.") from None
    return add_tokenizer


def _check_vocab(w: GGUFWriter, m: HFModel) -> None:
    """llama.cpp refuses a token_embd whose rows differ from the tokenizer's size: say so now."""
    tokens = w.kv_data[0].get("tokenizer.ggml.tokens")
    if tokens is not None and len(tokens.value) != m.n_vocab:
        raise ConvertError(f"the tokenizer has {len(tokens.value)} tokens but the embedding has {m.n_vocab} rows "
                           "(config.json vocab_size); llama.cpp would refuse the file.")


def _write_metadata(w: GGUFWriter, m: HFModel, outtype: str, hf_dir: Path) -> None:
    w.add_name(m.name)
    w.add_file_type(OUTTYPES[outtype][1])
    w.add_quantization_version(GGML_QUANT_VERSION)
    ARCH_MODULES[m.arch].write_hparams(w, m)
    w.add_vocab_size(m.n_vocab)  # llama.cpp reads the tokenizer's size; tools (and the original GGUFs) show this
    _tokenizer_writer()(w, hf_dir, m.arch)
    _check_vocab(w, m)


def prepare_out(out: Path, force: bool, need_bytes: int) -> Path:
    if out.is_dir():
        raise ConvertError(f"{out} is a folder. HINT: give --out a file name ending in .gguf.")
    if out.exists() and not force:
        raise ConvertError(f"{out} already exists. HINT: pass --force to overwrite it, or choose --out.")
    if not out.parent.is_dir():
        raise ConvertError(f"the folder {out.parent} does not exist. HINT: create it or choose another --out.")
    free = shutil.disk_usage(out.parent).free
    if free < need_bytes:
        raise ConvertError(f"{out.parent} has {free / 1e9:.1f} GB free; the GGUF needs about "
                           f"{need_bytes / 1e9:.1f} GB. HINT: free disk space or choose --out on another disk.")
    return out.with_name(out.name + ".partial")


def convert_hf(hf_dir: str | Path, out: str | Path | None = None, outtype: str = "f16",
               progress: Progress | None = None, *, force: bool = False) -> ConvertReport:
    """Convert the checkpoint in `hf_dir` to GGUF; `progress(done_bytes, total_bytes)` after each tensor."""
    t0 = time.perf_counter()
    hf_dir = Path(hf_dir)
    outtype = outtype.lower()
    if outtype not in OUTTYPES:
        raise ConvertError(f"outtype {outtype!r} is not one of {', '.join(OUTTYPES)}")
    m = read_hf_config(hf_dir)
    plan = _plan(m, find_tensors(hf_dir), outtype)
    out = Path(out) if out is not None else default_out_path(hf_dir, outtype, m.name)
    need = sum(stored_nbytes(p.shape, p.qtype) for p in plan)
    partial = prepare_out(out, force, need)
    total = sum(p.ref.nbytes for p in plan if p.ref is not None)
    done = 0
    w = GGUFWriter(partial, m.arch)
    try:
        _write_metadata(w, m, outtype, hf_dir)
        for p in plan:
            # Any non-uint8 dtype with raw_dtype set: the shape is taken as the logical one.
            w.add_tensor_info(p.gguf_name, p.shape, np.dtype(np.float32), stored_nbytes(p.shape, p.qtype), p.qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        if progress:
            progress(0, total)
        for p in plan:
            if p.ref is None:
                data = encode(p.gguf_name, p.extra, "F32", p.qtype)
            else:
                raw = ARCH_MODULES[m.arch].transform(p.gguf_name, read_tensor(p.ref), m)
                data = encode(p.gguf_name, raw, p.ref.dtype, p.qtype)
                del raw
                done += p.ref.nbytes
            w.write_tensor_data(data)
            del data  # before the next read: never two tensors' worth of arrays alive
            if progress:
                progress(done, total)
        w.close()
        os.replace(partial, out)
    except BaseException:
        w.close()
        partial.unlink(missing_ok=True)
        raise
    return ConvertReport(
        path=out, name=m.name, arch=m.arch, outtype=outtype, n_tensors=len(plan),
        n_params=sum(int(np.prod(p.shape)) for p in plan), source_bytes=total, file_bytes=out.stat().st_size,
        seconds=time.perf_counter() - t0,
        f16_fallbacks=tuple(p.gguf_name for p in plan
                            if outtype == "q8_0" and p.qtype == GGMLQuantizationType.F16),
    )
