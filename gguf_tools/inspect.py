"""What is in a GGUF file, for people and scripts: `inspect_gguf(path) -> dict`.

Architecture, parameter count (summed from tensor shapes), quantization, tensor types and
the largest tensors, context length and shape of the network, tokenizer and special
tokens, chat template, DFlash draft keys and kind (DFlash 2 with K candidates, plain DFlash
v1, or a DSpark draft flashdesk cannot run), and whether this llama.cpp can pair a DFlash
draft with the model, and whether speculation can roll rejected tokens back on its memory
(`rollback`, from rollback.py: an expectation; the engine measures it at load).
`format_report` turns the dict into a short block of text. A draft is also read as pairing and
loading read it (`read_checked`): `draft_refusal` is their refusal, word for word, or None.
No array is shown whole past a bound (a hostile draft's target_layers may hold a million ids):
the dict keeps a count and the first items, the text shows a count and the first few.

The file is validated by `check_gguf` first (every count, size and offset bounds-checked),
so a broken file raises GGUFFormatError before anything here trusts it. Nothing is loaded
into llama.cpp: this module must stay importable without llama_cpp or the engine.
Not a validator of drafts against a target (gguf_tools/dflash/format.py `fits`, which the
engine's drafters/dflash_fit.py calls).
"""

from __future__ import annotations

import os
from collections import defaultdict

from .check import GGUFSummary, check_gguf
from .dflash.format import ARCH as DRAFT_ARCH, CAPTURE_ARCHS, MAX_LAYERS, TOKENS_KEY, kind_of, kind_words
from .dflash.read import read_checked
from .rollback import rollback_plan

N_LARGEST = 5
# Integer tensors (a draft's d2t map, say) hold indices, not weights: not parameters.
_INDEX_TYPES = {"I8", "I16", "I32", "I64"}
_FLOAT_TYPES = {"F32", "F16", "BF16", "F64"}
# Arrays longer than this stay out of the dict whole; no valid file has one this long among what is
# shown (per-layer values, a draft's taps), so only a malformed file's arrays are cut.
MAX_ARRAY = MAX_LAYERS
N_FIRST = 8  # items of a longer array the dict keeps
N_SHOWN = 5  # ... and the text shows
_SPECIAL = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id"}


def file_type_name(file_type: int | None) -> str | None:
    """general.file_type (llama_ftype) -> "Q4_1", "Q4_K_M", "F16"...; None if unknown."""
    if file_type is None:
        return None
    try:
        from gguf import LlamaFileType  # absent from old gguf releases
        name = LlamaFileType(file_type).name
    except (ImportError, ValueError):
        return None
    if name == "GUESSED":
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _plain(v):
    """A metadata value as JSON-ready data (check_gguf gives the items of string arrays as bytes);
    an array longer than MAX_ARRAY as {"count": n, "first": [its first N_FIRST items]}."""
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, list):
        if len(v) > MAX_ARRAY:
            return {"count": len(v), "first": [_plain(x) for x in v[:N_FIRST]]}
        return [_plain(x) for x in v]
    return v


def _prefixed(meta: dict, prefix: str) -> dict:
    """`prefix*` keys without the prefix; arrays are whole (a per-layer head count, or a draft's
    target_layers, must not read as a number)."""
    return {k.removeprefix(prefix): _plain(v) for k, v in meta.items() if k.startswith(prefix)}


def _tensor_stats(s: GGUFSummary) -> tuple[int, dict, list]:
    n_params = 0
    types: dict[str, dict] = defaultdict(lambda: {"count": 0, "bytes": 0})
    for t in s.tensors:
        n = 1
        for d in t.shape:
            n *= d
        if t.type_name not in _INDEX_TYPES:
            n_params += n
        types[t.type_name]["count"] += 1
        types[t.type_name]["bytes"] += t.nbytes
    types = dict(sorted(types.items(), key=lambda kv: -kv[1]["bytes"]))
    largest = [{"name": t.name, "shape": list(t.shape), "type": t.type_name, "bytes": t.nbytes}
               for t in sorted(s.tensors, key=lambda t: -t.nbytes)[:N_LARGEST]]
    return n_params, types, largest


