"""A byte vocabulary and llama.cpp's own grammar sampler, to test what a grammar allows: a GGUF
with a tokenizer and no tensors (written here), one token per byte. Shared by the JSON Schema
tests; `vocab` is a fixture (a plugin of conftest.py).
"""

import ctypes

import llama_cpp
import pytest
from gguf import GGUFWriter

from engine.errors import InvalidRequest
from engine.grammar.schema import compile_response_format

EOS = 2  # token ids: 0 <unk>, 1 <s>, 2 </s>, then 3 + byte


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "bytes.gguf"
    w = GGUFWriter(str(path), "llama")
    for key, value in [("block_count", 1), ("context_length", 64), ("embedding_length", 8),
                       ("feed_forward_length", 8), ("attention.head_count", 1)]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
    w.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [6] * 256)  # unknown, control x2, byte
    for key, value in [("bos", 1), ("eos", EOS), ("unknown", 0)]:
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def allowed(sampler, token: int) -> bool:
    """May `token` come next? The grammar judges each candidate on its own, so one is enough."""
    data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(llama_cpp.llama_token_data_array(data, 1, -1, False)))
    return data[0].logit != float("-inf")


def accepts(vocab, grammar: str, text: str) -> bool:
    """Does llama.cpp's grammar sampler let exactly `text`, then end of generation, through?"""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler
    try:
        for byte in text.encode():
            if not allowed(sampler, 3 + byte):
                return False
            llama_cpp.llama_sampler_accept(sampler, 3 + byte)
        return allowed(sampler, EOS)
    finally:
        llama_cpp.llama_sampler_free(sampler)


def language(vocab, grammar: str, alphabet: str, max_len: int) -> set[str]:
    """Every string over `alphabet` of at most `max_len` characters the grammar accepts whole: a walk
    of all such strings, each prefix the sampler refuses cut off with everything under it."""
    found = set()

    def visit(sampler, prefix):
        if allowed(sampler, EOS):
            found.add(prefix)
        for c in alphabet if len(prefix) < max_len else "":
            if allowed(sampler, 3 + ord(c)):
                child = llama_cpp.llama_sampler_clone(sampler)
                llama_cpp.llama_sampler_accept(child, 3 + ord(c))
                visit(child, prefix + c)
                llama_cpp.llama_sampler_free(child)

    root = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert root
    visit(root, "")
    llama_cpp.llama_sampler_free(root)
    return found


def js(schema, **envelope):
    return {"type": "json_schema", "json_schema": {"name": "work_order", "schema": schema, **envelope}}


def refused(response_format) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as e:
        compile_response_format(response_format)
    return e.value


MULTIBYTE = [c.encode() for c in "é日訂單😀"]  # whole characters: a lone byte of one is no text


def walk(vocab, grammar: str, rng, max_bytes: int = 3000) -> str | None:
    """One random text the grammar allows whole: each step picks among the ASCII bytes it lets
    through and a few whole multi-byte characters whose bytes it lets through (closing quotes and
    brackets weighted up so texts end), and stops at the end of generation when that is allowed
    (or with some chance before a longer text). None past max_bytes."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    assert sampler
    out = bytearray()
    weight = {**{ord(c): 20 for c in '"]}'}, **{ord(c): 3 for c in "0123456789,"}}
    try:
        while len(out) <= max_bytes:
            ok = _allowed_all(sampler)
            if EOS in ok and (len(ok) == 1 or rng.random() < 0.5):
                return out.decode("utf-8")
            options = [bytes([t - 3]) for t in ok if 3 <= t < 3 + 128]
            options += [c for c in MULTIBYTE if _allows_bytes(sampler, c)]
            assert options, "the grammar allows no character and no end: a dead end"
            piece = rng.choices(options, [weight.get(o[0], 1) for o in options])[0]
            for b in piece:
                llama_cpp.llama_sampler_accept(sampler, 3 + b)
            out += piece
        return None
    finally:
        llama_cpp.llama_sampler_free(sampler)


def _allowed_all(sampler) -> set[int]:
    data = (llama_cpp.llama_token_data * 257)(*[llama_cpp.llama_token_data(t, 0.0, 0.0)
                                               for t in [EOS] + [3 + b for b in range(256)]])
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(llama_cpp.llama_token_data_array(data, 257, -1, False)))
    return {d.id for d in data if d.logit != float("-inf")}


def _allows_bytes(sampler, piece: bytes) -> bool:
    probe = llama_cpp.llama_sampler_clone(sampler)
    try:
        for b in piece:
            if not allowed(probe, 3 + b):
                return False
            llama_cpp.llama_sampler_accept(probe, 3 + b)
        return True
    finally:
        llama_cpp.llama_sampler_free(probe)
