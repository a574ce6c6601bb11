"""The Models page says when the speed-up will never run for an installed model, and why, in
plain words (English and Traditional Chinese): here a qwen3next model, whose recurrent layers the
pinned llama.cpp cannot roll back (the store's listing says so from the file). For the model in
use, when /health says speculation is off, the card gives the engine's own reason.

A real `flashdesk serve` on a home of its own serves SmolLM2; the qwen3next file is the tiny random
one where gguf_tools.random_targets has its layout, else a metadata-only file (the listing reads
metadata only, and it is never loaded here). /health is the real server's with the refusal put in,
as a hybrid model's load would make it.
"""

from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import expect

from conftest import linked_home, serving
from engine.models.store import ModelStore, no_progress
from gguf_tools.random_targets import architectures, write_random_target
from tests.ui.browser import Page
from tiny_gguf import write_arch_only

ARCH = "qwen3next"
WHY = ("this model has recurrent layers (as in Qwen3.5-3.8 and other hybrid models) and this llama.cpp keeps 0 of "
       "the 7 state snapshots per sequence that rolling back rejected tokens needs")
WORDS = {
    "en-US": {"refused": f"Not for this model: models of its type ({ARCH}) keep a running summary",
              "off": "Off for this model on this computer."},
    "zh-TW": {"refused": f"這個模型不會加速：這類模型（{ARCH}）", "off": "這個模型在這台電腦上不使用加速。"},
}


@pytest.fixture(scope="module")
def hybrid_server(tmp_path_factory, store, model_path):
    d = tmp_path_factory.mktemp("rollback-ui")
    src = d / f"tiny-{ARCH}.gguf"
    if ARCH in architectures():
        write_random_target(src, ARCH, tokenizer_from=model_path)
    else:
        write_arch_only(src, ARCH)
    home = linked_home(d / "home", store)
    ModelStore(home).install("hybrid", lambda dst: shutil.copy(src, dst), src.name, f"import:{src}",
                             progress=no_progress)
    with serving(home, "--parallel", "1") as srv:
        yield srv


def refused_health(route):
    health = route.fetch().json()
    if health.get("speculation"):
        health["speculation"] |= {"exact": False, "enabled": False, "exact_why": WHY}
    route.fulfill(json=health)


@pytest.mark.parametrize("locale", ["en-US", "zh-TW"])
def test_a_recurrent_model_without_rollback_says_why_it_gets_no_speed_up(browser, hybrid_server, locale):
    tab = Page(browser, hybrid_server.base, locale)
    try:
        tab.page.route("**/health", refused_health)
        page = tab.open("#/models")
        hybrid = page.locator('.model-card[data-model="hybrid"]')
        expect(hybrid.locator(".rollback-refused")).to_contain_text(WORDS[locale]["refused"])
        smol = page.locator('.model-card[data-model="smollm2"]')
        expect(smol.locator(".rollback-refused")).to_have_count(0)  # plain attention: nothing to warn of
        expect(smol).to_contain_text(WORDS[locale]["off"])
        expect(smol.locator(".speed-why")).to_contain_text(WHY)  # the engine's own words, as measured
        page.wait_for_timeout(300)  # let the last health answer settle before the picture
        tab.shot(f"models-rollback-{locale}")
    finally:
        tab.close()
    assert not tab.blocked and not tab.errors, tab.errors
