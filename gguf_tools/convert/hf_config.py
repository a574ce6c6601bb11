"""Read a Hugging Face `config.json` and decide which GGUF architecture it becomes.

`read_hf_config(hf_dir)` returns an `HFModel`: the hyper-parameters the GGUF metadata
needs, checked for the combinations the converter does not implement (other
architectures, sliding-window attention, rope scaling types, pre-quantized weights,
activations other than SiLU). Everything it refuses is refused here, before a byte of the
output is written, with a `ConvertError` that says what is supported.

Not here: tensors (`safetensors_reader`), the GGUF keys themselves (`llama`, `qwen3`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConvertError

# HF class name -> (GGUF architecture, accepted `model_type` values). Mistral-style
# configs without a sliding window are Llama graphs (llama.cpp runs them as `llama`).
SUPPORTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "LlamaForCausalLM": ("llama", ("llama", "mistral")),
    "MistralForCausalLM": ("llama", ("mistral", "llama")),
    "Qwen3ForCausalLM": ("qwen3", ("qwen3",)),
}
ROPE_SCALING_TYPES = {"llama": ("linear", "llama3"), "qwen3": ("linear",)}


def supported_text() -> str:
    return ", ".join(f"{cls} ({arch})" for cls, (arch, _) in SUPPORTED.items())


@dataclass(frozen=True)
class RopeScaling:
    """HF `rope_scaling` of a kind we implement: "linear" (positions / factor) or "llama3"."""

    type: str
    factor: float
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_context: int = 8192  # llama3 only: original_max_position_embeddings


@dataclass(frozen=True)
class HFModel:
    """What the converter needs from config.json, validated."""

    arch: str  # GGUF architecture: "llama" | "qwen3"
    hf_class: str  # e.g. "LlamaForCausalLM"
    name: str  # general.name
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx: int  # max_position_embeddings
    rope_theta: float
    rms_eps: float
    tie_embeddings: bool
    rope_scaling: RopeScaling | None


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvertError(f"{path.parent} has no config.json. HINT: point at the Hugging Face model folder "
                           "(the one that holds config.json and the *.safetensors files).") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path} could not be read as JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path} is not a JSON object")
    return data


def _pick_class(cfg: dict, path: Path) -> tuple[str, str]:
    classes = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    if not isinstance(classes, list):
        classes = [classes]
    for cls in classes:
        if cls in SUPPORTED:
            arch, types = SUPPORTED[cls]
            if model_type is not None and model_type not in types:
                raise ConvertError(f"{path}: class {cls} with model_type {model_type!r} is not supported "
                                   f"(expected model_type {' or '.join(types)}). Supported: {supported_text()}.")
            return cls, arch
    if not classes and model_type in ("llama", "mistral", "qwen3"):  # old configs name no class
        cls = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]
        return cls, SUPPORTED[cls][0]
    what = ", ".join(map(str, classes)) or f"model_type {model_type!r}"
    raise ConvertError(f"{what} is not supported yet. Supported: {supported_text()}. "
                       "HINT: look for a ready-made GGUF of this model, or ask for the architecture to be added.")


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    val = cfg.get(key, default)
    if val is None:
        raise ConvertError(f"{path} lacks {key!r}, which the converter needs")
    if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
        raise ConvertError(f"{path}: {key} = {val!r} is not a positive integer")
    return val


def _rope_scaling(cfg: dict, arch: str, path: Path) -> RopeScaling | None:
    rs = cfg.get("rope_scaling")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ConvertError(f"{path}: rope_scaling = {rs!r} is not an object")
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return None
    if kind not in ROPE_SCALING_TYPES[arch]:
        raise ConvertError(f"{path}: rope_scaling type {kind!r} is not supported yet for {arch} "
                           f"(supported: none, {', '.join(ROPE_SCALING_TYPES[arch])}). HINT: remove rope_scaling "
                           "from config.json to convert the model for its original context length.")
    factor = float(rs.get("factor", 1.0))
    if not factor > 0:
        raise ConvertError(f"{path}: rope_scaling factor {factor!r} must be positive")
    if kind == "linear":
        return RopeScaling("linear", factor)
    low, high = float(rs.get("low_freq_factor", 1.0)), float(rs.get("high_freq_factor", 4.0))
    if not high > low:
        raise ConvertError(f"{path}: llama3 rope_scaling needs high_freq_factor > low_freq_factor")
    return RopeScaling("llama3", factor, low, high, int(rs.get("original_max_position_embeddings", 8192)))


def model_name(cfg: dict, hf_dir: Path) -> str:
    """general.name: the repo name from `_name_or_path` if it names one, else the folder name."""
    raw = cfg.get("_name_or_path")
    name = Path(raw).name if isinstance(raw, str) and raw.strip() else ""
    return name or hf_dir.resolve().name or "model"


def file_stem(name: str) -> str:
    """A file-name-safe version of a model name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def read_hf_config(hf_dir: str | Path) -> HFModel:
    hf_dir = Path(hf_dir)
    path = hf_dir / "config.json"
    if not hf_dir.is_dir():
        raise ConvertError(f"{hf_dir} is not a folder. HINT: point at the Hugging Face model folder.")
    cfg = _load_json(path)
    hf_class, arch = _pick_class(cfg, path)

    if cfg.get("quantization_config"):
        q = cfg["quantization_config"]
        method = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        raise ConvertError(f"{path}: the checkpoint is already quantized ({method}); only float weights "
                           "(F32, F16, BF16) can be converted. HINT: use the original unquantized model.")
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    if act not in ("silu", "swish"):
        raise ConvertError(f"{path}: hidden_act {act!r} is not supported (the llama/qwen3 graphs use SiLU)")
    n_ctx = _int(cfg, "max_position_embeddings", path)
    window = cfg.get("sliding_window")
    uses_window = cfg.get("use_sliding_window", arch == "llama")  # Qwen3 configs carry a window they do not use
    if uses_window and isinstance(window, int) and 0 < window < n_ctx:
        raise ConvertError(f"{path}: sliding-window attention ({window} of {n_ctx} tokens) is not supported by "
                           "the llama graph; the converted model would attend differently past that length.")

    n_embd = _int(cfg, "hidden_size", path)
    n_head = _int(cfg, "num_attention_heads", path)
    n_head_kv = _int(cfg, "num_key_value_heads", path, default=n_head)
    if n_head % n_head_kv:
        raise ConvertError(f"{path}: num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_head_kv}")
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if n_embd % n_head:
            raise ConvertError(f"{path}: hidden_size {n_embd} is not a multiple of num_attention_heads {n_head} "
                               "and no head_dim is given")
        head_dim = n_embd // n_head
    head_dim = _int({"head_dim": head_dim}, "head_dim", path)
    if head_dim % 2:
        raise ConvertError(f"{path}: head_dim {head_dim} is odd; rotary embeddings need an even head size")

    return HFModel(
        arch=arch,
        hf_class=hf_class,
        name=model_name(cfg, hf_dir),
        n_vocab=_int(cfg, "vocab_size", path),
        n_embd=n_embd,
        n_layer=_int(cfg, "num_hidden_layers", path),
        n_ff=_int(cfg, "intermediate_size", path),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ctx=n_ctx,
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_scaling=_rope_scaling(cfg, arch, path),
    )
