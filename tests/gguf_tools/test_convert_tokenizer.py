"""HF tokenizer.json <-> GGUF tokenizer metadata: llama.cpp must tokenize exactly like `tokenizers`.

Each case trains a small byte-level BPE with the `tokenizers` library under one of the
pre-tokenizer configurations we map to a llama.cpp name, writes a 1-layer random llama
GGUF with `add_tokenizer`, loads it in llama.cpp and compares token ids (and the text
they decode to) on strings that exercise the regexes: digits, CJK, emoji, contractions,
whitespace runs, code, special and user-defined added tokens. These strings tell every
pair of supported pre-tokenizers apart (a test labels each tokenizer with every other
name and expects a difference), so a passing case pins the name to the configuration.
The reverse direction (`export_hf`: GGUF -> tokenizer.json + safetensors) is checked at
the end on the same tiny models; the real-model round trip is in test_roundtrip.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors import safe_open
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from tiny_gguf import add_one_block

from engine.llama.model import Model
from gguf_tools.convert.tokenizer import LLAMA3_SPLIT, QWEN2_SPLIT, QWEN35_SPLIT, TokenizerError, add_tokenizer
from gguf_tools.export_hf import ExportError, export_hf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_TOKEN = "<think>"  # an added token that is not special -> USER_DEFINED
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
PRE_NAMES = ["smollm", "llama-bpe", "qwen2", "qwen35", "gpt-2"]
PAD_IDS = 5  # config.json vocab_size is larger than the tokenizer: the GGUF fills the holes

CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, don't you think? We've seen it, you're right, I'd go.",
    "Order 42: print 300 shirts, blue ink, sizes M and L; deliver 1,000 flyers by 3.30pm.",
    "你好，世界！这是一个测试。印刷厂今天很忙。",
    "日本語のテキスト。한국어 텍스트입니다.",
    "Emoji: 😀👍🏽🇺🇸 ❤️ 🦙🦙 and Ünïcödé àccents, нещо на Български.",
    "def foo(x):\n    return x ** 2\n\n\nclass Bar:\n\tpass\n",
    "tabs\tand\nnewlines\r\nmixed   spaces    here\n\n\n",
    "3 33 333 3333 33333 1234567 3.14 1,000,000 3..3 3...3 2024-05-06 12:30 x2 A4 ",
    "```````\"\"\"\"......!!!!!!?????? ------======= You'RE we'Ve a'lL it's ",
] * 3

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, don't you think? You'RE right; we'Ve a'lL seen it.",
    "Numbers: 3 33 333 3333 33333 1234567 3.14 1,000,000 and 3..3 3...3",
    "你好，世界！这是一个测试。",
    "日本語のテキスト and 한국어 텍스트",
    "Emoji: 😀👍🏽🇺🇸 ❤️ 🦙🦙 😶‍🌫️",
    "tabs\tand\nnewlines\r\nmixed",
    "  leading and trailing spaces  ",
    "multiple   internal    spaces\n\n\n   \n",
    "def foo(x):\n    return x ** 2\n",
    "''''''```````\"\"\"\"......!!!!!!?????? ------=======",
    "нещо на Български",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "a <think>reasoning here</think> b",
    "",
]


def _pre(name: str):
    split = {"llama-bpe": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT, "qwen35": QWEN35_SPLIT}
    if name == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split[name]), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_tokenizer(pre: str, vocab_size: int = 1000) -> Tokenizer:
    """Merges are learnt on whole lines (no pre-split), so the vocabulary also holds pieces
    like "333", "Ġ3" or "s," that only some pre-tokenizers allow: a wrong pre-tokenizer
    name then changes the ids, and the comparison below can see it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.pre_tokenizer = _pre(pre)
    # Llama 3's tokenizer.json sets ignore_merges, and llama.cpp does the same for llama-bpe.
    tok.model.ignore_merges = pre == "llama-bpe"
    tok.add_tokens([AddedToken(USER_TOKEN, special=False, normalized=False)])
    return tok


def write_hf_dir(d: Path, tok: Tokenizer, *, tokenizer_config: dict | None = None, merges_as_strings: bool = False,
                 pad_ids: int = PAD_IDS) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    data = json.loads(tok.to_str())
    if merges_as_strings:  # the older tokenizer.json layout: "a b" instead of ["a", "b"]
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    (d / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), "utf-8")
    cfg = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
           "pad_token": "<|im_end|>", "add_bos_token": False, "chat_template": CHAT_TEMPLATE}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg if tokenizer_config is None else tokenizer_config))
    (d / "config.json").write_text(json.dumps({"vocab_size": tok.get_vocab_size() + pad_ids}))
    return d


