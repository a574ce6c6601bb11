"""The chat page in a real browser against `flashdesk serve --backend` with a vLLM stand-in behind it
(tests/vllm_standin.py: its /v1/models and Prometheus /metrics, what llama-cpp-python's server lacks). The
settings panel shows the backend's own speculation figures, labelled as its count over all its users, in
each language, and offers no speed-up choice the backend would refuse. No answer is asked for: the stand-in
writes none (tests/ui/test_chat_backend.py chats through a real server)."""

from __future__ import annotations

import pytest

from browser import Page
from conftest import serving
from vllm_standin import VllmStandin, prometheus


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    standin = VllmStandin(prometheus(drafts=300, draft_tokens=1500, accepted=930))  # 62%, 1 + 930/300 = 4.1
    try:
        with serving(tmp_path_factory.mktemp("ui-vllm"), "--backend", standin.base) as srv:
            yield srv, standin
    finally:
        standin.stop()


def figures(browser, base: str, locale: str) -> tuple[str, int]:
    """The settings panel's speed-up figures and how many speed-up pickers it has, in `locale`."""
    tab = Page(browser, base, locale)
    try:
        page = tab.open("#/chat")
        page.wait_for_selector("#server-status[data-state=ready]")
        page.click("button[aria-controls=chat-settings]")
        text = page.text_content("#backend-speedup")
        pickers = page.locator("#set-spec").count()
    finally:
        tab.close()
    assert not tab.blocked, f"the page tried to reach beyond this machine: {tab.blocked}"
    bugs = [e for e in tab.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"
    return text, pickers


def test_the_settings_show_the_backends_own_figures(browser, remote):
    srv, _ = remote
    text, pickers = figures(browser, srv.base, "en-US")
    assert text == ("Speed-up on the backend server (its own count, over all its users): 62% of drafted "
                    "tokens accepted, 4.1 tokens per check.")
    assert pickers == 0  # the backend speculates by its own configuration and refuses a mode per request
    text, _ = figures(browser, srv.base, "zh-TW")
    assert "後端伺服器" in text and "涵蓋所有使用者" in text and "62%" in text and "4.1" in text


def test_a_backend_that_publishes_no_figures_is_said_so_not_zeros(browser, remote):
    srv, standin = remote
    before, standin.metrics = standin.metrics, None  # its GET /metrics is now a 404
    try:
        text, _ = figures(browser, srv.base, "en-US")
    finally:
        standin.metrics = before
    assert text == "The backend server publishes no speed-up figures."
