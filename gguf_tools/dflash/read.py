"""Read a DFlash draft GGUF back into a `DraftFile` (`read_draft`), as write.py writes one.

What it is: the reading half of the format in format.py, through `check_gguf` (the one
bounds-checked walker). It tells the kind from the tensors as llama.cpp's dflash.cpp does
(`kind_of`), reads the keys that kind carries, and refuses, with every problem in one
message, what the pinned llama.cpp would refuse or misread and what flashdesk cannot run:
a DSpark draft (`markov_w1.weight`: a Markov head on the logits, not a DFlash proposal), a
DFlash 2 selector with parts missing (llama.cpp would report K candidates and give no
lattice, or refuse the extra tensors), and a plain DFlash (v1) draft with a reduced
vocabulary (`d2t`), which the v1 drafter does not handle.

`read_checked` words a refusal once, for all who refuse a draft file: the engine's check before
pairing or loading (engine/speculative/drafters/dflash_fit.py) and `flashdesk inspect`.

What it is not: the key names, the config or its validation (format.py), or a check
against a target (`format.fits`).
"""

from __future__ import annotations

import os

from gguf import GGUFValueType

from ..check import GGUFFormatError, GGUFSummary, check_gguf
from .format import (ARCH, CAUSAL_KEY, DFLASH1, DFLASH2, DSPARK_TENSOR, FLOAT_KEYS, HIDDEN_ACT_KEY, MASK_KEY,
                     OPTIONAL_FLOAT_KEYS, SELECTOR_TENSORS, SLIDING_PATTERN_KEY, SLIDING_WINDOW_KEY, TARGET_LAYERS_KEY,
                     TOKENS_KEY, TOP_K_KEY, UINT_KEYS, DraftConfig, DraftFile, kind_of, uint_keys, vocab_digest)

# what a key llama.cpp does not require reads as when it is absent (from the fields read before it)
_READ_DEFAULTS = {"dflash.attention.head_count_kv": lambda f: f["n_head"],
                  "dflash.attention.key_length": lambda f: (f["n_embd"] or 0) // max(f["n_head"] or 1, 1),
                  "dflash.rope.freq_base": lambda f: 10000.0}
_REQUIRED = object()
# ends every refusal of a draft, whoever refuses it (pairing, loading, `flashdesk inspect`)
HINT = ("HINT: use a draft made for this exact target (`flashdesk convert-draft --target TARGET.gguf` or "
        "`flashdesk train-draft`), or run without a draft.")


def read_checked(path: str | os.PathLike) -> tuple[DraftFile | None, str]:
    """(the draft, "") or (None, why it is refused): what the file alone says, in the one wording that
    pairing, loading and `flashdesk inspect` all give. A target can refuse a readable draft too (`fits`).
    Raises GGUFFormatError or OSError for a broken file: each caller words that for its own context."""
    try:
        return read_draft(path), ""
    except GGUFFormatError:  # a ValueError too, but no draft at all: each caller words it
        raise
    except ValueError as e:
        return None, f"draft {e}. {HINT}"


def read_draft(path: str | os.PathLike) -> DraftFile:
    """The draft GGUF at `path` as a `DraftFile`: its config and what only the file knows.

    Raises GGUFFormatError or OSError for a broken file, ValueError (every problem in one message) for
    a GGUF that is no DFlash draft we can run. `target_n_layer` is None: a draft does not record its
    target's depth, `format.fits` checks the taps against the target."""
    s = check_gguf(path, arrays=(TARGET_LAYERS_KEY, SLIDING_PATTERN_KEY, TOKENS_KEY))
    if s.architecture != ARCH:
        raise ValueError(f"{s.path} is a {s.architecture!r} model, not a DFlash draft "
                         f"(general.architecture must be {ARCH!r})")
    tensors = {t.name: t for t in s.tensors}
    kind = kind_of(tensors)
    if kind == "dspark":
        raise ValueError(f"{s.path} is a DSpark draft ({DSPARK_TENSOR}: a Markov head on the draft's logits); "
                         "flashdesk runs DFlash 2 and plain DFlash (v1) drafts only")
    if kind == DFLASH1 and (TOP_K_KEY in s.metadata or set(SELECTOR_TENSORS) & set(tensors)):
        have = sorted({TOP_K_KEY} & set(s.metadata) | set(SELECTOR_TENSORS) & set(tensors))
        raise ValueError(f"{s.path} has parts of a DFlash 2 candidate selector ({', '.join(have)}) but not "
                         "selector_hidden.weight: it is neither a complete DFlash 2 draft nor a plain DFlash one")
    fields, problems = _read_fields(s, kind)
    if kind == DFLASH2:
        missing = [n for n in SELECTOR_TENSORS if n not in tensors]
        if missing:
            problems.append(f"its DFlash 2 selector lacks {', '.join(missing)}")
    elif "d2t" in tensors:
        problems.append("it is a plain DFlash (v1) draft with a reduced vocabulary (d2t), which flashdesk does "
                        "not run; use a full-vocabulary draft")
    if not problems:
        draft = DraftFile(**fields, path=s.path, vocab_digest=vocab_digest(s.metadata[TOKENS_KEY]),
                          n_vocab_draft=_n_keep(tensors, problems))
        problems += draft.problems() or _fc_problems(draft, tensors)
    if problems:
        raise ValueError(f"{s.path}: {'; '.join(problems)}")
    return draft