def write_tiny_llama(path: Path, hf_dir: Path, seed: int = 0) -> Path:
    """A loadable 1-layer random llama GGUF whose tokenizer comes from `hf_dir`."""
    w = gguf.GGUFWriter(str(path), "llama")
    add_tokenizer(w, hf_dir, "llama")
    n_vocab = len(w.kv_data[0]["tokenizer.ggml.tokens"].value)
    e, ff, heads = 32, 64, 2
    w.add_context_length(256)
    w.add_embedding_length(e)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_dimension_count(e // heads)
    w.add_layer_norm_rms_eps(1e-5)
    add_one_block(w, n_vocab, e, ff, seed)
    return path


def metadata(path: Path) -> dict:
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")}


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_llama_cpp_tokenizes_like_tokenizers(tmp_path, pre):
    tok = train_tokenizer(pre)
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", tok))
    meta = metadata(gguf_path)
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == pre

    model = Model(gguf_path)
    try:
        for text in TEXTS:
            want = tok.encode(text, add_special_tokens=False).ids
            got = model.tokenize(text, add_bos=False, special=True)
            assert got == want, f"{pre}: {text!r}"
            # llama.cpp renders control tokens as nothing, as HF does when skipping special tokens.
            assert model.detokenize(got) == tok.decode(want, skip_special_tokens=True), f"{pre}: {text!r}"
            if not any(s in text for s in SPECIALS):
                assert model.detokenize(got) == text
        assert not model.add_bos  # tokenizer_config.json says add_bos_token: false (llama-bpe defaults true)
    finally:
        model.close()


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_the_strings_tell_the_pre_tokenizers_apart(tmp_path, monkeypatch, pre):
    """Mislabel the tokenizer with each other name: llama.cpp must then split some string differently."""
    import gguf_tools.convert.tokenizer as module

    tok = train_tokenizer(pre)
    hf = write_hf_dir(tmp_path / "hf", tok)
    for wrong in (n for n in PRE_NAMES if n != pre):
        monkeypatch.setattr(module, "detect_pre_tokenizer", lambda _tok, name=wrong: name)
        model = Model(write_tiny_llama(tmp_path / f"{wrong}.gguf", hf))
        try:
            differ = [t for t in TEXTS
                      if model.tokenize(t, add_bos=False) != tok.encode(t, add_special_tokens=False).ids]
        finally:
            model.close()
        assert differ, f"no test string tells {pre} from {wrong}"


def test_metadata_types_ids_and_template(tmp_path):
    tok = train_tokenizer("smollm")
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", tok))
    meta = metadata(gguf_path)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    n = tok.get_vocab_size()
    assert len(tokens) == len(types) == n + PAD_IDS
    assert tokens[:3] == SPECIALS and types[:3] == [gguf.TokenType.CONTROL] * 3
    user_id = tok.token_to_id(USER_TOKEN)
    assert tokens[user_id] == USER_TOKEN and types[user_id] == gguf.TokenType.USER_DEFINED
    assert tokens[n:] == [f"[PAD{i}]" for i in range(n, n + PAD_IDS)]
    assert types[n:] == [gguf.TokenType.UNUSED] * PAD_IDS
    assert all(types[i] == gguf.TokenType.NORMAL for i in range(3, n) if i != user_id)
    assert tokens[3:n] == [tok.id_to_token(i) for i in range(3, n)]
    assert meta["tokenizer.ggml.bos_token_id"] == 1 and meta["tokenizer.ggml.eos_token_id"] == 2
    assert meta["tokenizer.ggml.unknown_token_id"] == 0 and meta["tokenizer.ggml.padding_token_id"] == 2
    assert meta["tokenizer.ggml.add_bos_token"] is False and meta["tokenizer.ggml.add_eos_token"] is False
    assert meta["tokenizer.chat_template"] == CHAT_TEMPLATE


def test_merges_in_both_formats_give_the_same_gguf(tmp_path):
    tok = train_tokenizer("qwen2")
    a = write_tiny_llama(tmp_path / "pairs.gguf", write_hf_dir(tmp_path / "pairs", tok))
    b = write_tiny_llama(tmp_path / "strings.gguf", write_hf_dir(tmp_path / "strings", tok, merges_as_strings=True))
    ma, mb = metadata(a), metadata(b)
    assert len(ma["tokenizer.ggml.merges"]) > 100
    assert ma == mb
    first = json.loads(tok.to_str())["model"]["merges"][0]
    assert ma["tokenizer.ggml.merges"][0] == " ".join(first)


def test_add_bos_from_the_post_processor_and_named_templates(tmp_path):
    """Llama 3 style: no add_bos_token in tokenizer_config.json; the post-processor adds BOS.
    A list of named chat templates: "default" is the main one, the others keep their names."""
    tok = train_tokenizer("llama-bpe")
    tok.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A",
                                                       special_tokens=[("<|endoftext|>", 0)])
    cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
           "chat_template": [{"name": "default", "template": CHAT_TEMPLATE}, {"name": "tool_use", "template": "x"}]}
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", tok, tokenizer_config=cfg))
    meta = metadata(gguf_path)
    assert meta["tokenizer.ggml.add_bos_token"] is True and meta["tokenizer.ggml.bos_token_id"] == 0
    assert meta["tokenizer.chat_template"] == CHAT_TEMPLATE and meta["tokenizer.chat_template.tool_use"] == "x"
    model = Model(gguf_path)
    try:
        text = "Hello world 123"
        assert model.tokenize(text) == tok.encode(text).ids  # both add BOS by default
    finally:
        model.close()


