"""config.json of a published DFlash checkpoint (DFlash 2 or plain DFlash v1) -> `DraftConfig`,
checked against the target GGUF.

What it is: the reading and refusing half of `convert_draft` (convert.py does the
tensors). Settings are read from `dflash_config` first, then the top level of config.json, as
the published z-lab/dflash model code reads them; `dflash.target_layers` = HF
`target_layer_ids` + 1 (llama.cpp captures a layer's *input* = the HF layer's output), as the
vendored llama.cpp's `conversion/qwen.py` (DFlashModel) writes it.

Mapped to `DraftConfig`'s optional settings, as the vendored `conversion/qwen.py` maps them
to the GGUF keys llama.cpp's dflash graph reads: a sliding window (`use_sliding_window` with
`sliding_window` on the layers `layer_types` marks "sliding_attention", or `dflash_config.use_swa`
with `swa_window_size` on every layer), `output_multiplier` (logit scale),
`final_logit_softcapping`, `input_embedding_scale`, `attention_value_scale`, and `hidden_act`
silu / gelu / gelu_pytorch_tanh / gelu_new (llama.cpp runs every GELU tanh-approximated; for
an erf `gelu` that differs by < 1e-3 per activation).

The class names the kind: `DFlash2DraftModel` (the conv and selector settings in
`dflash_config`) or `DFlashDraftModel` (plain DFlash, kind "dflash1": the same decoder and
`dflash_config` without them; a v1 config that has them is refused as ambiguous). The same
vendored `conversion/qwen.py` class (DFlashModel) converts both.

A draft made with vLLM's `speculators` library (config.json with `speculators_model_type`) is first
rewritten into this layout by speculators.py, so it meets the same checks.

What it is not: a reader of DSpark configs (refused with the reason). What llama.cpp's graph
cannot do or our writer has no key for (biases, rope scaling, partial or interleaved rope,
other activations, MiMo's mask_embedding.pt, a window whose layers are ambiguous) is
refused, never dropped: a draft converted without it would propose worse tokens with no
error anywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..check import GGUFFormatError, check_gguf
from ..convert.errors import ConvertError
from ..convert.hf_config import model_name
from . import speculators
from .format import DFLASH1, DFLASH2, SELECTOR_FIELDS, DraftConfig, capture_refusal

SUPPORTED_CLASSES = ("DFlash2DraftModel", "DFlashDraftModel")
KIND_OF_CLASS = {"DFlash2DraftModel": DFLASH2, "DFlashDraftModel": DFLASH1}
# the DSpark classes the vendored conversion/qwen.py knows (DFlash + a Markov head on the logits)
DSPARK_CLASSES = ("Qwen3DSparkModel", "DSparkDraftModel", "DSparkSpeculator", "Lfm2DSparkDraftModel", "LingDSparkModel")
_HINT_OTHER = ("HINT: convert it with llama.cpp's own convert_hf_to_gguf.py (--target-model-dir), or train a "
               "draft for this target with `flashdesk train-draft`.")


def load_config(hf_dir: Path) -> dict:
    if not hf_dir.is_dir():
        raise ConvertError(f"{hf_dir} is not a folder. HINT: point at the draft's Hugging Face folder.")
    path = hf_dir / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvertError(f"{hf_dir} has no config.json. HINT: download the whole draft repository.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path} is not valid JSON: {e}") from None
    if isinstance(cfg, dict) and speculators.is_speculators(cfg):  # vLLM speculators' layout: same checks after
        return speculators.flatten(cfg, path)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("dflash_config", {}), dict):
        raise ConvertError(f"{path}: expected a JSON object with a `dflash_config` object")
    classes = cfg.get("architectures") or []
    cls = next((c for c in classes if c in SUPPORTED_CLASSES), None)
    if cls is None:
        dspark = [c for c in classes if c in DSPARK_CLASSES]
        if dspark:
            raise ConvertError(
                f"{path} is a DSpark draft ({dspark[0]}: DFlash with a Markov head on the draft's logits), which "
                f"flashdesk cannot run. Supported: {', '.join(SUPPORTED_CLASSES)}. HINT: use the model's DFlash 2 "
                "or DFlash release if there is one, or train a draft for your target with `flashdesk train-draft`.")
        raise ConvertError(f"{path}: architectures {classes} is no DFlash draft this converter knows. Supported: "
                           f"{', '.join(SUPPORTED_CLASSES)} (z-lab / Inco layout), or speculators' dflash2 / "
                           "dflash (speculators_model_type). HINT: for a full model use "
                           "`flashdesk convert`.")
    cfg["_class"] = cls
    return cfg


def _get(cfg: dict, key: str, default=None):
    """A draft setting: `dflash_config` wins over the top level (as the published code reads it)."""
    dc = cfg.get("dflash_config", {})
    return dc[key] if key in dc else cfg.get(key, default)


_ACTS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_pytorch_tanh", "gelu_new": "gelu_pytorch_tanh"}


def _unsupported(cfg: dict, hf_dir: Path) -> list[str]:
    """What this checkpoint uses that llama.cpp's dflash graph (or our writer) cannot express."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "?"
    found = [
        (bool(cfg.get("attention_bias")), "attention biases (attention_bias)"),
        (cfg.get("hidden_act", "silu") not in _ACTS, f"activation {cfg.get('hidden_act')!r} (llama.cpp's DFlash "
                                                      f"graph runs only {', '.join(_ACTS)})"),
        (rope_type != "default", f"rope scaling {rope_type!r}"),
        ((rope.get("partial_rotary_factor", 1.0) if isinstance(rope, dict) else 1.0) != 1.0, "partial rotary"),
        (cfg.get("rope_is_neox_style", True) is False, "interleaved rope (rope_is_neox_style=false)"),
        ((hf_dir / "mask_embedding.pt").exists(), "its own mask embedding (mask_embedding.pt)"),
    ]
    return [what for used, what in found if used]


