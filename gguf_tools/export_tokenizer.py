"""A GGUF's byte-level BPE vocabulary -> Hugging Face `tokenizer.json` + `tokenizer_config.json`.

The reverse of `gguf_tools.convert.tokenizer`, for the round-trip proof of issue 7 and for
users who want a GGUF's tokenizer in the `tokenizers` library: the vocabulary and merges
become a `models.BPE`, `tokenizer.ggml.pre` becomes the same pre-tokenizer steps the
converter recognises (one table, `PRE_TOKENIZERS`, serves both directions), control and
user-defined tokens become added tokens (special and not), unused placeholder tokens are
left out (the converter fills such id holes again from config.json's vocab_size).

Not supported: SentencePiece vocabularies (`tokenizer.ggml.model` "llama").
References: llama.cpp `src/llama-vocab.cpp` (token types, ignore_merges and clean_spaces
per pre-tokenizer), the `tokenizers` library's Python API.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf

from .convert.tokenizer import CLEAN_SPACES, PRE_TOKENIZERS, detect_pre_tokenizer

# Pre-tokenizers for which llama.cpp takes a whole pre-token from the vocabulary before
# trying merges (its `ignore_merges`); the `tokenizers` BPE has the same switch.
IGNORE_MERGES = ("llama-bpe",)


class ExportError(ValueError):
    """The GGUF cannot be exported as a Hugging Face folder (the one error type of the exporter)."""


def _tokenizers():
    # Imported when used: `tokenizers` is only needed to export, never to serve or convert.
    try:
        import tokenizers
    except ModuleNotFoundError as e:
        raise ExportError("exporting a tokenizer needs the `tokenizers` package. "
                                   "HINT: pip install tokenizers") from e
    return tokenizers


@dataclass
class GGUFVocab:
    """The `tokenizer.*` metadata of a GGUF, as plain Python values."""

    model: str
    pre: str
    tokens: list[str]
    types: list[int]  # gguf.TokenType per token
    merges: list[str]  # "left right"
    special: dict[str, int]  # "bos"/"eos"/"unk"/"pad" -> id, those present
    add_bos: bool
    add_eos: bool
    chat_template: str | None


def read_vocab(reader: gguf.GGUFReader) -> GGUFVocab:
    def get(key, default=None):
        field = reader.fields.get(key)
        return field.contents() if field is not None else default

    model = get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ExportError(
            f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') vocabularies can be exported "
            "to tokenizer.json. HINT: SentencePiece GGUFs are not supported yet.")
    pre = get("tokenizer.ggml.pre")
    if pre not in PRE_TOKENIZERS:
        raise ExportError(f"tokenizer.ggml.pre {pre!r} is not one of {', '.join(PRE_TOKENIZERS)}. "
                                   "HINT: this model's pre-tokenizer is not supported yet.")
    tokens = get("tokenizer.ggml.tokens", [])
    types = get("tokenizer.ggml.token_type", [int(gguf.TokenType.NORMAL)] * len(tokens))
    keys = gguf.Keys.Tokenizer
    special = {k: int(v) for k, key in (("bos", keys.BOS_ID), ("eos", keys.EOS_ID), ("unk", keys.UNK_ID),
                                        ("pad", keys.PAD_ID))
               if (v := get(key)) is not None and 0 <= int(v) < len(tokens)}
    return GGUFVocab(model=model, pre=pre, tokens=list(tokens), types=[int(t) for t in types],
                     merges=list(get("tokenizer.ggml.merges", [])), special=special,
                     add_bos=bool(get("tokenizer.ggml.add_bos_token", False)),
                     add_eos=bool(get("tokenizer.ggml.add_eos_token", False)),
                     chat_template=get("tokenizer.chat_template"))


def _pre_tokenizer(pre: str):
    tk = _tokenizers()
    pre_tokenizers, Regex = tk.pre_tokenizers, tk.Regex
    steps = []
    for step in PRE_TOKENIZERS[pre]:
        if step[0] == "digits":
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        elif step[0] == "split":
            steps.append(pre_tokenizers.Split(Regex(step[1]), behavior="isolated", invert=False))
        elif step[0] == "bytelevel":
            steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=step[1]))
        else:  # a new table entry needs its builder here
            raise AssertionError(f"no builder for pre-tokenizer step {step!r}")
    return steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)


def build_tokenizer(v: GGUFVocab):
    """A `tokenizers.Tokenizer` that tokenizes like llama.cpp does with this vocabulary."""
    tk = _tokenizers()
    AddedToken, Tokenizer, decoders, models, processors = (tk.AddedToken, tk.Tokenizer, tk.decoders, tk.models,
                                                           tk.processors)
    normal, control, user = gguf.TokenType.NORMAL, gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED
    vocab = {t: i for i, (t, ty) in enumerate(zip(v.tokens, v.types)) if ty in (normal, control, user)}
    merges = []
    for m in v.merges:
        cut = m.find(" ", 1)  # llama.cpp splits at the first space after the first character
        if cut < 0:
            raise ExportError(f"merge {m!r} has no separating space. HINT: the GGUF is damaged.")
        merges.append((m[:cut], m[cut + 1:]))
    unk = v.tokens[v.special["unk"]] if "unk" in v.special else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, ignore_merges=v.pre in IGNORE_MERGES))
    tok.pre_tokenizer = _pre_tokenizer(v.pre)
    tok.decoder = decoders.ByteLevel()
    # Added tokens match as whole strings before pre-tokenization, in llama.cpp as in HF.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(v.tokens, v.types) if ty == control])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(v.tokens, v.types) if ty == user])
    if v.add_bos and "bos" in v.special:
        bos = v.tokens[v.special["bos"]]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, v.special["bos"])])
    # The table must read the same in both directions, or a round trip would change the name.
    assert detect_pre_tokenizer(json.loads(tok.to_str())) == v.pre
    return tok


def tokenizer_config(v: GGUFVocab, n_ctx: int | None) -> dict:
    cfg: dict = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": v.add_bos,
        "add_eos_token": v.add_eos,
        "clean_up_tokenization_spaces": CLEAN_SPACES[v.pre],
    }
    for kind in ("bos", "eos", "unk", "pad"):
        cfg[f"{kind}_token"] = v.tokens[v.special[kind]] if kind in v.special else None
    if n_ctx:
        cfg["model_max_length"] = n_ctx
    if v.chat_template is not None:
        cfg["chat_template"] = v.chat_template
    return cfg


def write_tokenizer_files(reader: gguf.GGUFReader, out_dir: Path, n_ctx: int | None = None) -> GGUFVocab:
    """Write tokenizer.json and tokenizer_config.json for the GGUF in `reader` into `out_dir`."""
    v = read_vocab(reader)
    build_tokenizer(v).save(str(Path(out_dir) / "tokenizer.json"))
    text = json.dumps(tokenizer_config(v, n_ctx), indent=2, ensure_ascii=False)
    (Path(out_dir) / "tokenizer_config.json").write_text(text + "\n", "utf-8")
    return v
