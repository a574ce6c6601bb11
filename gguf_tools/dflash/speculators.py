"""config.json of a DFlash draft made with vLLM's `speculators` library -> the z-lab layout that
convert_config.py reads, so both layouts go through the same checks and the same `DraftConfig`.

What it is: a rewrite of the config and the names of the tensors the converter skips. What it is not:
the refusals every layout shares (convert_config.py) or the tensor mapping (convert.py).

Facts relied on (vllm-project/speculators, `src/speculators/models/dflash/{config,core,dflash2,
model_definitions,attention}.py` on branch `dflash2`, `src/speculators/model.py` and
`src/speculators/convert/dflash/converter.py` on main; published configs such as
`rasyosef/Qwen3.5-2B-DFlash2`, `RedHatAI/Qwen3-4B-speculator.dflash2`):
- `speculators_model_type` ("dflash2" / "dflash") and `speculators_config.algorithm` name the kind; the
  architectures list may say `DFlash2DraftModel` too, so these keys, not the class, decide the layout.
- The decoder's settings are nested in `transformer_layer_config` (a Qwen3Config dict); the DFlash
  settings (block_size, mask_token_id, conv_*, selector_*) sit at the top level.
- `aux_hidden_state_layer_ids` index `output_hidden_states` (entry 0 = the embeddings), so each is
  z-lab's `target_layer_ids` + 1: speculators' converter from z-lab writes `i + 1` ("z-lab reads
  hidden_states[layer_id + 1] ... speculators uses the layer id directly"). That is the input of layer
  id, which is what llama.cpp captures: `dflash.target_layers` = the aux ids unchanged.
- The tensors carry the z-lab names (`layers.N.*`, `fc`, `hidden_norm`, `norm`, `attention_conv`,
  `mlp_conv`, `candidate_selector.*`; codebooks as nn.Embedding `.weight`), plus copies of the verifier's
  `embed_tokens` and `lm_head` (frozen, loaded from the verifier: `DraftVocabMixin.load_verifier_weights`),
  which llama.cpp's dflash graph takes from the target itself. `d2t`/`t2d` exist only for a reduced draft
  vocabulary (`draft_vocab_size` != vocab_size), which the graph cannot run (it scores the full vocabulary).
- Attention inside a block is bidirectional on full layers; on sliding layers only with
  `sliding_window_non_causal` (default False: causal). `sample_from_anchor` (default False) makes the
  anchor slot predict too, which llama.cpp's block decode does not do. `block_size` defaults to 8.
- The window is anchor-relative in training (context keys >= anchor - W) and query-relative in llama.cpp
  (keys > p - W): slot j sees j + 1 fewer of the oldest keys, out of W (2048 in published drafts). Not
  exact, so it is said here; the draft only proposes, the target decides every token.
"""

from __future__ import annotations

from pathlib import Path

from ..convert.errors import ConvertError

