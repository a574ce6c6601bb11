"""The Work orders page marks a copy field (x-copy) at the exact span the model copied it from
(the answer's `sources`), not at a guess: focusing the field lights that one mark, a click or a key
on the mark goes back to the field, an edited value is guessed again, and the tooltip says it was
copied, in the reader's language.

One real parse for the module, through the API with a custom schema (the page reads only built-in
templates, and they may not mark copy fields yet); the page opens the stored record by its id. The
message starts with an emoji, so a span the page failed to turn from code points into UTF-16 would
be off by one. The customer's name is written twice: a guess marks both, the exact span one.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from playwright.sync_api import expect

from conftest import ROOT

MESSAGE = "Hi 👋 this is Sunrise Bakery. Please print 300 A5 flyers in blue.\nThanks, Sunrise Bakery"
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["customer_name", "color"],
          "properties": {"customer_name": {"type": ["string", "null"], "x-copy": True},
                         "color": {"type": ["string", "null"], "x-copy": True}}}
INSTRUCTIONS = "Copy the customer's business name and the colour of the flyers from the message."
PARSE_S = 780  # the model is slow on a shared CPU

# The marks before `m` in their <pre>, in JS string units (UTF-16): where the page put the mark.
MARK_START = """(m) => {
  const r = document.createRange();
  r.setStart(m.parentNode, 0);
  r.setEndBefore(m);
  return r.toString().length;
}"""


def words(lang: str) -> dict:
    return json.loads((ROOT / "ui" / "i18n" / f"{lang}.json").read_text("utf-8"))["workorders"]


@pytest.fixture(scope="module")
def parsed(ui_server) -> dict:
    r = httpx.post(f"{ui_server.base}/v1/workorders/parse", timeout=PARSE_S,
                   json={"text": MESSAGE, "schema": SCHEMA, "instructions": INSTRUCTIONS, "sent_date": "2026-03-02"})
    assert r.status_code == 200, r.text
    body = r.json()
    name = body["result"]["customer_name"]
    assert name and "customer_name" in body["sources"], body  # the name is in the message: the model copies it
    assert [MESSAGE[a:b] for a, b in body["sources"]["customer_name"]] == [name], body["sources"]
    return body


def _open(tab, record_id: str):
    page = tab.open(f"#/workorders/{record_id}")
    page.wait_for_selector(".wo-result:not([hidden]) .wo-form", timeout=60_000)
    return page


@pytest.mark.timeout(900)
def test_a_copied_value_is_marked_at_its_exact_span_and_leads_back_to_its_field(tab, parsed):
    name = parsed["result"]["customer_name"]
    (start, end), = parsed["sources"]["customer_name"]
    page = _open(tab, parsed["id"])
    customer = page.locator(".wo-field[data-path='customer_name'] input")
    expect(customer).to_have_value(name)

    # focusing the field lights exactly one mark: the copied span, not every place the name is written
    customer.focus()
    active = page.locator(".wo-text mark.wo-mark-active")
    expect(active).to_have_count(1)
    mark = active.first
    expect(mark).to_have_text(name)
    expect(mark).to_have_class(re.compile(r"\bwo-mark-copied\b"))
    expect(mark).to_have_attribute("data-path", "customer_name")
    expect(mark).to_have_attribute("title", words("en")["mark_copied"].replace("{field}", "Customer"))
    utf16_start = len(MESSAGE[:start].encode("utf-16-le")) // 2
    assert utf16_start == start + 1  # the emoji before it: two UTF-16 units, one code point
    assert mark.evaluate(MARK_START) == utf16_start
    assert mark.evaluate("(m) => m.textContent.length") == len(MESSAGE[start:end].encode("utf-16-le")) // 2
    expect(page.locator(".wo-original p.hint:has(.wo-mark-copied)")).to_be_visible()  # its legend
    tab.shot("workorders-copied-marks")

    # a click on the mark goes to the field; so do Enter and Space, the mark being a button
    page.locator("#wo-result-title").focus()
    expect(active).to_have_count(1)  # nothing else lit it up
    mark.click()
    expect(customer).to_be_focused()
    for key in ("Enter", " "):
        page.locator("#wo-result-title").focus()
        mark.focus()
        expect(mark).to_have_attribute("role", "button")
        page.keyboard.press(key)
        expect(customer).to_be_focused()

    # the colour too, when the model copied one: its mark, at its span, leads to its own field
    color = parsed["result"]["color"]
    if color is not None:
        (c_start, _), = parsed["sources"]["color"]
        c_mark = page.locator(".wo-text mark.wo-mark-copied[data-path='color']")
        expect(c_mark).to_have_text(color)
        assert c_mark.evaluate(MARK_START) == len(MESSAGE[:c_start].encode("utf-16-le")) // 2
        c_mark.click()
        expect(page.locator(".wo-field[data-path='color'] input")).to_be_focused()

    # an edited value is no longer the copy: guessed again, at every place it is written (ignoring case)
    customer.fill(name.upper())
    marks = page.locator(".wo-text mark[data-path='customer_name']")
    expect(marks).to_have_count(MESSAGE.lower().count(name.lower()))
    expect(page.locator(".wo-text mark.wo-mark-copied[data-path='customer_name']")).to_have_count(0)
    customer.fill(name)  # back to what was copied: the exact span again
    expect(page.locator(".wo-text mark.wo-mark-copied[data-path='customer_name']")).to_have_count(1)
    expect(marks).to_have_count(1)


@pytest.mark.timeout(900)
@pytest.mark.locale("zh-TW")
def test_the_copied_tooltip_is_in_the_readers_language(tab, parsed):
    page = _open(tab, parsed["id"])
    zh = words("zh-TW")
    mark = page.locator(".wo-text mark.wo-mark-copied[data-path='customer_name']")
    expect(mark).to_have_attribute("title", zh["mark_copied"].replace("{field}", zh["fields"]["customer_name"]))
    expect(page.locator(".wo-original p.hint:has(.wo-mark-copied)")).to_contain_text(zh["legend_copied_hint"])


def test_code_point_spans_become_utf16_indices(tab):
    """The conversion alone, in the page's own module: emoji and a CJK ideograph beyond the BMP
    (two UTF-16 units each) before a span, and a plain CJK character (one unit) that shifts nothing;
    then a separator field's parts, and exact marks winning over guesses."""
    page = tab.open("#/workorders")
    page.wait_for_selector("#wo-template option", state="attached")
    got = page.evaluate("""async () => {
      const m = await import("./workorders/marks.js");
      const text = "👋🏽 訂單 𠀋 Ana, ANA";
      const at = m.utf16Offsets(text);
      const leaf = (path, value) => ({ path, kind: "text", read: () => value });
      const phone = "👋 call 0912 or 0933 today";
      const schema = { type: "object", properties: { contact: { type: "string", "x-copy": { separator: "; " } } } };
      // "Ana" is code points 8..11 (👋, 🏽 and 𠀋 are one code point each, two UTF-16 units)
      const hits = m.findValues(text, [leaf("customer_name", "Ana")], { customer_name: [[8, 11]] });
      const edited = m.findValues(text, [leaf("customer_name", "ana")], { customer_name: [[8, 11]] });
      return {
        at: [0, 1, 2, 3, 4, 6, 7, 8, 11, 16, 17].map(at),
        hits: hits.map(([a, b, path, copied]) => [text.slice(a, b), a, path, copied]),
        edited: edited.map(([a, b, , copied]) => [text.slice(a, b), a, copied]),
        plain: [0, 3, 4].map(m.utf16Offsets("abc")),
        // several copies joined by the schema's separator (or, the schema gone, by one same string); a
        // longer guess over a copy ("call 0912", another field) gives way to it, the one beside it stays
        joined: [schema, null].map((sch) => m.findValues(phone, [leaf("contact", "0912; 0933"),
          leaf("note", "call 0912"), leaf("when", "today")], { contact: [[7, 11], [15, 19]] }, sch)
          .map(([a, b, path, copied]) => [phone.slice(a, b), a, path, copied])),
      };
    }""")
    text = "👋🏽 訂單 𠀋 Ana, ANA"
    assert text[8:11] == "Ana"
    assert got["at"] == [0, 2, 4, 5, 6, 8, 10, 11, 14, 19, None]  # None: past the end
    assert got["hits"] == [["Ana", 11, "customer_name", True]]  # the exact span only, not "ANA"
    assert got["edited"] == [["Ana", 11, False], ["ANA", 16, False]]  # edited: guessed, both places
    assert got["plain"] == [0, 3, None]
    phone = "👋 call 0912 or 0933 today"
    assert [phone[7:11], phone[15:19]] == ["0912", "0933"]
    joined = [["0912", 8, "contact", True], ["0933", 16, "contact", True], ["today", 21, "when", False]]
    assert got["joined"] == [joined, joined]
