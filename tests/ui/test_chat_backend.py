"""The chat page in a real browser against `flashdesk serve --backend`: llama-cpp-python's own
server behind it (tests/backend_server.py). The page streams and saves the backend's answer
as it does the local engine's, with no JavaScript error, and shows a backend that went away. It says
where answers are written (the backend server at its host:port, not this computer) and shows the
backend's model, fixed, in place of the local model store's picker. Of the backend's speed-up it
claims nothing per answer, and says that this backend publishes no figures
(tests/ui/test_chat_backend_stats.py shows a vLLM's)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from backend_server import ALIAS, Backend
from browser import Page
from conftest import serving
from test_chat import conversation_id, send, set_answer_settings, wait_answer_saved

QUESTION = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def remote(model_path, tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-backend")
    backend = Backend(model_path, home / "backend.log")
    backend.start()
    try:
        with serving(home, "--backend", backend.base, "--backend-model", ALIAS) as srv:
            yield srv, backend
    finally:
        if backend.proc.poll() is None:
            backend.kill()


def test_the_zh_tw_welcome_names_the_backend_server(browser, remote):
    srv, backend = remote
    tab = Page(browser, srv.base, "zh-TW")
    try:
        page = tab.open("#/chat")
        page.wait_for_selector("#server-status[data-state=ready]")
        expect(page.locator(".welcome-text")).to_contain_text(f"127.0.0.1:{backend.port}")
        text = page.text_content(".welcome-text")
        page.click("button[aria-controls=chat-settings]")
        fixed = page.text_content("#set-model-fixed")
    finally:
        tab.close()
    assert not tab.blocked and not [e for e in tab.errors if "Failed to load resource" not in e]
    assert f"（127.0.0.1:{backend.port}）" in text and "不是在這台電腦上" in text
    assert "這台電腦上產生" not in text  # not the local wording
    assert fixed == "模型由後端伺服器選定，無法在這裡切換。"


def test_the_chat_page_answers_through_the_backend(browser, remote):
    srv, backend = remote
    tab = Page(browser, srv.base, "en-US")
    try:
        page = tab.open("#/chat")
        page.wait_for_selector("#server-status[data-state=ready]")
        expect(page.locator(".welcome-text")).to_have_text(
            "Ask a question, or paste a text to summarise or rewrite. Answers are written by your shop's server at "
            f"127.0.0.1:{backend.port}, not on this computer: your messages are sent to that server, and nowhere "
            "else.")
        page.click("button[aria-controls=chat-settings]")  # the backend's model, fixed, and why
        picker = page.locator("#set-model")
        assert picker.is_disabled() and picker.input_value() == ALIAS
        assert [o.text_content() for o in picker.locator("option").all()] == [ALIAS]
        assert page.text_content("#set-model-fixed") == "Chosen on the backend server; it cannot be switched here."
        assert picker.get_attribute("title") == page.text_content("#set-model-fixed")
        page.click("button[aria-controls=chat-settings]")
        set_answer_settings(page, 24)
        send(page, QUESTION)
        wait_answer_saved(page)
        conv = httpx.get(f"{srv.base}/v1/conversations/{conversation_id(page)}").json()
        want = httpx.post(f"{backend.base}/v1/chat/completions", timeout=120, json={
            "model": ALIAS, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
            "max_tokens": 24}).json()["choices"][0]["message"]["content"]
        assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
        assert conv["messages"][1]["content"] == want
        assert "speed-up" not in page.text_content(".msg.assistant .stats")  # unknown per answer: not "none"
        page.click("button[aria-controls=chat-settings]")
        assert page.text_content("#backend-speedup") == "The backend server publishes no speed-up figures."

        backend.kill()  # the page says so instead of offering to send
        page.wait_for_selector("#server-status:not([data-state=ready])", timeout=60_000)
    finally:
        tab.close()
    assert not tab.blocked, f"the page tried to reach beyond this machine: {tab.blocked}"
    bugs = [e for e in tab.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"