def _writer(tmp_path: Path) -> gguf.GGUFWriter:
    return gguf.GGUFWriter(str(tmp_path / "never-written.gguf"), "llama")


@pytest.mark.parametrize("pre_tokenizer", [
    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,4}| ?\p{L}+"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
])
def test_an_unknown_pre_tokenizer_is_refused(tmp_path, pre_tokenizer):
    d = write_hf_dir(tmp_path / "hf", train_tokenizer("smollm"))
    data = json.loads((d / "tokenizer.json").read_text("utf-8"))
    data["pre_tokenizer"] = pre_tokenizer
    (d / "tokenizer.json").write_text(json.dumps(data), "utf-8")
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer") as e:
        add_tokenizer(_writer(tmp_path), d, "llama")
    assert "smollm" in str(e.value) and "llama-bpe" in str(e.value) and "HINT" in str(e.value)


def test_sentencepiece_and_missing_tokenizers_are_refused(tmp_path):
    d = tmp_path / "spm"
    d.mkdir()
    (d / "tokenizer.model").write_bytes(b"\x0a\x00")
    with pytest.raises(TokenizerError, match="SentencePiece") as e:
        add_tokenizer(_writer(tmp_path), d, "llama")
    assert "qwen2" in str(e.value) and "HINT" in str(e.value)
    (d / "tokenizer.model").unlink()
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        add_tokenizer(_writer(tmp_path), d, "llama")


def test_a_vocab_size_smaller_than_the_tokenizer_is_refused(tmp_path):
    tok = train_tokenizer("smollm")
    d = write_hf_dir(tmp_path / "hf", tok, pad_ids=-10)
    with pytest.raises(TokenizerError, match="vocab_size"):
        add_tokenizer(_writer(tmp_path), d, "llama")


# -- the reverse: GGUF -> tokenizer.json + safetensors (gguf_tools.export_hf) -------------------


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_export_rebuilds_an_equivalent_tokenizer_json(tmp_path, pre):
    tok = train_tokenizer(pre)
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", tok))
    export_hf(gguf_path, tmp_path / "out")
    rebuilt = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    for text in TEXTS:
        assert rebuilt.encode(text, add_special_tokens=False).ids == tok.encode(text, add_special_tokens=False).ids
    cfg = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert cfg["chat_template"] == CHAT_TEMPLATE and cfg["eos_token"] == "<|im_end|>"
    assert cfg["add_bos_token"] is False
    # and back again: the converter's tokenizer part reads the exported folder to the same metadata
    again = write_tiny_llama(tmp_path / "again.gguf", tmp_path / "out")
    assert metadata(again) == metadata(gguf_path)


def _read_raw_safetensors(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """name -> (dtype, shape, bytes), read by hand (NumPy has no bfloat16 for the library to give)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


def test_export_safetensors_in_every_dtype_with_hf_rotary_order(tmp_path):
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", train_tokenizer("smollm")))
    source = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(gguf_path)).tensors}
    q = source["blk.0.attn_q.weight"]  # llama.cpp's interleaved rotary rows, 2 heads of 16
    for dtype in ("float32", "float16", "bfloat16"):
        out = tmp_path / dtype
        export_hf(gguf_path, out, dtype=dtype)
        with safe_open(str(out / "model.safetensors"), framework="numpy") as f:
            names = set(f.keys())
            hf_q = f.get_tensor("model.layers.0.self_attn.q_proj.weight") if dtype != "bfloat16" else None
        assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names and len(names) == 11
        raw = _read_raw_safetensors(out / "model.safetensors")
        kind, shape, data = raw["model.layers.0.self_attn.q_proj.weight"]
        assert kind == {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype] and shape == [32, 32]
        if dtype == "bfloat16":
            hf_q = (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        # HF order is per head [first halves | second halves]: row i of a head pairs with row i + 8.
        for h in range(2):
            for i in range(8):
                for j, row in enumerate((i, i + 8)):
                    np.testing.assert_allclose(hf_q[h * 16 + row], q[h * 16 + 2 * i + j], rtol=1e-2, atol=1e-3)
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["tie_word_embeddings"] is True and cfg["torch_dtype"] == dtype and cfg["vocab_size"] == len(
            source["token_embd.weight"])


def test_export_refuses_what_it_cannot_write(tmp_path):
    gguf_path = write_tiny_llama(tmp_path / "tiny.gguf", write_hf_dir(tmp_path / "hf", train_tokenizer("smollm")))
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("keep me")
    with pytest.raises(ExportError, match="not empty.*HINT"):
        export_hf(gguf_path, tmp_path / "busy")
    with pytest.raises(ExportError, match="dtype"):
        export_hf(gguf_path, tmp_path / "out", dtype="int8")
    w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "qwen3")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ExportError, match="Llama checkpoints only"):
        export_hf(tmp_path / "q.gguf", tmp_path / "out2")
