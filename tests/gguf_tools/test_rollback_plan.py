"""gguf_tools.rollback: every architecture the catalog offers can speculate exactly, a hybrid the
pinned llama.cpp has no recurrent-state rollback for is refused with the reason, a sliding window
is read from the metadata, `flashdesk inspect` shows the verdict, and the three sets of
architectures are the pinned llama.cpp's own (read from its llama-arch.cpp in the sdist)."""

from __future__ import annotations

import re
import sys
import tarfile
from pathlib import Path

import pytest
from engine.models.catalog import CATALOG
from gguf_tools import format_report, inspect_gguf
from gguf_tools.random_targets import architectures, write_random_target
from gguf_tools.rollback import HYBRID_ARCHS, RECURRENT_ARCHS, RS_ROLLBACK_ARCHS, rollback_plan
from tiny_gguf import write_arch_only

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import llama_source  # noqa: E402


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_catalog_architecture_speculates_exactly(name):
    plan = rollback_plan(CATALOG[name].architecture, {})
    assert plan["speculation"] == "exact", (name, plan)


def test_a_hybrid_without_rollback_is_refused_with_the_reason():
    plan = rollback_plan("qwen3next", {})
    assert plan["memory"] == "recurrent" and plan["speculation"] == "refused"
    assert "qwen3next" in plan["why"] and "HINT:" in plan["why"]
    assert rollback_plan("mamba", {})["speculation"] == "refused"  # recurrent only
    assert rollback_plan("qwen35", {}) | {"why": ""} == {"memory": "recurrent", "speculation": "exact", "why": ""}


def test_sliding_window_is_read_from_the_metadata():
    plan = rollback_plan("gemma4", {"gemma4.attention.sliding_window": 1024})
    assert plan["memory"] == "sliding-window" and plan["speculation"] == "exact" and "1024" in plan["why"]
    assert rollback_plan("gemma4", {"gemma4.attention.sliding_window": 0})["memory"] == "attention"
    assert rollback_plan("llama", {})["memory"] == "attention"


@pytest.mark.parametrize("arch", ["gemma4", "muse-glimmer"])
def test_the_tiny_sliding_window_targets_read_as_sliding_window(arch, model_path, tmp_path):
    r = inspect_gguf(write_random_target(tmp_path / f"{arch}.gguf", arch, tokenizer_from=model_path))
    assert r["rollback"]["memory"] == "sliding-window" and r["rollback"]["speculation"] == "exact"


def test_inspect_shows_the_verdict(tmp_path, model_path):
    r = inspect_gguf(write_arch_only(tmp_path / "next.gguf", "qwen3next"))
    assert r["rollback"]["speculation"] == "refused"
    assert "speculation   refused (recurrent memory): qwen3next models have recurrent layers" in format_report(r)
    smol = inspect_gguf(model_path)
    assert smol["rollback"]["memory"] == "attention" and "speculation   exact" in format_report(smol)
    assert inspect_gguf(Path(__file__).parents[2] / "engine" / "drafts" / "smollm2-dflash2.gguf")["rollback"] is None
    if "qwen3next" in architectures():  # the real tiny layout, where it exists
        real = inspect_gguf(write_random_target(tmp_path / "real.gguf", "qwen3next", tokenizer_from=model_path))
        assert real["rollback"]["speculation"] == "refused"


def _switch(source: str, function: str) -> set[str]:
    body = re.search(rf"bool {function}\(const llm_arch & arch\) \{{(.*?)\n\}}", source, re.S)
    assert body, f"{function} is not in llama-arch.cpp any more"
    return set(re.findall(r"case (LLM_ARCH_\w+):", body.group(1)))


def test_the_sets_are_the_pinned_llama_cpps():
    version = llama_source.pinned_version()
    try:
        path = llama_source.sdist(version)
        with tarfile.open(path) as tar:
            member = f"llama_cpp_python-{version}/vendor/llama.cpp/src/llama-arch.cpp"
            source = tar.extractfile(member).read().decode("utf-8")
    except (OSError, tarfile.TarError, KeyError) as e:
        pytest.skip(f"the pinned llama-cpp-python {version} sdist can't be read here: {e}")
    names = dict(re.findall(r"\{\s*(LLM_ARCH_\w+),\s*\"([^\"]+)\"\s*\}", source))

    def strings(function: str) -> set[str]:
        return {names[e] for e in _switch(source, function)}

    assert strings("llm_arch_is_recurrent") == RECURRENT_ARCHS
    assert strings("llm_arch_is_hybrid") == HYBRID_ARCHS
    assert strings("llm_arch_supports_rs_rollback") == RS_ROLLBACK_ARCHS
