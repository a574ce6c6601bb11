"""Tokenizer metadata for a converted GGUF: a Hugging Face `tokenizer.json` -> `tokenizer.ggml.*`.

What llama.cpp needs to tokenize exactly like the `tokenizers` library: the token list in
id order with a type per token, the BPE merges, the name of the pre-tokenizer (llama.cpp
keeps one built-in regex set per name and picks it by `tokenizer.ggml.pre`), the special
token ids, the add-BOS/EOS flags and the chat template.

Supported: byte-level BPE (`tokenizer.ggml.model = "gpt2"`), as used by SmolLM/SmolLM2,
Llama 3 and Qwen2/Qwen3. The pre-tokenizer name is read off the tokenizer.json
pre-tokenizer configuration (Split regex / Digits / ByteLevel), compared with the
variants in `PRE_TOKENIZERS`; anything else is refused, never guessed, because a wrong
regex tokenizes plausibly and wrongly. Upstream's converter instead hashes the ids of a
probe string, which needs `transformers` and a table of hashes.
Not supported: SentencePiece (`tokenizer.model`, llama.cpp model "llama"), WordPiece, Unigram.

References: llama.cpp `src/llama-vocab.cpp` (pre-tokenizer names and their regexes,
token types), the tokenizer.json layout of the `tokenizers` library, GGUF key names
in `gguf.constants.Keys.Tokenizer`.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf

from .errors import ConvertError

# The Split regexes exactly as the models' tokenizer.json files spell them (after JSON
# decoding). llama.cpp's regex for each name is an equivalent rewrite of these.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# llama.cpp pre-tokenizer name -> the tokenizer.json pre-tokenizer steps it reproduces, in
# a canonical form: ("digits",) = Digits(individual_digits=True); ("split", REGEX) =
# Split(Regex, behavior Isolated, invert false); ("bytelevel", use_regex) = ByteLevel with
# add_prefix_space false (use_regex true means GPT-2's own split regex runs first).
PRE_TOKENIZERS: dict[str, tuple[tuple, ...]] = {
    "gpt-2": (("bytelevel", True),),
    "smollm": (("digits",), ("bytelevel", True)),  # SmolLM, SmolLM2 (StarCoder's tokenizer)
    "llama-bpe": (("split", LLAMA3_SPLIT), ("bytelevel", False)),  # Llama 3.x
    "qwen2": (("split", QWEN2_SPLIT), ("bytelevel", False)),  # Qwen2, Qwen2.5, Qwen3
    "qwen35": (("split", QWEN35_SPLIT), ("bytelevel", False)),  # Qwen3.5
}
# llama.cpp's `clean_spaces` per name (HF's clean_up_tokenization_spaces when decoding).
CLEAN_SPACES = {"gpt-2": True, "smollm": False, "llama-bpe": True, "qwen2": False, "qwen35": False}
# llama.cpp ignores normalizers for these models; NFC (Qwen) only matters for non-NFC input.
ACCEPTED_NORMALIZERS = (None, "NFC")

SUPPORTED_HELP = ("byte-level BPE tokenizer.json with one of the pre-tokenizers "
                  + ", ".join(PRE_TOKENIZERS) + " (SmolLM/SmolLM2, Llama 3, Qwen2/Qwen3, GPT-2 style)")


class TokenizerError(ConvertError, ValueError):
    """The Hugging Face tokenizer cannot be written as llama.cpp tokenizer metadata."""


def add_tokenizer(writer: gguf.GGUFWriter, hf_dir: Path, arch: str) -> None:
    """Write the `tokenizer.*` metadata of the HF checkpoint in `hf_dir` into `writer`.

    `arch` is the GGUF architecture being written (only used in messages). Raises
    TokenizerError with a HINT for anything llama.cpp could not reproduce exactly.
    """
    hf_dir = Path(hf_dir)
    tok = _load_tokenizer_json(hf_dir, arch)
    cfg = _read_json(hf_dir / "tokenizer_config.json")
    model = tok["model"]

    tokens, types = vocab_in_id_order(tok, _config_vocab_size(hf_dir))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(detect_pre_tokenizer(tok))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges_as_strings(model.get("merges") or []))
    writer.add_add_space_prefix(False)

    ids = special_token_ids(hf_dir, cfg, {t: i for i, t in enumerate(tokens)}, len(tokens))
    for kind, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("unk", writer.add_unk_token_id), ("pad", writer.add_pad_token_id)):
        if kind in ids:
            add(ids[kind])
    add_bos, add_eos = _add_bos_eos(cfg, tok)
    # Always written: llama.cpp defaults some pre-tokenizers (llama-bpe) to add_bos=true.
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(add_eos)

    template = chat_template(hf_dir, cfg)
    if template is not None:
        writer.add_chat_template(template)


# -- tokenizer.json -----------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{path} is not valid JSON: {e}. "
                             "HINT: download the file again; it may be truncated.") from e
    return data if isinstance(data, dict) else {}


def _load_tokenizer_json(hf_dir: Path, arch: str) -> dict:
    path = hf_dir / "tokenizer.json"
    if not path.is_file():
        if (hf_dir / "tokenizer.model").is_file():
            raise TokenizerError(
                f"{hf_dir} has only a SentencePiece tokenizer (tokenizer.model); flashdesk converts "
                f"{SUPPORTED_HELP}. HINT: use a checkpoint that ships tokenizer.json with a byte-level "
                "BPE tokenizer, or llama.cpp's convert_hf_to_gguf.py for SentencePiece models.")
        raise TokenizerError(f"{hf_dir} has no tokenizer.json (needed for the {arch} vocabulary). "
                             "HINT: download the whole model folder, tokenizer files included.")
    tok = _read_json(path)
    model = tok.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise TokenizerError(f"{path}: tokenizer model {model.get('type')!r} is not supported; flashdesk "
                             f"converts {SUPPORTED_HELP}. HINT: SentencePiece/Unigram/WordPiece models are "
                             "not supported yet.")
    if model.get("byte_fallback") or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise TokenizerError(f"{path}: a BPE with byte_fallback or subword prefixes/suffixes is a SentencePiece-"
                             f"style tokenizer, not supported yet; flashdesk converts {SUPPORTED_HELP}.")
    if (tok.get("decoder") or {}).get("type") != "ByteLevel":
        raise TokenizerError(f"{path}: decoder {(tok.get('decoder') or {}).get('type')!r} is not ByteLevel; "
                             f"flashdesk converts {SUPPORTED_HELP}.")
    norm = (tok.get("normalizer") or {}).get("type")
    if norm not in ACCEPTED_NORMALIZERS:
        raise TokenizerError(f"{path}: normalizer {norm!r} has no llama.cpp equivalent for byte-level BPE "
                             "(accepted: none, NFC). HINT: this tokenizer is not supported yet.")
    return tok


def _canonical_steps(pre: dict | None) -> tuple[tuple, ...]:
    """tokenizer.json's pre_tokenizer as steps in the canonical form of PRE_TOKENIZERS."""
    if not pre:
        return ()
    if pre.get("type") == "Sequence":
        return tuple(s for p in pre.get("pretokenizers") or [] for s in _canonical_steps(p))
    kind = pre.get("type")
    if kind == "ByteLevel":
        # add_prefix_space would put a space before the text; llama.cpp's BPE never does.
        return (("bytelevel", bool(pre.get("use_regex", True))) if not pre.get("add_prefix_space")
                else ("bytelevel+prefix-space",),)
    if kind == "Digits":
        return (("digits",) if pre.get("individual_digits") else ("digits-runs",),)
    if kind == "Split":
        pattern = pre.get("pattern") or {}
        if "Regex" in pattern and pre.get("behavior") == "Isolated" and not pre.get("invert"):
            return (("split", pattern["Regex"]),)
        return (("split-other", json.dumps(pre, sort_keys=True)),)
    return ((f"other:{kind}",),)


