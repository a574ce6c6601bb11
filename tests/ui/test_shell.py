"""The shell around the pages: status, navigation, keyboard, labels, and tablet widths."""

from __future__ import annotations

import pytest

PAGES = ("chat", "workorders", "models")

# Every control must have a name a screen reader can say: a <label>, aria-label(ledby),
# its own text (buttons, links) or a title.
UNNAMED_CONTROLS = """() => [...document.querySelectorAll('button, input, select, textarea, a[href], [role=button]')]
    .filter(el => el.offsetParent !== null && el.type !== 'hidden')
    .filter(el => !((el.labels && el.labels.length) || el.getAttribute('aria-label')
                    || el.getAttribute('aria-labelledby') || el.title
                    || (['BUTTON', 'A'].includes(el.tagName) && el.textContent.trim())))
    .map(el => el.outerHTML.slice(0, 120))"""


def test_status_navigation_and_labels(tab):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    assert "smollm2" in page.inner_text("#server-status")
    for name in PAGES:
        page.click(f".tabs a[data-view={name}]")
        page.wait_for_selector(f".tabs a[data-view={name}][aria-current=page]")
        page.wait_for_load_state("networkidle")
        assert page.evaluate(UNNAMED_CONTROLS) == [], name
        assert page.title().endswith("flashdesk")


def test_keyboard_alone_reaches_the_chat_box(tab):
    page = tab.open("#/chat")
    page.wait_for_selector("#chat-input")
    page.wait_for_function("document.activeElement.id === 'chat-input'")  # ready to type at once
    first = page.evaluate("[...document.querySelectorAll('a[href], button, input, select, textarea')]"
                          ".find(el => el.tabIndex >= 0).className")
    assert first == "skip-link"  # the first Tab stop of the page
    page.focus(".skip-link")
    assert page.locator(".skip-link").bounding_box()["x"] >= 0  # shown while focused
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "view"
    for _ in range(30):  # then on through the page, in order, until the message box
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "chat-input":
            break
    else:
        pytest.fail("Tab never reached the message box")
    page.keyboard.type("hello")
    assert page.input_value("#chat-input") == "hello"


@pytest.mark.parametrize("width,height", [(820, 1180), (1180, 820)])  # a 10-inch tablet, both ways round
def test_tablet_widths_do_not_scroll_sideways(tab, width, height):
    page = tab.open("#/chat")
    page.set_viewport_size({"width": width, "height": height})
    page.wait_for_selector("#server-status[data-state=ready]")
    for name in PAGES:
        page.click(f".tabs a[data-view={name}]")
        page.wait_for_load_state("networkidle")
        overflow = page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} is {overflow}px wider than a {width}px screen"
        tab.shot(f"tablet-{width}-{name}")
