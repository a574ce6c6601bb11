"""Long and messy messages (issue 23): a reply's quoted history is stripped before the parse
(server/workorders/thread.py) and a message still too long for the context is parsed from
its start and needs review (extract.fit_request).

The emails in tests/data/emails are written for these tests: each has its order in the
newest part and other orders in the quoted history, so a parse that read the history would
show it. The stripping and the cut are tested without a model; three parses go through a
real server with SmolLM2."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from conftest import EVAL_DATA, ServerProcess, linked_home
from engine import ContextLengthExceeded
from engine.api import LOCAL
from server.workorders import extract, prompt
from server.workorders.templates import TemplateStore
from server.workorders.thread import strip_quoted

EMAILS = EVAL_DATA / "emails"
SENT = dt.date(2026, 12, 3)

# file -> (the first marker, text the newest part keeps, text of the history that must go)
CASES = {
    "en_gmail_reply.txt": ("reply_header", ["400 canvas tote", "0917-220-468", "Harbourside Books"],
                           ["250", "1,000 A6", "75 mugs", "wrote:"]),
    "en_outlook_reply.txt": ("header_block", ["1,200 round vinyl stickers", "Tel: 020 7946 0321"],
                             ["800", "300 hang tags", "From:", "_____"]),
    "en_original_message.txt": ("original_message", ["6 vinyl banners", "07700 900127"],
                                ["20 pull-up", "40 A2", "Original Message"]),
    "en_forward.txt": ("reply_header", ["set this one up", "Forwarded message", "From: Kenji Watanabe",
                                        "350 laminated A4 menus", "0412 555 019"], ["120 menus", "60 table"]),
    "en_inline_reply.txt": ("reply_header", ["This year 650 programmes", "17 December", "0161 496 0732",
                                             "Lyric Theatre Company"], ["900", "How many", "wrote:"]),
    "en_long_seating_plan.txt": ("reply_header", ["120 wedding invitations", "Table 140", "Rosewood Weddings"],
                                 ["60 invitations", "300 raffle"]),
    "zh_tw_gmail_reply.txt": ("reply_header", ["500 份菜單", "0922-123-456", "好味道餐館"],
                              ["200 份", "1,000 張名片", "寫道"]),
    "zh_tw_outlook_reply.txt": ("header_block", ["活動海報 80 張", "易拉展 3 座", "03-571-2345"],
                                ["150 張", "40 件", "寄件者", "原始郵件"]),
    "zh_tw_forward.txt": ("reply_header", ["轉寄的郵件", "寄件者： 黃淑芬", "2,000 張圓形禮盒貼紙", "04-2233-4455"],
                          ["600 张", "写道"]),
    "zh_mixed_simplified_reply.txt": ("original_message", ["250 本笔记本", "021-6464-8888"],
                                      ["100 本", "30 个帆布袋", "发件人", "發件人"]),
}


def email(name: str) -> str:
    return (EMAILS / name).read_text("utf-8")


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_email_keeps_its_newest_order_and_drops_the_history(name):
    marker, keeps, drops = CASES[name]
    text = email(name)
    s = strip_quoted(text)
    assert s.marker == marker, s.note()
    for part in keeps:
        assert part in s.text, (part, s.text)
    for part in drops:
        assert part not in s.text, (part, s.text)
    note = s.note()
    assert note["chars"] > 0 and note["lines"] > 0 and 1 <= note["line"] <= len(text.splitlines())
    assert note["marker_text"] == text.splitlines()[note["line"] - 1].strip()
    assert set(note["markers"]) <= {"quote_prefix", "reply_header", "original_message", "header_block"}


def test_every_email_is_listed():
    assert sorted(p.name for p in EMAILS.glob("*.txt")) == sorted(CASES)


@pytest.mark.parametrize("header", [
    "On Tue, Dec 1, 2026 at 10:15 AM Wang Xiaoming <\nxm@example.com> wrote:",  # Gmail, wrapped
    "On Tuesday, December 1, 2026 10:15 AM,\nWang Xiaoming\n<xm@example.com> wrote:",  # three lines
    "On 1 Dec 2026, at 10:15, Wang Xiaoming <xm@example.com> wrote:",  # Apple Mail
    "On 12/1/26, 10:15 AM, \"Wang Xiaoming\" <xm@example.com> wrote:",  # Outlook for Mac
    "於 2026年12月1日 週二 上午10:15，王小明 <x@y.example> 寫道：",
    "王小明 <x@y.example> 於 2026年12月1日 週二\n上午10:15寫道：",  # Gmail zh-TW, wrapped
    "在 2026年12月1日 周二 上午10:15，王小明 <x@y.example> 写道：",
])
def test_reply_headers_end_the_newest_part(header):
    text = f"Please make it 40 aprons.\n\nSam\n\n{header}\nEarlier we said 90 aprons.\n"
    s = strip_quoted(text)
    assert s.text == "Please make it 40 aprons.\n\nSam" and s.marker == "reply_header"
    assert s.marker_text == header.splitlines()[0].strip()


@pytest.mark.parametrize("block", [
    "From: Ann <a@x.example>\nSent: Monday, November 30, 2026 3:15 PM\nTo: Bo\nSubject: RE: aprons",
    "*From:* Ann <a@x.example>\n*Sent:* Monday, November 30, 2026 3:15 PM\n*To:* Bo\n*Subject:* aprons",
    "From: Ann\nDate: 30 Nov 2026\nCc: Di\nTo: Bo\nSubject: aprons",
    "寄件者: 王大同\n傳送時間: 2026年11月30日 下午 3:15\n收件者: 張雅婷\n主旨: 回覆: 圍裙",
    "發件人: 周敏\n發送時間: 2026年11月30日 15:15\n收件人: 李強\n主題: 圍裙",
    "发件人: 周敏\n发送时间: 2026年11月30日 15:15\n收件人: 李强\n主题: 围裙",
])
def test_header_blocks_end_the_newest_part(block):
    s = strip_quoted(f"Please make it 40 aprons.\n\n________________________________\n{block}\n\n90 aprons?")
    assert s.text == "Please make it 40 aprons." and s.marker == "header_block"
    assert "90" not in s.text


@pytest.mark.parametrize("sep", ["-----Original Message-----", "----- Original Message -----",
                                 "-----原始郵件-----", "-----原始邮件-----"])
def test_original_message_lines_end_the_newest_part(sep):
    s = strip_quoted(f"40 aprons please.\n\n{sep}\nFrom: Bo\n90 aprons?")
    assert s.text == "40 aprons please." and s.marker == "original_message"


@pytest.mark.parametrize("fwd", ["---------- Forwarded message ---------", "Begin forwarded message:",
                                 "---------- 轉寄的郵件 ----------", "開始轉寄的郵件：",
                                 "----- Forwarded Message -----"])
def test_a_bare_forward_is_kept_whole(fwd):
    text = f"{fwd}\nFrom: Ann <a@x.example>\nDate: Wed, Dec 2, 2026\nSubject: Aprons\nTo: Shop\n\n40 aprons by Friday."
    s = strip_quoted(text)
    assert s.text == text and s.marker is None and s.note() is None


def test_a_message_that_is_only_history_is_kept_whole():
    text = "On Tue, Dec 1, 2026 at 10:15 AM Ann <a@x.example> wrote:\n> 40 aprons by Friday.\n> Ann"
    assert strip_quoted(text).text == text and strip_quoted(text).note() is None
    outlook = "From: Ann\nSent: Tuesday, December 1, 2026\nTo: Shop\nSubject: FW: aprons\n\n40 aprons."
    assert strip_quoted(outlook).text == outlook  # an Outlook forward with nothing above it


def test_plain_text_and_lookalikes_are_left_alone():
    for text in ["As Anna wrote: we need 40 aprons.\nThanks", "Qty 40\n-- \nAnn Lee\nTel 0912 345 678",
                 "From: the kitchen staff, 40 aprons.\nSubject to stock.", "我們在下週三需要 40 件圍裙。\n謝謝"]:
        s = strip_quoted(text)
        assert s.text == text and s.note() is None, text


def test_crlf_and_a_signature_before_the_history():
    text = "40 aprons.\r\n-- \r\nAnn, 0912 345 678\r\n\r\nOn Tue, Dec 1, 2026, Bo <b@x.example> wrote:\r\n> 90?"
    s = strip_quoted(text)
    assert s.text == "40 aprons.\n-- \nAnn, 0912 345 678"  # the signature keeps the contact


# -- fitting a long message to the context, without a model ------------------------------------

class CharEngine:
    """Just what request_for uses: a prompt of one token per 4 characters of the rendering."""

    capabilities = LOCAL

    def __init__(self, n_ctx: int):
        self.n_ctx = n_ctx

    def render_chat(self, messages: list[dict], variables: dict | None = None) -> str:
        return "\n".join(m["content"] for m in messages)

    def tokenize_prompt(self, rendered: str) -> list[int]:
        return [0] * (len(rendered) // 4)


@pytest.fixture(scope="module")
def template():
    return TemplateStore(None).get("work_order")


def prompt_tokens(template, text: str = "x") -> int:
    return len(CharEngine(0).tokenize_prompt(CharEngine(0).render_chat(
        prompt.messages(template, text, SENT))))


def test_a_message_that_fits_is_not_cut(template):
    eng = CharEngine(prompt_tokens(template) + 2000)
    req, read, cut = extract.fit_request(eng, template, "40 aprons by Friday.", SENT)
    assert read == "40 aprons by Friday." and cut is None and req.max_tokens >= extract.MIN_ANSWER_TOKENS


def test_a_long_message_is_cut_at_a_line_end_and_keeps_its_start(template):
    text = email("en_long_seating_plan.txt")
    eng = CharEngine(prompt_tokens(template) + 800 + 500)  # about 2,000 characters of message
    req, read, cut = extract.fit_request(eng, template, text, SENT)
    assert text.startswith(read) and text[len(read)] == "\n" and "120 wedding invitations" in read
    assert cut.kept == len(read) and cut.chars == len(text[len(read):].strip()) and cut.lines > 50
    assert cut.boundary in ("line", "paragraph")
    assert len(eng.tokenize_prompt(req.prompt)) + req.max_tokens <= eng.n_ctx
    assert req.max_tokens >= 2 * extract.closing_reserve(template.schema)


def test_the_cut_prefers_a_paragraph_end_close_before(template):
    first = "\n".join(f"40 aprons, colour {i}, by Friday." for i in range(40))  # about 1,300 characters
    text = first + "\n\n" + "\n".join(f"note {i}: blue" for i in range(400))
    eng = CharEngine(prompt_tokens(template) + 500 + 400)  # the first paragraph and a few notes fit
    _, read, cut = extract.fit_request(eng, template, text, SENT, max_tokens=500)
    assert read == first and cut.boundary == "paragraph"
    _, read, cut = extract.fit_request(CharEngine(prompt_tokens(template) + 500 + 600), template, text, SENT,
                                       max_tokens=500)  # many notes fit: not worth losing them
    assert read.startswith(first + "\n\nnote 0") and cut.boundary == "line"


def test_one_long_line_is_cut_at_a_sentence_end_and_never_inside_one(template):
    text = "".join(f"第{i}項：三百張名片，霧面紙。" for i in range(400))
    eng = CharEngine(prompt_tokens(template) + 800 + 100)
    _, read, cut = extract.fit_request(eng, template, text, SENT)
    assert read.endswith("。") and text.startswith(read) and cut.boundary == "sentence" and cut.lines == 1


def test_what_cannot_be_cut_is_still_refused(template):
    with pytest.raises(ContextLengthExceeded):  # one huge line with no sentence end
        extract.fit_request(CharEngine(prompt_tokens(template) + 600), template, "order 500 flyers " * 1500, SENT)
    with pytest.raises(ContextLengthExceeded):  # the template's prompt alone
        extract.fit_request(CharEngine(prompt_tokens(template)), template, "40 aprons.\n" * 50, SENT)


# -- through the real server (three parses) ---------------------------------------------------

@pytest.fixture(scope="module")
def srv(tmp_path_factory, store):
    home = linked_home(tmp_path_factory.mktemp("threads-home"), store)
    s = ServerProcess(home, "--ctx", "3072", "--parallel", "1")
    s.wait_ready()
    yield s
    s.stop()


def parse(srv, **body) -> dict:
    r = httpx.post(f"{srv.base}/v1/workorders/parse", json={"sent_date": SENT.isoformat(), **body}, timeout=900)
    assert r.status_code == 200, r.text
    return r.json()


def quantities(result: dict | None) -> set:
    return {i.get("quantity") for i in (result or {}).get("items") or []}


@pytest.mark.timeout(900)  # the server's start and a long prompt on a shared 2-core CPU
def test_a_reply_is_parsed_from_its_newest_part_and_says_what_went(srv):
    text = email("zh_tw_outlook_reply.txt")
    body = parse(srv, text=text, language="zh-TW")
    note = body["stripped"]["quoted_history"]
    assert note["marker"] == "header_block" and note["chars"] > 200 and body["stripped"]["cut_to_fit"] is None
    assert body["valid"] is True
    assert not quantities(body["result"]) & {150, 40}  # the history's orders: the model never read them
    assert "cut_to_fit" not in {d["code"] for d in body["review_details"]}
    whole = parse(srv, text=text, language="zh-TW", strip_quoted=False)
    assert whole["stripped"] == {"quoted_history": None, "cut_to_fit": None}
    assert whole["usage"]["prompt_tokens"] > body["usage"]["prompt_tokens"] + 100  # it read the history


@pytest.mark.timeout(900)  # the server's start and a long prompt on a shared 2-core CPU
def test_a_message_too_long_for_the_context_is_parsed_from_its_start_and_needs_review(srv):
    body = parse(srv, text=email("en_long_seating_plan.txt"), language="en")
    cut = body["stripped"]["cut_to_fit"]
    assert body["stripped"]["quoted_history"]["marker"] == "reply_header"
    assert cut["chars"] > 5000 and cut["lines"] > 50 and cut["boundary"] in ("line", "paragraph")
    assert body["needs_review"] is True
    detail = next(d for d in body["review_details"] if d["code"] == "cut_to_fit")
    assert detail["params"] == cut and detail["message"] in body["review_reasons"]
    assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 3072
    stored = httpx.get(f"{srv.base}/v1/workorders/{body['id']}").json()  # the trail keeps the reason
    assert "cut_to_fit" in {d["code"] for d in stored["review_details"]}
    assert stored["input_text"] == email("en_long_seating_plan.txt")  # the message as sent, history and all