def _quantization(meta: dict, types: dict) -> tuple[str | None, bool]:
    """(name, guessed): from general.file_type, else the type holding most weight bytes."""
    name = file_type_name(meta.get("general.file_type"))
    if name:
        return name, False
    weights = [k for k in types if k not in _INDEX_TYPES and k != "F32"] or [k for k in types if k == "F32"]
    return (weights[0], True) if weights else (None, True)


def inspect_gguf(path: str | os.PathLike) -> dict:
    """Describe a GGUF file; raises GGUFFormatError (broken file) or OSError (unreadable)."""
    path = os.fspath(path)
    # every array whole: one walk, and keeping them costs little over reading them (check.py)
    s = check_gguf(path, arrays=("",))
    meta = s.metadata
    arch = s.architecture
    n_params, types, largest = _tensor_stats(s)
    quant, guessed = _quantization(meta, types)
    hp = _prefixed(meta, f"{arch}.") if isinstance(arch, str) and arch else {}
    tokens = meta.get(TOKENS_KEY)
    template = meta.get("tokenizer.chat_template")
    is_draft = arch == DRAFT_ARCH
    # the file read a second time, by the reader pairing and loading use, so the refusal is theirs
    refusal = (read_checked(path)[1] or None) if is_draft else None
    if is_draft:
        can_pair, why = False, "this file is itself a DFlash draft; pair it with the target it was made for"
    elif arch in CAPTURE_ARCHS:
        can_pair, why = True, f"this llama.cpp publishes the layer inputs of {arch} models"
    else:
        can_pair, why = False, (f"this llama.cpp cannot publish the layer inputs of {arch!r} models "
                                f"(it can for: {', '.join(sorted(CAPTURE_ARCHS))}); prompt lookup still works")
    return {
        "path": path,
        "file_size": s.file_size,
        "gguf_version": s.version,
        "architecture": _plain(arch),
        "name": _plain(meta.get("general.name")),
        "size_label": _plain(meta.get("general.size_label")),
        "parameters": n_params,
        "quantization": quant,
        "quantization_guessed": guessed,
        "file_type": _plain(meta.get("general.file_type")),
        "context_length": hp.get("context_length"),
        "embedding_length": hp.get("embedding_length"),
        "block_count": hp.get("block_count"),
        "feed_forward_length": hp.get("feed_forward_length"),
        "head_count": hp.get("attention.head_count"),
        "head_count_kv": hp.get("attention.head_count_kv"),
        "tensor_count": len(s.tensors),
        "tensor_types": types,
        "largest_tensors": largest,
        "chat_template": {"present": isinstance(template, str),
                          "length": len(template) if isinstance(template, str) else 0},
        "tokenizer": {
            "model": _plain(meta.get("tokenizer.ggml.model")),
            "pre": _plain(meta.get("tokenizer.ggml.pre")),
            "vocab_size": len(tokens) if isinstance(tokens, list) else None,
            "special_tokens": {short: _plain(meta.get(f"tokenizer.ggml.{key}")) for short, key in _SPECIAL.items()},
        },
        "is_dflash_draft": is_draft,
        "dflash": hp if is_draft else None,
        # as llama.cpp tells them apart, from the tensors: "dflash2" | "dflash1" | "dspark"
        "dflash_kind": kind_of(t.name for t in s.tensors) if is_draft else None,
        # why pairing and loading refuse this draft, in their words; None: they do not (a target may, `fits`)
        "draft_refusal": refusal,
        "can_pair_dflash_draft": can_pair,
        "dflash_pairing": why,
        # a draft's memory is not rolled back: only a target's is
        "rollback": None if is_draft else rollback_plan(arch if isinstance(arch, str) else "", meta),
    }


def _mb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k"


