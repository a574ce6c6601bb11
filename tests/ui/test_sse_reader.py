"""The page's event-stream reader (ui/api.js `stream`) in the real browser, fed chunks cut where a
network may cut them. sse-starlette ends lines with "\\r\\n": a chunk that ends between the "\\r" and
the "\\n" must not read as the blank line that ends an event (the event's name would be lost)."""

from __future__ import annotations

READ = """async (chunks) => {
  const { stream } = await import("/api.js");
  const realFetch = window.fetch;
  const body = new ReadableStream({ start(c) {
    for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
    c.close();
  } });
  window.fetch = async () => new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  const got = [];
  try {
    await stream("/v1/chat/completions", {}, { onEvent: (name, data) => got.push([name, data]) });
  } finally {
    window.fetch = realFetch;
  }
  return got;
}"""

WHOLE = 'event: note\r\ndata: {"x": 1}\r\n\r\ndata: {"x": 2}\r\n\r\ndata: [DONE]\r\n\r\n'
EXPECTED = [["note", {"x": 1}], ["message", {"x": 2}], ["message", "[DONE]"]]


def test_events_read_the_same_however_the_stream_is_cut(tab):
    page = tab.open("#/chat")
    page.wait_for_selector("#server-status[data-state=ready]")
    assert page.evaluate(READ, [WHOLE]) == EXPECTED
    for cut in [i for i, ch in enumerate(WHOLE) if ch == "\r"]:  # between every "\r" and its "\n"
        assert page.evaluate(READ, [WHOLE[:cut + 1], WHOLE[cut + 1:]]) == EXPECTED, cut
    assert page.evaluate(READ, list(WHOLE)) == EXPECTED  # one character at a time
