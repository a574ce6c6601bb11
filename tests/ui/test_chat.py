"""The chat page in a real browser against the real model: streaming, saving, reload,
stop, regenerate, settings, the conversation list, and safe rendering."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from playwright.sync_api import expect


SHORT = 40


def set_answer_settings(page, max_tokens: int, temperature: float = 0.0) -> None:
    """Through the settings panel, as a user would."""
    page.get_by_role("button", name="Settings").click()
    page.fill("#set-max", str(max_tokens))
    page.press("#set-max", "Tab")  # `change` fires when the field loses focus
    page.eval_on_selector("#set-temp", "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }",
                          str(temperature))
    page.get_by_role("button", name="Settings").click()


def send(page, text: str) -> None:
    page.fill("#chat-input", text)
    page.press("#chat-input", "Enter")


def wait_answer_saved(page, n_answers: int = 1, timeout: float = 120_000):
    page.wait_for_function(
        "n => document.querySelectorAll('.msg.assistant:not(.writing)').length >= n"
        " && !document.querySelector('.writing')",
        arg=n_answers, timeout=timeout)


def conversation_id(page) -> str:
    m = re.search(r"#/chat/([^/?#]+)", page.url)
    assert m, f"no conversation in the URL {page.url}"
    return m.group(1)


def test_streamed_answer_is_saved_and_restored_after_reload(tab, ui_server):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    set_answer_settings(page, SHORT)
    send(page, "Name three colours of the rainbow.")
    page.wait_for_selector(".msg.assistant.writing", timeout=30_000)  # the answer streams in place
    wait_answer_saved(page)
    cid = conversation_id(page)

    conv = httpx.get(f"{ui_server.base}/v1/conversations/{cid}").json()
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
    saved = conv["messages"][1]
    assert saved["content"].strip()
    meta = saved["meta"]
    assert meta["usage"]["completion_tokens"] <= SHORT and meta["usage"]["timings"]["decode_tokens_per_s"] > 0
    assert conv["settings"]["max_tokens"] == SHORT and conv["settings"]["temperature"] == 0
    # Greedy: what the page streamed and saved is what the API answers for the same messages.
    direct = httpx.post(f"{ui_server.base}/v1/chat/completions", timeout=120, json={
        "model": "smollm2", "messages": [{"role": "user", "content": "Name three colours of the rainbow."}],
        "temperature": 0, "max_tokens": SHORT}).json()
    assert saved["content"] == direct["choices"][0]["message"]["content"]
    stats = page.inner_text(".msg.assistant .stats")
    assert "tokens/s" in stats
    tab.shot("chat-en")

    page.reload()
    page.wait_for_selector(".msg.assistant")
    assert page.inner_text(".msg.user .bubble-body") == "Name three colours of the rainbow."
    first_words = saved["content"].split()[0].strip("*#-:,.")
    assert first_words in page.inner_text(".msg.assistant .bubble-body")
    assert page.inner_text(".chat-title").startswith("Name three colours")
    page.get_by_role("button", name="Settings").click()
    assert page.input_value("#set-max") == str(SHORT)  # the conversation's settings came back too

    page.get_by_role("button", name="Details").click()  # the per-answer popover
    details = page.locator(".answer-details:popover-open")
    details.wait_for()
    assert "Speed-up" in details.inner_text() and "Tokens written" in details.inner_text()
    tab.shot("chat-details")


def test_stop_ends_the_answer_and_keeps_what_was_written(tab, ui_server):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    set_answer_settings(page, 1500, temperature=0.8)
    send(page, "Write a very long story about a print shop, with many chapters.")
    page.wait_for_function("() => (document.querySelector('.writing .bubble-body')?.textContent || '').length > 40",
                           timeout=60_000)
    page.get_by_role("button", name="Stop").click()
    wait_answer_saved(page, timeout=15_000)
    assert "stopped" in page.inner_text(".msg.assistant .stats")
    assert page.get_by_role("button", name="Send").is_visible()

    saved = httpx.get(f"{ui_server.base}/v1/conversations/{conversation_id(page)}").json()["messages"][-1]
    assert saved["role"] == "assistant" and saved["meta"]["stopped"] is True and saved["content"]
    # The server stopped generating too, not only the page: it sees the closed connection
    # at its next write and drops the request within a step (far sooner than 1500 tokens).
    deadline = time.time() + 10
    while httpx.get(f"{ui_server.base}/health").json()["engine"]["active"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.get(f"{ui_server.base}/health").json()["engine"]["active"] == 0


def test_regenerate_rename_search_and_delete(tab, ui_server):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    set_answer_settings(page, 24)
    send(page, "Say hello to the workshop team.")
    wait_answer_saved(page)
    cid = conversation_id(page)
    first = httpx.get(f"{ui_server.base}/v1/conversations/{cid}").json()["messages"][1]["content"]

    old_id = page.get_attribute(".msg.assistant", "data-id")
    page.get_by_role("button", name="Regenerate").click()
    page.wait_for_function("old => { const a = document.querySelector('.msg.assistant:not(.writing)');"
                           " return a && a.dataset.id !== old && !document.querySelector('.writing'); }",
                           arg=old_id, timeout=120_000)
    msgs = httpx.get(f"{ui_server.base}/v1/conversations/{cid}").json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[1]["content"] == first  # temperature 0: the same answer again

    item = page.locator(".conv-list li.current")
    item.hover()
    item.get_by_role("button", name=re.compile("^Rename")).click()
    page.fill(".conv-list li input", "Workshop greeting")
    page.press(".conv-list li input", "Enter")
    page.wait_for_selector(".conv-list .conv-title:text('Workshop greeting')")
    assert httpx.get(f"{ui_server.base}/v1/conversations/{cid}").json()["title"] == "Workshop greeting"

    page.fill("input[type=search]", "no such words anywhere")
    page.wait_for_selector(".conv-list .empty")
    page.fill("input[type=search]", "workshop")
    page.wait_for_selector(".conv-list .conv-title:text('Workshop greeting')")

    item = page.locator(".conv-list li", has_text="Workshop greeting")
    item.hover()
    item.get_by_role("button", name=re.compile("^Delete")).click()
    page.locator("dialog.confirm").get_by_role("button", name="Delete").click()
    page.wait_for_function("() => !document.body.textContent.includes('Workshop greeting')")
    assert httpx.get(f"{ui_server.base}/v1/conversations/{cid}").status_code == 404


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    "<img src=x onerror=\"window.__pwned = 1\">",
    "[click](javascript:window.__pwned=1)",
    "[click](JaVaScRiPt:window.__pwned=1)",
    "![logo](http://203.0.113.9/logo.png)",
    "```html\n<script>window.__pwned = 1</script>\n```",
    "<a href=\"javascript:1\">x</a> **bold** <iframe src=\"http://203.0.113.9/\"></iframe>",
]


def test_markdown_from_the_model_cannot_inject(tab):
    page = tab.open("#/chat")
    page.wait_for_selector(".chat-layout")
    result = page.evaluate("""async (inputs) => {
        const { renderMarkdown } = await import('/chat/markdown/render.js');
        const box = document.createElement('div');
        document.body.append(box);
        const out = [];
        for (const text of inputs) {
            box.replaceChildren(renderMarkdown(text));
            out.push({
                tags: [...box.querySelectorAll('*')].map(e => e.tagName.toLowerCase()),
                hrefs: [...box.querySelectorAll('[href]')].map(e => e.getAttribute('href')),
                on: [...box.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))
                    .filter(n => n.startsWith('on')),
                text: box.textContent,
            });
        }
        box.remove();
        await new Promise(r => setTimeout(r, 300));
        return { out, pwned: window.__pwned || 0 };
    }""", HOSTILE)
    assert result["pwned"] == 0
    for text, r in zip(HOSTILE, result["out"]):
        assert not set(r["tags"]) & {"script", "img", "iframe", "object", "embed", "style", "link"}, (text, r)
        assert not r["on"], (text, r)
        assert all(h.startswith(("http:", "https:", "mailto:")) for h in r["hrefs"]), (text, r)
    assert "<script>" in result["out"][0]["text"]  # shown as text, not dropped
    assert result["out"][5]["tags"].count("code") == 1  # a code block shows the HTML as code


def test_markdown_code_blocks_have_copy_buttons(tab):
    page = tab.open("#/chat")
    page.wait_for_selector(".chat-layout")
    tags = page.evaluate("""async () => {
        const { renderMarkdown } = await import('/chat/markdown/render.js');
        const box = document.createElement('div');
        box.className = 'md';
        box.append(renderMarkdown('# Title\\n\\nSome **bold** and `code`.\\n\\n```python\\nprint(1)\\n```\\n\\n'
                                  + '- a\\n- b\\n\\n| x | y |\\n|---|---|\\n| 1 | 2 |'));
        document.body.append(box);
        return {
            copy: box.querySelectorAll('button').length,
            code: box.querySelector('pre code')?.textContent,
            li: box.querySelectorAll('li').length,
            td: box.querySelectorAll('td').length,
            strong: box.querySelector('strong')?.textContent,
        };
    }""")
    assert tags == {"copy": 1, "code": "print(1)", "li": 2, "td": 2, "strong": "bold"} or (
        tags["copy"] == 1 and tags["code"].strip() == "print(1)" and tags["li"] == 2 and tags["td"] == 2)


@pytest.mark.locale("zh-TW")
def test_chinese_browser_gets_chinese_and_the_switch_goes_both_ways(tab):
    page = tab.open("#/chat")
    page.wait_for_selector(".chat-layout")
    assert page.get_attribute("html", "lang") == "zh-TW"
    assert page.inner_text(".tabs a[data-view=chat]") == "對話"
    assert page.get_by_role("button", name="新對話").is_visible()
    tab.shot("chat-zh-TW")

    page.select_option("#language", "en")
    page.wait_for_selector(".tabs a[data-view=chat]:text('Chat')")
    assert page.get_by_role("button", name="New chat").is_visible()
    page.reload()  # the choice is remembered over the browser's language
    page.wait_for_selector(".tabs a[data-view=workorders]:text('Work orders')")
    page.select_option("#language", "zh-TW")
    page.wait_for_selector(".tabs a[data-view=models]:text('模型')")


def test_the_page_talks_to_this_server_only(tab, ui_server):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    for name in ("workorders", "models", "chat"):
        page.click(f".tabs a[data-view={name}]")
        page.wait_for_load_state("networkidle")
    assert tab.requests and all(u.startswith(ui_server.base + "/") for u in tab.requests), tab.requests
    headers = httpx.get(f"{ui_server.base}/").headers
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "connect-src 'self'" in headers["content-security-policy"]


def test_the_local_page_says_answers_stay_here_and_offers_the_models(tab, ui_server):
    """The local wording and picker (tests/ui/test_chat_backend.py: what a backend changes)."""
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    expect(page.locator(".welcome-text")).to_have_text(
        "Ask a question, or paste a text to summarise or rewrite. Answers are written on this computer; "
        "nothing is sent outside.")
    page.get_by_role("button", name="Settings").click()
    picker = page.locator("#set-model")
    expect(picker.locator("option[value=smollm2]")).to_have_count(1)
    assert picker.is_enabled() and page.locator("#set-model-fixed").count() == 0