def _window(cfg: dict, path: Path, n_layer: int) -> tuple[int, tuple[bool, ...]]:
    """(sliding window, per-layer flags) as qwen.py derives them, refusing where that is ambiguous;
    (0, ()) for full attention."""
    layer_types = cfg.get("layer_types") or []
    if bool(_get(cfg, "use_swa")):  # DFlash's own switch: every layer slides
        w, flags = _get(cfg, "swa_window_size") or cfg.get("sliding_window"), (True,) * n_layer
    elif cfg.get("use_sliding_window"):
        if len(layer_types) != n_layer:
            raise ConvertError(f"{path}: use_sliding_window is set but layer_types does not name the kind of each of "
                               f"the {n_layer} layers, so which layers slide is ambiguous. HINT: add layer_types "
                               "(\"sliding_attention\" / \"full_attention\" per layer) to config.json.")
        w, flags = cfg.get("sliding_window"), tuple(t == "sliding_attention" for t in layer_types)
        if not any(flags):
            return 0, ()
    elif "sliding_attention" in layer_types:
        raise ConvertError(f"{path}: layer_types marks sliding layers but use_sliding_window is off, so whether "
                           "the draft was trained with a window is ambiguous. HINT: set use_sliding_window to match "
                           "how the draft was trained.")
    else:
        return 0, ()
    if isinstance(w, bool) or not isinstance(w, int) or w <= 0:
        raise ConvertError(f"{path}: sliding-window attention is on but the window ({w!r}) is no positive integer.")
    return w, flags


