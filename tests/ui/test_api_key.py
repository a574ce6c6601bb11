"""A server started with --api-key: the page itself loads, asks for the key once, then works."""

from __future__ import annotations

import httpx
import pytest

from conftest import serving
from tests.ui.browser import Page

KEY = "shop-floor-secret-123"


@pytest.fixture(scope="module")
def keyed_server(ui_home):
    with serving(ui_home, "--api-key", KEY, "--parallel", "1") as srv:
        yield srv


def test_the_page_asks_for_the_key_and_then_uses_it(browser, keyed_server):
    assert httpx.get(f"{keyed_server.base}/v1/conversations").status_code == 401  # the API is closed
    assert httpx.get(f"{keyed_server.base}/").status_code == 200  # the page that asks for the key is not
    tab = Page(browser, keyed_server.base, "en-US")
    try:
        page = tab.open("#/chat")
        dialog = page.locator("#key-dialog")
        dialog.wait_for(state="visible")
        page.fill("#key-input", "wrong")
        dialog.get_by_role("button", name="Save").click()
        dialog.wait_for(state="visible")  # a wrong key is asked for again
        page.fill("#key-input", KEY)
        dialog.get_by_role("button", name="Save").click()
        page.wait_for_selector(".conv-list .empty")  # the list loaded with the key
        dialog.wait_for(state="hidden")  # and the dialog closes (it may close a moment after: a busy CI)
        page.reload()  # kept in this browser
        page.wait_for_selector(".conv-list .empty")
        dialog.wait_for(state="hidden", timeout=5_000)
    finally:
        tab.close()
    assert not tab.blocked
    assert not [e for e in tab.errors if "Failed to load resource" not in e]  # 401s log that line; nothing else