DRAFT_CLASS = {"dflash2": "DFlash2DraftModel", "dflash": "DFlashDraftModel"}  # the z-lab class of each kind
DEFAULT_BLOCK = 8  # DFlashSpeculatorConfig.block_size's default
# the verifier's own tensors a speculators checkpoint carries (and older ones saved verifier_*): not the draft's
VERIFIER_COPIES = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight")
_DFLASH_KEYS = ("mask_token_id", "conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
_HINT = "HINT: use a draft that fits llama.cpp's DFlash graph, or train one with `flashdesk train-draft`."


def is_speculators(cfg: dict) -> bool:
    return "speculators_model_type" in cfg or "speculators_config" in cfg


def drop_verifier_copies(refs: dict) -> dict:
    return {k: v for k, v in refs.items() if k.removeprefix("model.") not in VERIFIER_COPIES}


def _algorithm(cfg: dict, path: Path) -> str:
    spec = cfg.get("speculators_config") or {}
    names = {str(a).lower() for a in (cfg.get("speculators_model_type"), spec.get("algorithm")) if a}
    if len(names) != 1:
        raise ConvertError(f"{path}: speculators_model_type and speculators_config.algorithm disagree or are "
                           f"missing ({sorted(names)}), so which draft it is is ambiguous.")
    (algo,) = names
    if algo not in DRAFT_CLASS:
        what = "DSpark (DFlash with a Markov head on the draft's logits)" if "dspark" in algo else repr(algo)
        raise ConvertError(f"{path} is a speculators {what} draft; flashdesk runs only DFlash 2 and DFlash "
                           f"(speculators types {', '.join(DRAFT_CLASS)}). {_HINT}")
    return algo


def _taps(cfg: dict, path: Path) -> list[int]:
    aux = cfg.get("aux_hidden_state_layer_ids")
    if not isinstance(aux, list) or not aux or not all(isinstance(i, int) and not isinstance(i, bool) for i in aux):
        raise ConvertError(f"{path}: aux_hidden_state_layer_ids must be a non-empty list of layer ids, not {aux!r}")
    if min(aux) < 1:  # 0 is the embeddings: no z-lab id, and no speculators default taps it
        raise ConvertError(f"{path}: aux_hidden_state_layer_ids {aux} taps the embeddings (id 0); the ids count "
                           "hidden states from 1. HINT: the config is broken.")
    ids = [i - 1 for i in aux]  # z-lab ids; convert_config.py adds the 1 back for llama.cpp
    if "target_layer_ids" in cfg and cfg["target_layer_ids"] != ids:
        raise ConvertError(f"{path}: target_layer_ids {cfg['target_layer_ids']} and aux_hidden_state_layer_ids "
                           f"{aux} name different layers, so which the draft taps is ambiguous.")
    return ids


def _causal(cfg: dict, tl: dict, path: Path) -> bool:
    """The in-block attention as one flag: llama.cpp's graph has one for all layers."""
    types = tl.get("layer_types") or []
    sliding = [t == "sliding_attention" for t in types]
    if not (any(sliding) and tl.get("use_sliding_window") and tl.get("sliding_window")):
        return False  # full attention everywhere: bidirectional in the block
    if bool(cfg.get("sliding_window_non_causal", False)):
        return False
    if all(sliding) and len(sliding) == tl.get("num_hidden_layers"):
        return True  # every layer slides and is causal in the block
    raise ConvertError(f"{path}: its sliding layers attend causally inside a block (sliding_window_non_causal is "
                       "off) while its full layers attend both ways; llama.cpp's DFlash graph has one setting for "
                       f"all layers. {_HINT}")


def flatten(cfg: dict, path: Path) -> dict:
    """The z-lab layout of a speculators config: decoder settings at the top level, DFlash's in
    `dflash_config`, `_class` the z-lab class of its kind, `_layout` "speculators"."""
    algo = _algorithm(cfg, path)
    tl = cfg.get("transformer_layer_config")
    if not isinstance(tl, dict):
        raise ConvertError(f"{path}: a speculators draft keeps its decoder in transformer_layer_config, which is "
                           "missing. HINT: download the draft's own config.json.")
    vocab = tl.get("vocab_size")
    if cfg.get("draft_vocab_size", vocab) != vocab:
        raise ConvertError(f"{path}: the draft scores a reduced vocabulary of {cfg['draft_vocab_size']} tokens "
                           f"(draft_vocab_size; the target has {vocab}, mapped by d2t), which llama.cpp's DFlash "
                           f"graph cannot run: it scores the target's full vocabulary. {_HINT}")
    if cfg.get("target_hidden_size") not in (None, tl.get("hidden_size")):
        raise ConvertError(f"{path}: target_hidden_size {cfg['target_hidden_size']} differs from the draft's "
                           f"hidden_size {tl.get('hidden_size')}; llama.cpp's DFlash graph needs them equal. {_HINT}")
    if cfg.get("sample_from_anchor"):
        raise ConvertError(f"{path}: sample_from_anchor is on (the anchor slot drafts a token too); llama.cpp's "
                           f"DFlash block decode drafts only the masked slots. {_HINT}")
    flat = {k: v for k, v in tl.items() if k not in ("architectures", "dflash_config")}
    dflash = {k: cfg[k] for k in _DFLASH_KEYS if k in cfg}
    flat |= {"architectures": [DRAFT_CLASS[algo]], "is_causal": _causal(cfg, tl, path),
             "dflash_config": dflash | {"block_size": cfg.get("block_size", DEFAULT_BLOCK),
                                        "target_layer_ids": _taps(cfg, path)},
             "_class": DRAFT_CLASS[algo], "_layout": "speculators"}
    if "_name_or_path" in cfg:
        flat["_name_or_path"] = cfg["_name_or_path"]
    return flat


__all__ = ["DRAFT_CLASS", "VERIFIER_COPIES", "drop_verifier_copies", "flatten", "is_speculators"]