def _scale(cfg: dict, key: str, path: Path, off: tuple = (None, 1, 1.0)) -> float | None:
    """An optional multiplier; None where it changes nothing (absent or the identity)."""
    v = _get(cfg, key)
    if v in off:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v == 0:
        raise ConvertError(f"{path}: `{key}` must be a finite non-zero number, not {v!r}")
    return float(v)


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    v = _get(cfg, key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConvertError(f"{path}: `{key}` must be a non-negative integer, not {v!r}")
    return v


def draft_config(cfg: dict, hf_dir: Path, target: Path) -> DraftConfig:
    """The `DraftConfig` of a published checkpoint, checked against the target GGUF."""
    path = hf_dir / "config.json"
    what = _unsupported(cfg, hf_dir)
    if what:
        raise ConvertError(f"{path} uses {'; '.join(what)}, which llama.cpp's DFlash graph or flashdesk's draft "
                           f"writer cannot express (dropping it would make a worse draft without any error). "
                           f"{_HINT_OTHER}")
    try:
        t = check_gguf(target).metadata
    except (GGUFFormatError, OSError) as e:
        raise ConvertError(f"the target {target} is not a readable GGUF: {e}. HINT: pass the target's .gguf file "
                           "with --target.") from None
    arch = t.get("general.architecture")
    why = capture_refusal(arch)
    if why:
        raise ConvertError(f"{why}. HINT: pass the GGUF of the model the draft was made for.")
    t_embd, t_layers = t.get(f"{arch}.embedding_length"), t.get(f"{arch}.block_count")
    t_vocab = t.get("tokenizer.ggml.tokens")  # check_gguf gives an array's length
    if not all(isinstance(v, int) and v > 1 for v in (t_embd, t_layers, t_vocab)):
        raise ConvertError(f"the target {target} lacks {arch}.embedding_length, {arch}.block_count or a "
                           "tokenizer. HINT: pass the target model's own .gguf file.")
    n_embd, vocab = _int(cfg, "hidden_size", path), _int(cfg, "vocab_size", path)
    hint = "HINT: this draft was trained for another target model; pass the GGUF of the model it was made for."
    if n_embd != t_embd:
        raise ConvertError(f"the draft's hidden_size is {n_embd} but the target's n_embd is {t_embd}. {hint}")
    if vocab != t_vocab:
        raise ConvertError(f"the draft's vocab_size is {vocab} but the target has {t_vocab} tokens. {hint}")
    n_tl = _get(cfg, "num_target_layers")
    if n_tl is not None and n_tl != t_layers:
        raise ConvertError(f"the draft was made for a target with {n_tl} layers (num_target_layers); this "
                           f"target has {t_layers}. {hint}")
    ids = _get(cfg, "target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ConvertError(f"{path}: dflash_config.target_layer_ids must be a non-empty list of layer ids, "
                           f"not {ids!r}")
    if any(not 0 <= i < t_layers - 1 for i in ids):  # HF id n-1 is the final state: no layer input of llama.cpp
        raise ConvertError(f"the draft taps target layers {ids}, but the target has {t_layers} layers (each HF id "
                           f"must be in [0, {t_layers - 2}]). {hint}")
    mask = _get(cfg, "mask_token_id")
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < vocab:
        raise ConvertError(f"{path}: dflash_config.mask_token_id {mask!r} is missing or outside the vocabulary. "
                           "HINT: the draft was trained with a mask token; without it the checkpoint is incomplete.")
    n_head = _int(cfg, "num_attention_heads", path)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    causal = cfg.get("is_causal")
    n_layer = _int(cfg, "num_hidden_layers", path)
    window, swa_layers = _window(cfg, path, n_layer)
    softcap = _get(cfg, "final_logit_softcapping")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                                or not math.isfinite(softcap) or softcap < 0):
        raise ConvertError(f"{path}: final_logit_softcapping must be a number >= 0 (0 = off), not {softcap!r}")
    kind = KIND_OF_CLASS[cfg["_class"]]
    selector = {f: _int(cfg, f, path) for f in SELECTOR_FIELDS} if kind == DFLASH2 else {}
    stray = [f for f in SELECTOR_FIELDS if kind == DFLASH1 and _get(cfg, f) is not None]
    if stray:  # qwen.py would write them and llama.cpp then expects a selector the class says is absent
        raise ConvertError(f"{path}: a plain DFlash draft (DFlashDraftModel) with DFlash 2 settings "
                           f"({', '.join(stray)}): which kind it is is ambiguous. HINT: DFlash 2 checkpoints "
                           "name the class DFlash2DraftModel; fix `architectures` or drop those settings.")
    try:
        c = DraftConfig(
            n_embd=n_embd, n_vocab=vocab, target_n_layer=t_layers, target_layers=tuple(i + 1 for i in ids),
            mask_token_id=mask, n_layer=n_layer, n_head=n_head,
            n_head_kv=_int(cfg, "num_key_value_heads", path, n_head),
            head_dim=_int(cfg, "head_dim", path, n_embd // max(n_head, 1)),
            n_ff=_int(cfg, "intermediate_size", path), block_size=_int(cfg, "block_size", path, 16),
            kind=kind, **selector,
            rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),  # Qwen3Config's default
            rope_freq_base=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            context_length=_int(cfg, "max_position_embeddings", path, 8192),
            causal=bool(_get(cfg, "causal", False) if causal is None else causal),
            name=model_name(cfg, hf_dir),
            sliding_window=window, swa_layers=swa_layers if window and not all(swa_layers) else (),
            logit_scale=_scale(cfg, "output_multiplier", path),
            final_logit_softcapping=float(softcap) if softcap else None,
            embedding_scale=_scale(cfg, "input_embedding_scale", path),
            attention_value_scale=_scale(cfg, "attention_value_scale", path, (None,)),  # qwen.py writes even 1.0
            hidden_act=_ACTS[cfg.get("hidden_act", "silu")],
        )
        c.validate()
    except ValueError as e:
        what = "DFlash 2" if kind == DFLASH2 else "plain DFlash"
        raise ConvertError(f"{path}: {e}. HINT: config.json does not describe a {what} draft llama.cpp can "
                           "run.") from None
    return c


__all__ = ["DSPARK_CLASSES", "KIND_OF_CLASS", "SUPPORTED_CLASSES", "draft_config", "load_config"]