def detect_pre_tokenizer(tok: dict) -> str:
    """The llama.cpp pre-tokenizer name (`tokenizer.ggml.pre`) for a tokenizer.json dict."""
    steps = _canonical_steps(tok.get("pre_tokenizer"))
    for name, want in PRE_TOKENIZERS.items():
        if steps == want:
            return name
    shown = json.dumps(tok.get("pre_tokenizer"), ensure_ascii=False)
    raise TokenizerError(
        f"unknown pre-tokenizer {shown[:400]}: it matches none of the variants llama.cpp reproduces "
        f"({', '.join(PRE_TOKENIZERS)}). Writing a near match would tokenize some text differently from "
        "the original model. HINT: this model's tokenizer is not supported yet; report it with its "
        "tokenizer.json pre_tokenizer section.")


def vocab_in_id_order(tok: dict, config_vocab_size: int | None) -> tuple[list[str], list[int]]:
    """All tokens (model vocab + added tokens) indexed by id, with their gguf.TokenType.

    The list is as long as the embedding matrix (config.json vocab_size, often padded past
    the last token, e.g. Qwen3), so ids line up; holes become "[PAD<id>]" of type UNUSED.
    """
    by_id: dict[int, str] = {}
    for text, i in tok["model"]["vocab"].items():
        by_id[int(i)] = text
    added: dict[int, bool] = {}  # id -> special
    for a in tok.get("added_tokens") or []:
        i = int(a["id"])
        by_id[i] = a["content"]  # an added token wins over a vocab entry with its id, as in HF
        added[i] = bool(a.get("special"))
    n = max(by_id) + 1 if by_id else 0
    if config_vocab_size is not None:
        if config_vocab_size < n:
            raise TokenizerError(f"the tokenizer has ids up to {n - 1} but config.json says vocab_size "
                                 f"{config_vocab_size}. HINT: the tokenizer does not belong to these weights.")
        n = config_vocab_size
    tokens, types = [], []
    for i in range(n):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(text)
            # Added tokens spelled <|...|> are control tokens even when not flagged special
            # (llama.cpp's convention; they must never be produced from plain text pieces).
            special = added[i] or (text.startswith("<|") and text.endswith("|>"))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(text)
            types.append(gguf.TokenType.NORMAL)
    return tokens, [int(t) for t in types]


