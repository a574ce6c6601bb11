"""The tiny random targets of gguf_tools.random_targets: llama.cpp loads each, decodes it, and the
DFlash drafts written for it load against it (the engine's invariance tests build on them)."""

from __future__ import annotations

import pytest

from engine import Engine, EngineConfig, SamplingParams
from engine.llama.model import Model
from gguf_tools import check_gguf
from gguf_tools.dflash import write_random_draft
from gguf_tools.random_targets import architectures, write_random_target

ARCHS = architectures()


@pytest.fixture(scope="module", params=ARCHS)
def tiny(request, tmp_path_factory, model_path):
    arch = request.param
    path = write_random_target(tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf", arch, tokenizer_from=model_path)
    return arch, path


def test_each_catalog_architecture_has_a_tiny_target():
    from engine.models.catalog import CATALOG

    wanted = {e.architecture for e in CATALOG.values()} - {"llama"}  # llama: SmolLM2 itself
    assert wanted <= set(ARCHS)


def test_llama_cpp_loads_it_as_its_architecture(tiny):
    arch, path = tiny
    assert check_gguf(path).metadata["general.architecture"] == arch
    m = Model(path)
    try:
        assert m.info.architecture == arch
        assert m.info.n_layer >= 2 and m.n_vocab == 49152
    finally:
        m.close()


def test_it_decodes_text_that_is_not_one_token(tiny):
    arch, path = tiny
    eng = Engine.load(str(path), EngineConfig(n_ctx=512, n_parallel=1, n_threads=2, spec_mode="off"))
    try:
        out = eng.chat([{"role": "user", "content": "Write a list of ten colours."}],
                       sampling=SamplingParams(temperature=0), max_tokens=24)
        assert len(out.tokens) == 24 and len(set(out.tokens)) > 3, out.tokens
    finally:
        eng.close()


@pytest.mark.parametrize("kind", ["dflash2", "dflash1"])
def test_dflash_drafts_fit_it(tiny, tmp_path, kind):
    arch, path = tiny
    draft = tmp_path / f"draft-{kind}.gguf"
    extra = {"selector_top_k": 4, "selector_rank": 8} if kind == "dflash2" else {}
    write_random_draft(draft, path, seed=1, kind=kind, block_size=8, n_layer=1, **extra)
    eng = Engine.load(str(path), EngineConfig(n_ctx=512, n_parallel=2, n_threads=2, draft=str(draft)))
    try:
        assert "dflash" in eng.drafters, eng.speculation.draft_error
    finally:
        eng.close()