def _show(v) -> str:
    """A value for the text: an array of more than N_SHOWN items as its count and first few."""
    if isinstance(v, dict) and "count" in v:  # cut by _plain
        n, items = v["count"], v["first"]
    elif isinstance(v, list):
        n, items = len(v), v
    else:
        return str(v)
    if n <= N_SHOWN:
        return str(items)
    return f"{n} values: {', '.join(map(str, items[:N_SHOWN]))}, ..."


def format_report(r: dict) -> str:
    """The dict of `inspect_gguf` as a short block a person can read."""
    name = os.path.basename(r["path"])
    lines = [f"{name}  ({_mb(r['file_size'])}, GGUF v{r['gguf_version']})"]

    def row(label: str, text) -> None:
        lines.append(f"  {label:<14}{text}")

    if r["name"]:
        row("model", _show(r["name"]))
    shape = [f"{_count(r['parameters'])} parameters"]
    if r["block_count"] is not None:
        shape.append(f"{_show(r['block_count'])} layers")
    if r["embedding_length"] is not None:
        shape.append(f"{_show(r['embedding_length'])} wide")
    if r["head_count"] is not None:
        kv = f" ({_show(r['head_count_kv'])} for keys/values)" \
            if r["head_count_kv"] not in (None, r["head_count"]) else ""
        shape.append(f"{_show(r['head_count'])} heads{kv}")
    row("architecture", f"{_show(r['architecture'])}: " + ", ".join(shape))
    if r["quantization"]:
        row("quantization", r["quantization"] + (" (guessed from the tensors)" if r["quantization_guessed"] else ""))
    if r["context_length"] is not None:
        row("context", f"{_show(r['context_length'])} tokens (trained)")
    tok = r["tokenizer"]
    if tok["model"] or tok["vocab_size"]:
        special = ", ".join(f"{k} {_show(v)}" for k, v in tok["special_tokens"].items() if v is not None)
        pre = f" (pre-tokenizer {_show(tok['pre'])})" if tok["pre"] else ""
        row("tokenizer", f"{_show(tok['model'] or '?')}{pre}, {tok['vocab_size'] or '?'} tokens"
                         + (f"; {special}" if special else ""))
    else:
        row("tokenizer", "none in the file")
    ct = r["chat_template"]
    if ct["present"]:
        row("chat template", f"yes ({ct['length']} characters)")
    else:
        row("chat template", "no (a draft needs none)" if r["is_dflash_draft"] else
            "no (chat needs a template; plain completions still work)")
    types = ", ".join(f"{k} x{v['count']} ({_mb(v['bytes'])})" for k, v in r["tensor_types"].items())
    row("tensors", f"{r['tensor_count']}: {types}")
    for i, t in enumerate(r["largest_tensors"][:3]):
        shape = "x".join(map(str, t["shape"]))
        row("largest" if i == 0 else "", f"{t['name']} {shape} {t['type']} ({_mb(t['bytes'])})")
    if r["is_dflash_draft"]:
        d = r["dflash"]
        keys = ", ".join(f"{k} {_show(d[k])}" for k in ("block_size", "selector_top_k", "target_layers",
                                                          "block_count") if k in d)
        if r.get("draft_refusal"):  # a DFlash file, but not one flashdesk will pair or load
            row("DFlash draft", f"REFUSED: {r['draft_refusal']}")
            row("draft keys", keys)
        else:
            row("DFlash draft", "yes: " + keys)
        block = f", block {d['block_size']} (anchor + {d['block_size'] - 1} drafted)" \
            if isinstance(d.get("block_size"), int) else ""
        row("draft kind", kind_words(r["dflash_kind"], _show(d.get("selector_top_k") or 0)) + block)
    else:
        row("DFlash draft", f"can pair: {'yes' if r['can_pair_dflash_draft'] else 'no'}, {r['dflash_pairing']}")
    rb = r.get("rollback")
    if rb:
        row("speculation", f"{rb['speculation']} ({rb['memory']} memory): {rb['why']}")
    return "\n".join(lines)
