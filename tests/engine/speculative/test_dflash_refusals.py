"""A draft that does not fit its target, or a hostile one, is refused with a clear DraftRefused, never an
abort or a write past a buffer.

If any of these reached llama.cpp unchecked the whole pytest process would die, so a
passing run is itself the proof that nothing aborted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DRAFT
from gguf import GGUFWriter
from hostile_drafts import HOSTILE, write_hostile
from tiny_gguf import add_one_block

from engine.errors import ModelLoadError
from engine.llama.model import Model
from engine.models.store import ModelStore, no_progress
from engine.speculative.drafters.dflash import DFlashDrafter, DraftRefused
from gguf_tools import check_gguf
from gguf_tools.dflash import DraftConfig, random_tensors, write_dflash_draft, write_random_draft


@pytest.fixture(scope="module")
def target(model_path):
    m = Model(model_path)
    yield m
    m.close()


def copy_tokenizer(w: GGUFWriter, model_path, edit: dict[int, bytes] | None = None) -> None:
    s = check_gguf(model_path, arrays=("tokenizer.ggml.",))
    for key, value in s.metadata.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        if key == "tokenizer.ggml.tokens" and edit:
            value = list(value)
            for i, text in edit.items():
                value[i] = text
        w.add_key_value(key, value, *s.types[key])


def write_tiny_qwen2(path, model_path) -> None:
    """A loadable 1-layer qwen2 model with SmolLM2's tokenizer (n_embd 64, random weights)."""
    e, f, v = 64, 128, 49152
    w = GGUFWriter(str(path), "qwen2")
    for key, val in [("block_count", 1), ("context_length", 512), ("embedding_length", e),
                     ("feed_forward_length", f), ("attention.head_count", 2), ("attention.head_count_kv", 2)]:
        w.add_uint32(f"qwen2.{key}", val)
    w.add_float32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
    copy_tokenizer(w, model_path)
    add_one_block(w, v, e, f, seed=0, scale=0.02)

def refused(path, target, *words: str) -> str:
    with pytest.raises(DraftRefused) as info:
        DFlashDrafter(str(path), target)
    msg = str(info.value)
    assert isinstance(info.value, ModelLoadError) and "HINT" in msg
    for word in words:
        assert word in msg, msg
    return msg


def test_a_non_dflash_gguf_is_refused(target, model_path, tmp_path):
    refused(model_path, target, "'llama' model, not a DFlash draft")
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    refused(tmp_path / "junk.gguf", target, "not a readable GGUF")


def test_a_draft_of_another_width_is_refused(target, model_path, tmp_path):
    path = tmp_path / "narrow.gguf"
    write_random_draft(path, model_path, n_embd=320, n_head=5, n_head_kv=5, n_ff=640)
    refused(path, target, "n_embd is 320", "576")


def test_a_tap_beyond_the_target_layers_is_refused(target, model_path, tmp_path):
    # a draft made for a deeper target: its config allows layer 40, SmolLM2 has 30 layers
    cfg = DraftConfig.for_target(model_path, target_n_layer=64, target_layers=(2, 9, 40))
    path = tmp_path / "deep.gguf"
    write_dflash_draft(path, cfg, random_tensors(cfg), model_path)
    refused(path, target, "[2, 9, 40]", "30 layers")


def test_a_draft_with_another_tokenizer_is_refused(target, model_path, tmp_path):
    other = tmp_path / "other-tokenizer.gguf"  # metadata only: the writer reads just the tokenizer
    w = GGUFWriter(str(other), "llama")
    copy_tokenizer(w, model_path, edit={1000: b"flashdesk"})
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    cfg = DraftConfig.for_target(model_path)
    path = tmp_path / "retok.gguf"
    write_dflash_draft(path, cfg, random_tensors(cfg), other)
    refused(path, target, "another tokenizer")


def test_a_target_that_cannot_publish_layer_inputs_is_refused(model_path, tmp_path):
    tiny = tmp_path / "tiny-qwen2.gguf"
    write_tiny_qwen2(tiny, model_path)
    qwen2 = Model(tiny)
    try:
        assert qwen2.info.architecture == "qwen2"
        refused(model_path, qwen2, "'qwen2' cannot publish layer inputs")
    finally:
        qwen2.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    """The hostile-draft corpus (tests/hostile_drafts.py), each made from the shipped draft."""
    d = tmp_path_factory.mktemp("hostile")
    return {name: write_hostile(DRAFT, d / f"{name}.gguf", name) for name in HOSTILE}


@pytest.fixture(scope="module")
def shop(target, tmp_path_factory) -> ModelStore:
    """A store with SmolLM2 installed as "shop", for the drafts to be paired with."""
    store = ModelStore(tmp_path_factory.mktemp("store") / "home")
    store.import_file(target.path, "shop", progress=no_progress)
    return store


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_draft_is_refused_before_llama_cpp_reads_it(target, hostile, shop, name):
    """At load and at pairing: refused by our reading of the file, so llama.cpp never loads it (if it
    did, the disclosed shape would write past a heap buffer in this process)."""
    refused(hostile[name], target, "HINT")
    folder = shop.models_dir / "shop"
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(DraftRefused):
        shop.pair("shop", hostile[name], progress=no_progress)
    assert shop.get("shop").draft == "" and sorted(p.name for p in folder.iterdir()) == before