def merges_as_strings(merges: list) -> list[str]:
    """Merges as llama.cpp wants them, "left right"; tokenizer.json has "a b" or ["a", "b"]."""
    out = []
    for m in merges:
        if isinstance(m, str):
            if " " not in m[1:]:
                raise TokenizerError(f"merge {m!r} has no separating space. HINT: tokenizer.json is damaged.")
            out.append(m)
        elif isinstance(m, (list, tuple)) and len(m) == 2 and all(isinstance(s, str) for s in m):
            if " " in m[0] or " " in m[1]:
                # A byte-level vocabulary spells spaces as "Ġ"; a literal space cannot be split back.
                raise TokenizerError(f"merge {m!r} contains a space, which llama.cpp's merge format "
                                     "cannot hold. HINT: not a byte-level BPE; not supported yet.")
            out.append(f"{m[0]} {m[1]}")
        else:
            raise TokenizerError(f"merge {m!r} is neither 'a b' nor [a, b]. HINT: tokenizer.json is damaged.")
    return out


# -- special tokens, flags, chat template ---------------------------------------------------


def _config_vocab_size(hf_dir: Path) -> int | None:
    cfg = _read_json(hf_dir / "config.json")
    size = cfg.get("vocab_size", (cfg.get("text_config") or {}).get("vocab_size"))
    return int(size) if isinstance(size, int) else None


def _token_text(value) -> str | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", "lstrip": ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def special_token_ids(hf_dir: Path, cfg: dict, lookup: dict[str, int], n_vocab: int) -> dict[str, int]:
    """bos/eos/unk/pad ids: token strings from tokenizer_config.json or special_tokens_map.json,
    else ids from config.json or generation_config.json (a list of eos ids gives its first)."""
    sources = [cfg, _read_json(hf_dir / "special_tokens_map.json")]
    id_sources = [_read_json(hf_dir / "config.json"), _read_json(hf_dir / "generation_config.json")]
    out: dict[str, int] = {}
    for kind in ("bos", "eos", "unk", "pad"):
        for src in sources:
            text = _token_text(src.get(f"{kind}_token"))
            if text is not None:
                if text not in lookup:
                    raise TokenizerError(f"{kind}_token {text!r} is not in the vocabulary. "
                                         "HINT: tokenizer_config.json does not match tokenizer.json.")
                out[kind] = lookup[text]
                break
        else:
            for src in id_sources:
                value = src.get(f"{kind}_token_id")
                if isinstance(value, list) and value:
                    value = value[0]
                if isinstance(value, int) and 0 <= value < n_vocab:
                    out[kind] = value
                    break
    return out


def _add_bos_eos(cfg: dict, tok: dict) -> tuple[bool, bool]:
    """tokenizer_config's add_bos_token/add_eos_token, else what the post-processor template adds."""
    single: list = []
    post = tok.get("post_processor") or {}
    for p in post.get("processors", [post]) if post.get("type") == "Sequence" else [post]:
        if p.get("type") == "TemplateProcessing":
            single = p.get("single") or []
    first = bool(single) and "SpecialToken" in single[0]
    last = bool(single) and "SpecialToken" in single[-1]
    add_bos = cfg["add_bos_token"] if isinstance(cfg.get("add_bos_token"), bool) else first
    add_eos = cfg["add_eos_token"] if isinstance(cfg.get("add_eos_token"), bool) else last
    return add_bos, add_eos


def chat_template(hf_dir: Path, cfg: dict) -> str | list | None:
    """tokenizer_config.json's chat_template (a string, or a list of named templates whose
    "default" becomes the main one), else a chat_template.jinja file beside it."""
    template = cfg.get("chat_template")
    if isinstance(template, (str, list)) and template:
        return template
    jinja = hf_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text("utf-8")
    return _read_json(hf_dir / "chat_template.json").get("chat_template")