def _read_fields(s: GGUFSummary, kind: str) -> tuple[dict, list[str]]:
    """DraftConfig keyword arguments of a draft of `kind` from its metadata, and what is missing or
    mistyped (a plain DFlash draft carries no conv or selector keys)."""
    m, problems, f = s.metadata, [], {}

    def get(key: str, typ, default=_REQUIRED):
        v = m.get(key)
        if v is None and default is not _REQUIRED:
            return default
        if key in s.types and s.types[key][0] == GGUFValueType.ARRAY:  # check_gguf gives an array's length
            problems.append(f"{key} is an array, not a single value")
            return None
        if v is None or not isinstance(v, typ) or isinstance(v, bool) != (typ is bool):
            what = {int: "an integer", bool: "a bool", str: "a string"}.get(typ, "a number")
            problems.append(f"{key} is missing" if v is None else f"{key} is {v!r}, not {what}")
            return None
        return v

    for field, key in uint_keys(kind) + FLOAT_KEYS:
        if field in f or field in ("n_vocab", "mask_token_id"):  # head_dim once; those two from the tokenizer
            continue
        derived = _READ_DEFAULTS.get(key)
        want = int if (field, key) in UINT_KEYS else (int, float)
        f[field] = get(key, want, derived(f) if derived else _REQUIRED)
    for field, _ in FLOAT_KEYS:  # a float32 key may hold a whole number
        f[field] = float(f[field] or 0.0)
    tokens, taps = m.get(TOKENS_KEY), m.get(TARGET_LAYERS_KEY)
    if not isinstance(tokens, list) or not tokens:
        problems.append(f"it carries no tokenizer ({TOKENS_KEY})")
        tokens = []
    if not isinstance(taps, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in taps):
        problems.append(f"{TARGET_LAYERS_KEY} is missing or no array of integers")
        taps = []
    f.update(kind=kind, n_vocab=len(tokens), target_n_layer=None, target_layers=tuple(int(t) for t in taps),
             mask_token_id=get(MASK_KEY, int), causal=get(CAUSAL_KEY, bool, False),
             name=str(m.get("general.name", DraftConfig.name)), hidden_act=get(HIDDEN_ACT_KEY, str, "silu"))
    for field, key in OPTIONAL_FLOAT_KEYS:
        v = get(key, (int, float), 0.0)
        f[field] = float(v) if v else None  # llama.cpp reads 0 as unset
    window, pattern = get(SLIDING_WINDOW_KEY, int, 0) or 0, m.get(SLIDING_PATTERN_KEY)
    if pattern is not None and (not isinstance(pattern, list) or len(pattern) != f["n_layer"]):
        problems.append(f"{SLIDING_PATTERN_KEY} must hold one flag per layer")  # llama.cpp reads it whatever the window
    elif window > 0:
        if not isinstance(pattern, list) or len(pattern) != f["n_layer"]:
            problems.append(f"{SLIDING_PATTERN_KEY} must hold one flag per layer when a sliding window is set")
            pattern = []
        # an all-sliding pattern is the config's () (write.py writes it out whole)
        f.update(sliding_window=window, swa_layers=() if all(pattern) else tuple(bool(b) for b in pattern))
    return f, problems


def _fc_problems(draft: DraftFile, tensors: dict) -> list[str]:
    """The feature projection must take exactly the taps' features: `fc.weight` is [n_embd, taps x n_embd]
    (ggml order). A file whose taps disagree with it would have llama.cpp size buffers from one and read
    the other."""
    fc, e = tensors.get("fc.weight"), draft.n_embd
    want = (len(draft.target_layers) * e, e)
    if fc is None or tuple(fc.shape) != want:
        return [f"fc.weight is {list(fc.shape) if fc is not None else 'missing'}, not {list(want)} "
                f"({len(draft.target_layers)} target layers of {e} features)"]
    return []


def _n_keep(tensors: dict, problems: list[str]) -> int | None:
    """Rows of a reduced output head: a d2t map (I64, one id per row) with its own output.weight."""
    d2t = tensors.get("d2t")
    if d2t is None:
        return None
    if d2t.type_name != "I64" or len(d2t.shape) != 1 or "output.weight" not in tensors:
        problems.append("its d2t map is not one I64 row or comes without an output.weight")
        return None
    return int(d2t.shape[0])
