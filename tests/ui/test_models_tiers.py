"""The hardware tier in the browser: the sentence that names the model this computer should run
(a graphics card, a Mac, a processor fast enough; English and Traditional Chinese), the recommended
card first, the chat page's first-run notice that leads to it and stays away once dismissed; on a
processor, each model's speed here in words, and the calm sentence of one too slow for more; once a
model has run here, what speculation did for its answers (never a promise before).

This machine has no graphics card, so the GPU and Mac cases answer GET /v1/store/models with
a copy of the real server's JSON whose `hardware` (and tier fields) are those of such a machine.
The processor cases do the same with given speeds, so that what they show does not depend on how
fast the test machine is; the real server's own measurement is checked for its form.
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


CPU = {"kind": "cpu", "name": "", "memory_bytes": 16 << 30, "budget_bytes": int((16 << 30) * 0.6)}
MEASURED_AT = 1795176000  # 20 November 2026, noon UTC: when the processor speeds were measured
MEASURED_WORDS = {"en-US": "Speeds measured on this computer on", "zh-TW": "速度是在"}
CPU_SENTENCES = {
    ("en-US", "fast"): "flashdesk found no graphics card it can use on this computer, but its processor can run "
                       "Qwen3.5-4B (Q4_K_M) with its DFlash draft: about 6 words a second here, about 45 seconds "
                       "per work order. 3.8 GB download.",  # the draft's checkpoint comes with it (issue 53)
    ("zh-TW", "fast"): "flashdesk 在這台電腦上找不到可以使用的顯示卡，但處理器可以執行 Qwen3.5-4B (Q4_K_M) 及其 DFlash "
                       "輔助模型：在這台電腦上每秒大約 8 個字，每張工單大約 45 秒。下載大小為 3.8 GB。",
    ("en-US", "slow"): "flashdesk found no graphics card it can use on this computer, so SmolLM2-135M-Instruct (Q4_1) "
                       "stays the standard model. Bigger models would be slow on this processor: Qwen3.5-2B (Q4_K_M), "
                       "the quickest, would give about 2.3 words a second here, about 2.6 minutes per work order.",
    ("zh-TW", "slow"): "flashdesk 在這台電腦上找不到可以使用的顯示卡，所以標準模型仍是 SmolLM2-135M-Instruct (Q4_1)。"
                       "更大的模型在這個處理器上會太慢：其中最快的 Qwen3.5-2B (Q4_K_M)，在這台電腦上每秒大約 3 個字，"
                       "每張工單大約 2.6 分鐘。",
}


def as_processor(tab, fast: bool) -> None:
    """Answer GET /v1/store/models as the real server would on a 16 GB computer without a graphics
    card whose processor gives the 4B 8 tokens a second (`fast`), or the 2B only 3 (so none is
    recommended)."""
    def answer(route):
        body = route.fetch().json()
        body["hardware"] = CPU | {"speed_measured_at": MEASURED_AT}
        for c in body["catalog"]:
            c["fits"] = bool(c["cpu"]) and c["memory_bytes"] <= CPU["budget_bytes"]
            c["recommended"] = fast and c["name"] == "qwen3.5-4b"
            tok_s = {"qwen3.5-4b": 8.0, "qwen3.5-2b": 12.0, "qwen3-4b": 8.5, "smollm2": 90.0}.get(c["name"], 1.0)
            tok_s = tok_s if fast else tok_s / 4
            secs = 46.8 if fast else 155.0
            c["speed"] = None if not c["cpu"] else {
                "tokens_per_s": tok_s, "work_order_s": secs if c["name"] != "smollm2" else 3.0, "usable": tok_s >= 5,
                "words_per_s": {"en": tok_s * 0.75, "zh-TW": tok_s}}
        route.fulfill(json=body)

    tab.page.route("**/v1/store/models", answer)


@pytest.mark.parametrize("locale", ["en-US", "zh-TW"])
def test_a_fast_processor_is_recommended_a_model_with_its_speed_in_words(browser, ui_server, locale):
    tab = Page(browser, ui_server.base, locale)
    try:
        as_processor(tab, fast=True)
        sentence = CPU_SENTENCES[(locale, "fast")]
        page = tab.open("#/models")
        expect(page.locator(".tier-line")).to_have_text(sentence)
        first = page.locator(".catalog-card").first
        expect(first).to_have_attribute("data-model", "qwen3.5-4b")
        expect(first.locator(".catalog-recommended")).to_have_text(WORDS[locale]["badge"])
        speed_words = "about 6 words a second here, about 45 seconds per work order" if locale == "en-US" else \
            "在這台電腦上每秒大約 8 個字，每張工單大約 45 秒"
        expect(first.locator(".facts")).to_contain_text(speed_words)
        measured = page.locator(".speed-measured-at")  # how old the figure is, in the reader's words
        expect(measured).to_contain_text(MEASURED_WORDS[locale])
        expect(measured).to_contain_text("2026")
        tab.shot(f"models-tier-cpu-fast-{locale}")
        page = tab.open("#/chat")  # the chat page leads to it, as on a graphics card
        expect(page.locator(".tier-notice .tier-sentence")).to_have_text(sentence)
    finally:
        tab.close()
    assert not tab.blocked and not [e for e in tab.errors if "Failed to load resource" not in e], tab.errors


@pytest.mark.parametrize("locale", ["en-US", "zh-TW"])
def test_a_slow_processor_keeps_smollm2_and_says_why(browser, ui_server, locale):
    tab = Page(browser, ui_server.base, locale)
    try:
        as_processor(tab, fast=False)
        page = tab.open("#/models")
        expect(page.locator(".tier-line")).to_have_text(CPU_SENTENCES[(locale, "slow")])
        expect(page.locator(".catalog-recommended")).to_have_count(0)
        with page.expect_response("**/v1/store/models"):
            page = tab.open("#/chat")
        page.wait_for_timeout(300)
        expect(page.locator(".tier-notice")).to_have_count(0)
    finally:
        tab.close()
    assert not tab.blocked and not [e for e in tab.errors if "Failed to load resource" not in e], tab.errors


def test_a_cpu_only_computer_is_measured_and_each_processor_model_says_its_speed(tab):
    """The real server on this machine (no graphics card): it measures this computer with SmolLM2,
    every `cpu` card says its speed here in words, the big models say they need a graphics card.
    Whether one is recommended depends on how fast this machine is, so only the form is checked."""
    page = tab.open("#/models")
    line = page.locator(".tier-line")
    expect(line).to_contain_text("flashdesk found no graphics card it can use on this computer")
    for name in ("qwen3.5-2b", "qwen3.5-4b", "qwen3-4b"):
        facts = page.locator(f'.catalog-card[data-model="{name}"] .facts')
        expect(facts).to_contain_text(re.compile(  # the first answer comes while the server still measures
            r"Speed hereabout [\d.]+ words a second here, about [\d.]+ (seconds|minutes) per work order"),
            timeout=60_000)
    big = page.locator(f'.catalog-card[data-model="{FLAGSHIP}"]')
    expect(big.locator(".catalog-fit")).to_have_text("Needs a graphics card")
    expect(big).to_have_class(re.compile(r"\bunfit\b"))
    expect(big.get_by_role("button", name="Download 16.5 GB")).to_be_enabled()  # secondary, still the user's choice
    # Those that do not fit come after those that do.
    order = page.locator(".catalog-card").evaluate_all("cards => cards.map(c => c.classList.contains('unfit'))")
    assert order == sorted(order), order
    tab.shot("models-tier-cpu-en")


def test_a_catalog_model_says_what_speculation_did_here_once_it_has_run(tab):
    """Issue 53, item 5: a catalog card promises nothing about speed before its model has run on this
    computer; after, it gives what was kept beside the model (stats.MeasuredSpeedup), dated, and says
    plainly where it did about nothing."""
    kept = {"value": None}

    def answer(route):
        body = route.fetch().json()
        for c in body["catalog"]:
            if c["name"] == "qwen3.5-4b":
                c["measured"] = kept["value"]
        route.fulfill(json=body)

    tab.page.route("**/v1/store/models", answer)
    entry = tab.open("#/models").locator('.catalog-card[data-model="qwen3.5-4b"]')
    expect(entry.locator(".facts")).to_contain_text("Speed-upwith a DFlash draft")
    expect(entry.locator(".catalog-measured")).to_have_count(0)
    kept["value"] = {"at": 1.8e9, "answers": 12, "speedup": 1.37, "draft": {"answers": 8, "speedup": 1.5}}
    tab.page.reload()
    measured = tab.page.locator('.catalog-card[data-model="qwen3.5-4b"] .catalog-measured')
    expect(measured).to_contain_text("Measured on this computer: its last 12 answers came about 1.4× faster (as of ")
    expect(measured).to_contain_text("2027")
    kept["value"] = {"at": 1.8e9, "answers": 40, "speedup": 0.98, "draft": None}
    tab.page.reload()
    expect(tab.page.locator('.catalog-card[data-model="qwen3.5-4b"] .catalog-measured')).to_contain_text(
        "Measured on this computer: about as fast as without it (1.0× over its last 40 answers, as of ")
