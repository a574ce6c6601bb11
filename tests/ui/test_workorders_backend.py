"""The Work orders page against `flashdesk serve --backend` (llama-cpp-python's own server behind it,
the fixture of tests/ui/test_chat_backend.py): one parse through the backend, and the result says
briefly what the backend could not do (the answer's `unavailable`), each feature in the reader's
language with the server's reason beside it, in English and again in zh-TW (the language switch
rebuilds the page from the same result, no second parse)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from browser import Page
from test_chat_backend import remote  # noqa: F401  (the fixture: a backend and flashdesk driving it)
from test_workorders_page import MESSAGE, SENT

PARSE_MS = 300_000  # ~15-60 s on one llama.cpp thread; more while another job shares the CPU
LABELS = {  # workorders.unavailable.<feature>, per language
    "en": {"close_within_max_tokens": "Ending an answer that runs too long neatly within the length limit",
           "field_confidence": "Marking the values the model is unsure of"},
    "zh-TW": {"close_within_max_tokens": "答案太長時，在長度上限內好好收尾",
              "field_confidence": "標出模型不太確定的值"},
}


@pytest.mark.timeout(600)
def test_a_parse_through_the_backend_says_what_it_could_not_do(browser, remote):  # noqa: F811
    srv, _ = remote
    tab = Page(browser, srv.base, "en-US")
    try:
        page = tab.open("#/workorders")
        page.wait_for_selector("#wo-template option[value=work_order]", state="attached")
        page.select_option("#wo-template", "work_order")
        page.fill("#wo-sent", SENT)
        page.get_by_label("Message", exact=True).fill(MESSAGE)
        with page.expect_response("**/v1/workorders/parse", timeout=PARSE_MS) as answer:
            page.get_by_role("button", name="Read the order").click()
        assert answer.value.ok, answer.value.text()
        unavailable = answer.value.json()["unavailable"]
        assert "close_within_max_tokens" in unavailable  # through a backend, always

        for lang, title in (("en", "Not available through the backend server:"), ("zh-TW", "透過後端伺服器無法使用：")):
            if lang != "en":
                page.select_option("#language", lang)
            note = page.locator(".wo-result:not([hidden]) .wo-unavailable")
            expect(note.locator("p")).to_have_text(title)
            items = note.locator("li")
            expect(items).to_have_count(len(unavailable))
            for i, (feature, why) in enumerate(unavailable.items()):
                expect(items.nth(i)).to_have_attribute("data-feature", feature)
                expect(items.nth(i)).to_have_text(f"{LABELS[lang][feature]} ({why})")
        tab.shot("workorders-backend-zh-TW")

        # the audit trail keeps it: a fresh page opens the stored parse from the history with the same note
        record_id = answer.value.json()["id"]
        page = tab.open("#/workorders")
        page.locator(f".wo-history-table tr[data-id='{record_id}'] button").click()
        items = page.locator(".wo-result:not([hidden]) .wo-unavailable li")
        expect(items).to_have_count(len(unavailable))
        expect(items.first).to_have_attribute("data-feature", next(iter(unavailable)))
    finally:
        tab.close()
    assert not tab.blocked, f"the page tried to reach beyond this machine: {tab.blocked}"
    bugs = [e for e in tab.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"
