"""The hardware tier in the browser: the sentence that names the model this computer should run
(a graphics card, a Mac; English and Traditional Chinese), the recommended card first, the
chat page's first-run notice that leads to it and stays away once dismissed, and on this
CPU-only machine's real server no recommendation at all.

This machine has no graphics card, so the GPU and Mac cases answer GET /v1/store/models with
a copy of the real server's JSON whose `hardware` (and tier fields) are those of such a machine.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.ui.browser import Page

RTX_4090 = {"kind": "gpu", "name": "NVIDIA GeForce RTX 4090", "memory_bytes": 25769803776,
            "budget_bytes": 25769803776 - (1 << 30)}
# a 64 GB Mac: Metal lets one program use about 3/4 of it (memory_bytes), the sentence says what it was sold with
MAC = {"kind": "unified", "name": "Apple M4 Pro", "memory_bytes": 48 << 30, "budget_bytes": 48 << 30,
       "ram_bytes": 64 << 30}
FLAGSHIP = "qwen3.8-27b"

SENTENCES = {
    ("en-US", "gpu"): "Your NVIDIA GeForce RTX 4090 (24 GB) can run Qwen3.8-27B (UD-Q4_K_S) with its DFlash 2 draft: "
                      "16.5 GB download.",
    ("en-US", "mac"): "Your Mac (64 GB) can run Qwen3.8-27B (UD-Q4_K_S) with its DFlash 2 draft: 16.5 GB download.",
    ("zh-TW", "gpu"): "您的 NVIDIA GeForce RTX 4090（24 GB）可以執行 Qwen3.8-27B (UD-Q4_K_S) 及其 DFlash 2 輔助模型，"
                      "下載大小為 16.5 GB。",
    ("zh-TW", "mac"): "您的 Mac（64 GB）可以執行 Qwen3.8-27B (UD-Q4_K_S) 及其 DFlash 2 輔助模型，下載大小為 16.5 GB。",
}
WORDS = {  # what the page says beside the sentence, per language
    "en-US": {"badge": "Recommended for this computer", "fits": "Fits your graphics card", "fits_mac":
              "Fits this computer's memory", "open": "Show me this model", "dismiss": "No, thanks"},
    "zh-TW": {"badge": "最適合這台電腦", "fits": "您的顯示卡可以執行", "fits_mac": "這台電腦的記憶體足夠執行",
              "open": "查看這個模型", "dismiss": "不用了，謝謝"},
}


def as_machine(tab, hardware: dict, installed: bool = False) -> None:
    """Answer GET /v1/store/models as the real server would on `hardware`, recommending the flagship
    (`installed`: as if it were installed already)."""
    def answer(route):
        body = route.fetch().json()
        body["hardware"] = hardware
        for c in body["catalog"]:
            c["fits"] = c["memory_bytes"] <= hardware["budget_bytes"]
            c["recommended"] = c["name"] == FLAGSHIP
            c["installed"] = c["installed"] or installed and c["name"] == FLAGSHIP
        route.fulfill(json=body)

    tab.page.route("**/v1/store/models", answer)


@pytest.mark.parametrize("machine", ["gpu", "mac"])
@pytest.mark.parametrize("locale", ["en-US", "zh-TW"])
def test_the_tier_sentence_names_the_model_and_the_chat_page_leads_to_it(browser, ui_server, locale, machine):
    tab = Page(browser, ui_server.base, locale)
    try:
        as_machine(tab, RTX_4090 if machine == "gpu" else MAC)
        words, sentence = WORDS[locale], SENTENCES[(locale, machine)]

        # The Models page: the sentence on top of the catalog, the recommended card first and marked.
        page = tab.open("#/models")
        expect(page.locator(".tier-line")).to_have_text(sentence)
        first = page.locator(".catalog-card").first
        expect(first).to_have_attribute("data-model", FLAGSHIP)
        expect(first.locator(".catalog-recommended")).to_have_text(words["badge"])
        expect(first.locator(".catalog-fit")).to_have_text(words["fits"] if machine == "gpu" else words["fits_mac"])
        expect(page.locator(".catalog-recommended")).to_have_count(1)
        if locale == "en-US":
            expect(first.get_by_role("button", name="Download 16.5 GB")).to_be_enabled()
            expect(first).to_contain_text("from unsloth/Qwen3.8-27B-GGUF")
            expect(first).to_contain_text("the draft from z-lab/Qwen3.8-27B-DFlash2-GGUF")
        else:  # the catalog's own zh-TW summary, not the English one
            zh_summary = "24 GB 顯示卡（RTX 4090）或 32 GB Mac 上能力最強的模型。"
            expect(first.locator(".catalog-summary")).to_have_text(zh_summary)
        tab.shot(f"models-tier-{machine}-{locale}")

        # The chat page: the same sentence once, and a button to the card (which downloads nothing).
        page = tab.open("#/chat")
        notice = page.locator(".tier-notice")
        expect(notice.locator(".tier-sentence")).to_have_text(sentence)
        tab.shot(f"chat-tier-notice-{machine}-{locale}")
        pulls = []
        page.on("request", lambda r: "/v1/store/pull" in r.url and pulls.append(r.url))
        notice.get_by_role("button", name=words["open"]).click()
        expect(page).to_have_url(re.compile(rf"#/models/{re.escape(FLAGSHIP)}$"))
        card = page.locator(f'.catalog-card[data-model="{FLAGSHIP}"]')
        expect(card).to_be_focused()
        expect(card).to_have_class(re.compile(r"\bspotlight\b"))
        assert not pulls, "opening the card must not start a download"

        # Dismissed, it stays away, after a reload too.
        page = tab.open("#/chat")
        notice = page.locator(".tier-notice")
        notice.get_by_role("button", name=words["dismiss"]).click()
        expect(notice).to_have_count(0)
        expect(page.locator("#chat-input")).to_be_focused()
        with page.expect_response("**/v1/store/models"):
            page.reload()
        page.wait_for_timeout(300)  # the notice would be built right after that answer
        expect(page.locator(".tier-notice")).to_have_count(0)
    finally:
        tab.close()
    assert not tab.blocked and not [e for e in tab.errors if "Failed to load resource" not in e], tab.errors


def test_once_the_recommended_model_is_installed_the_chat_page_says_nothing(tab):
    as_machine(tab, RTX_4090, installed=True)
    page = tab.open("#/models")
    expect(page.locator(".tier-line")).to_have_text(
        "Your NVIDIA GeForce RTX 4090 (24 GB) can run Qwen3.8-27B (UD-Q4_K_S) with its DFlash 2 draft, "
        "and it is installed.")
    with page.expect_response("**/v1/store/models"):
        page = tab.open("#/chat")
    page.wait_for_timeout(300)
    expect(page.locator(".tier-notice")).to_have_count(0)


def test_a_cpu_only_computer_gets_no_recommendation(tab):
    """The real server on this machine (no graphics card): SmolLM2 stays, the `cpu` entries are named,
    nothing is marked recommended, the big models say they need a graphics card, the chat page says nothing."""
    page = tab.open("#/models")
    line = page.locator(".tier-line")
    expect(line).to_contain_text("flashdesk found no graphics card it can use on this computer, so "
                                 "SmolLM2-135M-Instruct (Q4_1) stays the standard model.")
    expect(line).not_to_have_class(re.compile(r"\btier-recommend\b"))
    expect(page.locator(".catalog-recommended")).to_have_count(0)
    big = page.locator(f'.catalog-card[data-model="{FLAGSHIP}"]')
    expect(big.locator(".catalog-fit")).to_have_text("Needs a graphics card")
    expect(big).to_have_class(re.compile(r"\bunfit\b"))
    expect(big.get_by_role("button", name="Download 16.5 GB")).to_be_enabled()  # secondary, still the user's choice
    # Those that do not fit come after those that do.
    order = page.locator(".catalog-card").evaluate_all("cards => cards.map(c => c.classList.contains('unfit'))")
    assert order == sorted(order), order
    tab.shot("models-tier-cpu-en")

    with page.expect_response("**/v1/store/models"):
        page = tab.open("#/chat")
    page.wait_for_timeout(300)
    expect(page.locator(".tier-notice")).to_have_count(0)
