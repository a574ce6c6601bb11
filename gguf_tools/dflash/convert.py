"""`convert_draft`: a published DFlash checkpoint (z-lab / Inco layout; DFlash 2 or plain DFlash
v1) -> the `dflash` GGUF the pinned llama.cpp loads, carrying the target GGUF's tokenizer.

What it is: a mapping, nothing more. config.json (class `DFlash2DraftModel` or
`DFlashDraftModel`, a Qwen3-style decoder config plus a `dflash_config` block) becomes a
`DraftConfig` of that kind (a v1 draft has no conv or selector tensors); the safetensors tensors,
renamed, become the dict `write_dflash_draft` (write.py) expects. That writer owns every
GGUF key, tensor name and shape; the target's tokenizer metadata is copied by it. Published
tensors already have the NumPy shapes the writer wants (conv base [side, tap, n_embd], conv
projection rows [side, tap, group], codebooks [n_vocab, rank]), so nothing is transposed.

A `speculators` checkpoint (speculators.py) has the same tensor names plus the verifier's own
embeddings and head, which are skipped.

What it is not: the config reader and its refusals (convert_config.py: DSpark checkpoints and
features our writer has no key for are refused there, with the reason).

Facts from the vendored llama.cpp (`gguf-py/gguf/tensor_mapping.py` DFLASH entries,
`conversion/qwen.py` DFlashModel, `src/models/dflash.cpp`) and the published z-lab/dflash
checkpoints: HF tensor names may carry a `model.` prefix (llama.cpp adds one); the selector
codebooks are stored without `.weight`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..check import check_gguf
from ..convert.convert import prepare_out  # same output rules (folder, exists, disk space) as `convert`
from ..convert.errors import ConvertError
from ..convert.hf_config import file_stem
from ..convert.safetensors_reader import TensorRef, find_tensors, read_tensor, to_f32
from .convert_config import SUPPORTED_CLASSES, draft_config, load_config
from .format import DraftConfig, kind_words, tensor_shapes
from .speculators import drop_verifier_copies
from .write import MATRIX_DTYPES, write_dflash_draft

DTYPES = ("auto", *MATRIX_DTYPES)
BYTES_PER_VALUE = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32}  # q8_0: 32 int8 and an f16 scale
F16_MAX = 65504.0
Progress = Callable[[int, int], None]

# Published (HF) name -> GGUF name, per layer and global. Codebooks are stored bare
# (nn.Embedding saved without `.weight` in the published files); accept both spellings.
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "attention_conv.base_kernel": "attn_conv_base",
    "attention_conv.kernel_projection.weight": "attn_conv_proj.weight",
    "mlp_conv.base_kernel": "ffn_conv_base",
    "mlp_conv.kernel_projection.weight": "ffn_conv_proj.weight",
}
_GLOBAL_NAMES = {
    "fc.weight": "fc.weight",
    "hidden_norm.weight": "enc.output_norm.weight",  # RMS norm after fc (the injected rows)
    "norm.weight": "output_norm.weight",
    "candidate_selector.predecessor_codebook": "selector_predecessor.weight",
    "candidate_selector.predecessor_codebook.weight": "selector_predecessor.weight",
    "candidate_selector.successor_codebook": "selector_successor.weight",
    "candidate_selector.successor_codebook.weight": "selector_successor.weight",
    "candidate_selector.hidden_projection.weight": "selector_hidden.weight",
}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # recomputed from rope_theta
_LAYER_RE = re.compile(r"layers\.(\d+)\.(.+)")


@dataclass(frozen=True)
class ConvertDraftReport:
    path: Path
    name: str
    hf_class: str
    kind: str  # "dflash2" | "dflash1" (format.py)
    target: Path
    n_layer: int
    target_layers: tuple[int, ...]  # llama.cpp capture ids (HF ids + 1)
    block_size: int
    selector_top_k: int  # 0 for a plain DFlash (v1) draft
    dtype: str  # MATRIX_DTYPES (2-D weights; norms and conv bases stay f32)
    n_tensors: int
    n_params: int
    source_bytes: int
    file_bytes: int
    seconds: float
    layout: str = "z-lab"  # the checkpoint's layout: "z-lab" (z-lab / Inco) | "speculators" (vLLM speculators)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["path"], d["target"], d["target_layers"] = str(self.path), str(self.target), list(self.target_layers)
        return d


def _gguf_name(hf_name: str) -> str | None:
    name = hf_name.removeprefix("model.")
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    m = _LAYER_RE.fullmatch(name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"blk.{int(m.group(1))}.{_LAYER_NAMES[m.group(2)]}"
    return None


def plan_tensors(cfg: DraftConfig, refs: dict[str, TensorRef]) -> dict[str, TensorRef]:
    """GGUF name -> checkpoint tensor, every name and shape checked before anything is read."""
    want = tensor_shapes(cfg)
    plan: dict[str, TensorRef] = {}
    unknown = []
    for hf_name, ref in sorted(refs.items()):
        if hf_name.endswith(_IGNORED_SUFFIXES):
            continue
        g = _gguf_name(hf_name)
        if g is None or g not in want:
            unknown.append(hf_name)
            continue
        if g in plan:
            raise ConvertError(f"two checkpoint tensors map to {g}: {plan[g].name!r} and {hf_name!r}")
        if ref.shape != want[g]:
            raise ConvertError(f"tensor {hf_name!r} has shape {list(ref.shape)}, but config.json implies "
                               f"{list(want[g])}. HINT: config.json and the weights do not belong together.")
        plan[g] = ref
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        what = kind_words(cfg.kind, cfg.selector_top_k)
        raise ConvertError(f"the checkpoint has tensors with no place in a {cfg.n_layer}-layer {what} draft: "
                           f"{', '.join(unknown[:5])}{more}. HINT: a reduced-vocabulary head (d2t, lm_head), own "
                           "embeddings or extra heads are not supported; does config.json name the right class "
                           f"({' or '.join(SUPPORTED_CLASSES)})?")
    missing = sorted(set(want) - set(plan))
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ConvertError(f"the checkpoint lacks the tensors for {', '.join(missing[:5])}{more}. HINT: the "
                           "download is incomplete (check every *.safetensors shard) or config.json is wrong.")
    return plan


def _pick_dtype(dtype: str, plan: dict[str, TensorRef]) -> str:
    if dtype not in DTYPES:
        raise ConvertError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if dtype != "auto":
        return dtype
    # A published draft keeps its own precision, bit for bit. BF16 stays bf16, not f16: on a processor
    # llama.cpp rounds an f16 matrix product's inputs to f16, and a large target's fused hidden states
    # pass f16's 65,504 (the reported collapse of DFlash drafts run in fp16); bf16 has f32's range.
    kinds = {r.dtype for r in plan.values() if len(r.shape) == 2}
    return {frozenset({"BF16"}): "bf16", frozenset({"F16"}): "f16"}.get(frozenset(kinds), "f32")


def convert_draft(hf_dir: str | os.PathLike, target_gguf: str | os.PathLike, out: str | os.PathLike | None = None,
                  progress: Progress | None = None, force: bool = False, dtype: str = "auto") -> ConvertDraftReport:
    """Convert the DFlash (2 or v1) checkpoint in `hf_dir` for `target_gguf`; `progress(done_bytes, total_bytes)`
    after each tensor read. Writes `OUT.partial`, then renames it; an existing OUT needs `force`."""
    t0 = time.perf_counter()
    hf_dir, target = Path(hf_dir), Path(target_gguf)
    raw = load_config(hf_dir)
    cfg = draft_config(raw, hf_dir, target)
    refs = find_tensors(hf_dir)
    if raw.get("_layout") == "speculators":  # the verifier's embeddings and head: llama.cpp uses the target's own
        refs = drop_verifier_copies(refs)
    plan = plan_tensors(cfg, refs)
    dtype = _pick_dtype(dtype, plan)
    out = Path(out) if out is not None else hf_dir / f"{file_stem(cfg.name)}-{dtype}.gguf"
    partial = prepare_out(out, force, int(sum(r.n_elements for r in plan.values()) * BYTES_PER_VALUE[dtype]))
    total, done = sum(r.nbytes for r in plan.values()), 0
    tensors: dict[str, np.ndarray] = {}
    for g, ref in plan.items():
        a = to_f32(read_tensor(ref), ref.dtype)
        if not np.isfinite(a).all():
            raise ConvertError(f"tensor {ref.name!r} holds NaN or infinite values. HINT: the checkpoint is broken.")
        if dtype == "f16" and a.ndim == 2:
            if np.abs(a).max(initial=0.0) > F16_MAX:
                raise ConvertError(f"tensor {ref.name!r} has values beyond the f16 range. HINT: use dtype f32.")
            a = a.astype(np.float16)  # halves what stays in memory until the writer runs
        tensors[g] = a
        done += ref.nbytes
        if progress:
            progress(done, total)
    try:
        write_dflash_draft(partial, cfg, tensors, target, matrix_dtype=dtype)
        check_gguf(partial)  # what we hand over must at least read back cleanly
        os.replace(partial, out)
    except ValueError as e:  # the writer's own consistency checks
        partial.unlink(missing_ok=True)
        raise ConvertError(f"cannot write the draft: {e}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return ConvertDraftReport(
        path=out, name=cfg.name, hf_class=raw["_class"], kind=cfg.kind, target=target, n_layer=cfg.n_layer,
        target_layers=cfg.target_layers, block_size=cfg.block_size, selector_top_k=cfg.selector_top_k, dtype=dtype,
        n_tensors=len(tensors), n_params=sum(int(a.size) for a in tensors.values()), source_bytes=total,
        file_bytes=out.stat().st_size, seconds=time.perf_counter() - t0, layout=raw.get("_layout", "z-lab"))


__all__ = ["ConvertDraftReport", "SUPPORTED_CLASSES", "convert_draft", "draft_config", "plan_tensors"]
