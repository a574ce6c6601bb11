"""Quoted history in a reply email: where it begins, and the newest part without it.

A shop's order system posts whole emails, and a reply carries the thread below (or around)
it, with older orders that a parse must not read. `strip_quoted(text)` returns the newest
part and what was removed (`Stripped.note()` is the parse response's `stripped.quoted_history`).

The rules, each a general shape of what mail clients write, never one email's text:
- Lines whose first character (after spaces) is ">" ("> >" too) are quoted, wherever they are:
  top-posted, bottom-posted and inline replies all keep their own lines.
- A reply header ends the newest part; everything from it on is history:
  "On <date>, <name> wrote:" (Gmail, Apple Mail, Outlook; wrapped onto up to 3 lines),
  "於 2026年12月1日 週二 上午10:15，王小明 <x@y> 寫道：", "在 ... 写道：", "<name> 於 <date> 寫道：";
  "-----Original Message-----", "-----原始郵件-----", "-----原始邮件-----";
  an Outlook header block: a From line with a Sent/Date line and a Subject line within the
  next 6 lines (寄件者/發件人/发件人, 傳送時間/發送時間/发送时间/日期, 主旨/主題/主题 alike),
  together with the "_____" rule Outlook draws above it.
  A reply header followed by ">" lines is just their attribution: only it and the ">" lines go
  (the text after a bottom-posted quote is the newest part).
- Forwards are kept: "---------- Forwarded message ---------", "Begin forwarded message:",
  "---------- 轉寄的郵件 ----------", "开始转发的邮件：" and their header lines do not end the
  newest part. Whoever forwards an order to the shop wants that order parsed, and the
  forwarded headers name its sender (often the customer). History quoted inside the
  forwarded message is stripped by the rules above. An Outlook forward cannot be told from
  an Outlook reply in the text (both draw the same header block), so it is stripped like a
  reply; a bare one (nothing written above it) is kept whole by the next rule.
- Never everything: when nothing but blank lines would remain (a bare forward or quote), the
  text is returned unchanged and nothing is reported removed.
- Signatures ("-- ") are kept: they often carry the phone number and company the work order
  wants as its contact.

Not the parse (extract.py) nor the cut of a newest part that is still too long for the
context (extract.fit_request). References: RFC 3676 section 4.5 (">" quoting), RFC 3676
section 4.3 ("-- " signature separator).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_KEY = r"^\s*[*_]*\s*({})\s*[*_]*\s*[:：]"  # a header key, maybe bold (*From:*) after HTML to text
FROM = re.compile(_KEY.format("from|寄件者|寄件人|寄信人|發件人|发件人"), re.I)
DATE = re.compile(_KEY.format("sent|date|傳送時間|寄件日期|發送時間|发送时间|日期|時間|时间"), re.I)
SUBJECT = re.compile(_KEY.format("subject|主旨|主題|主题"), re.I)
OTHER_HEADER = re.compile(_KEY.format("to|cc|bcc|reply-to|收件者|收件人|副本|抄送|密件副本"), re.I)
ORIGINAL = re.compile(r"^\s*-{2,}\s*(original message|原始郵件|原始邮件|原始信件)\s*-{2,}\s*$", re.I)
FORWARD = re.compile(r"^\s*(-{2,}\s*(forwarded message|轉寄的郵件|转发的邮件|轉寄郵件|已轉寄郵件)\s*-{2,}"
                     r"|(begin forwarded message|開始轉寄的郵件|开始转发的邮件)\s*[:：])\s*$", re.I)
RULE = re.compile(r"^\s*_{8,}\s*$")  # Outlook's line above its header block
QUOTE = re.compile(r"^\s*>")
WROTE_EN = re.compile(r"^\s*on\s.*\bwrote\s*:\s*$", re.I)
WROTE_ZH = re.compile(r"^.*[於在].*(寫道|写道)\s*[:：]\s*$")
MAX_HEADER_CHARS = 300  # an attribution longer than this is a sentence of the message, not a header


@dataclass
class Stripped:
    """The newest part of a message and what was removed from it (`chars` and `lines` of the
    original; `line` is the 1-based line of the first marker)."""

    text: str
    marker: str | None = None  # the first rule that removed something: see MARKERS
    marker_text: str = ""  # that line as written (its first 200 characters)
    line: int = 0
    chars: int = 0
    lines: int = 0
    markers: list[str] = field(default_factory=list)  # every rule that removed something, in order

    def note(self) -> dict | None:
        if not self.marker:
            return None
        return {"marker": self.marker, "marker_text": self.marker_text, "line": self.line,
                "chars": self.chars, "lines": self.lines, "markers": self.markers}


MARKERS = {"quote_prefix": "lines starting with '>'", "reply_header": "'On ... wrote:' / '於 ... 寫道：'",
           "original_message": "'-----Original Message-----' / '-----原始郵件-----'",
           "header_block": "an Outlook 'From: / Sent: / Subject:' block (寄件者 / 傳送時間 / 主旨)"}


def strip_quoted(text: str) -> Stripped:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    drop: set[int] = set()  # line indexes removed
    found: list[tuple[int, str]] = []  # (line, marker) of each removal, in line order
    i, end = 0, len(lines)
    while i < end:
        line = lines[i]
        if FORWARD.match(line):
            i = _after_headers(lines, i + 1)  # the forwarded message is kept, headers and all
            continue
        if QUOTE.match(line):
            drop.add(i)
            found.append((i, "quote_prefix"))
            i += 1
            continue
        n = _reply_header(lines, i)
        if n:
            if _next_is_quote(lines, i + n):  # the attribution of a '>' quote: it goes, the rest stays
                drop.update(range(i, i + n))
                found.append((i, "reply_header"))
                i += n
                continue
            end = _rule_above(lines, i)
            found.append((i, "reply_header"))
            break
        if ORIGINAL.match(line):
            end = _rule_above(lines, i)
            found.append((i, "original_message"))
            break
        if FROM.match(line) and _is_header_block(lines, i):
            end = _rule_above(lines, i)
            found.append((i, "header_block"))
            break
        i += 1
    drop.update(range(end, len(lines)))
    kept = [line for k, line in enumerate(lines) if k not in drop]
    newest = _tidy(kept)
    if not drop or not newest.strip():
        return Stripped(text)  # nothing found, or nothing would remain: the message as it came
    first = min(k for k, _ in found)
    markers = list(dict.fromkeys(m for _, m in sorted(found)))
    return Stripped(newest, markers[0], lines[first].strip()[:200], first + 1,
                    sum(len(lines[k]) + 1 for k in drop), len(drop), markers)


def _reply_header(lines: list[str], i: int) -> int:
    """How many lines (1 to 3) an attribution such as "On <date>, <name> wrote:" starting at
    line i takes, or 0. It must hold a digit (its date) so that "As Anna wrote:" is not one."""
    joined = ""
    for n in range(1, 4):
        if i + n > len(lines):
            return 0
        joined = (joined + " " + lines[i + n - 1].strip()).strip()
        if len(joined) > MAX_HEADER_CHARS or (n > 1 and not lines[i + n - 1].strip()):
            return 0
        if (WROTE_EN.match(joined) or WROTE_ZH.match(joined)) and re.search(r"\d", joined):
            return n
        if n == 1 and not (re.match(r"^\s*on\s", joined, re.I) or re.search(r"[於在]", joined)):
            return 0  # not the start of an attribution: do not join it with the next lines
    return 0


def _next_is_quote(lines: list[str], i: int) -> bool:
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i < len(lines) and bool(QUOTE.match(lines[i]))


def _is_header_block(lines: list[str], i: int) -> bool:
    window = lines[i + 1:i + 7]
    return any(DATE.match(w) for w in window) and any(SUBJECT.match(w) for w in window)


def _is_header(line: str) -> bool:
    return any(p.match(line) for p in (FROM, DATE, SUBJECT, OTHER_HEADER))


def _after_headers(lines: list[str], i: int) -> int:
    """The first line of a forwarded message's body: past its blank and header lines."""
    while i < len(lines) and (not lines[i].strip() or _is_header(lines[i])):
        i += 1
    return i


def _rule_above(lines: list[str], i: int) -> int:
    """Where history starting at line i really starts: Outlook's "_____" rule above its
    header block belongs to it (blank lines between them too)."""
    k = i
    while k > 0 and not lines[k - 1].strip():
        k -= 1
    return k - 1 if k > 0 and RULE.match(lines[k - 1]) else i


def _tidy(kept: list[str]) -> str:
    """The kept lines with the blank runs that removals leave behind squeezed to one."""
    out: list[str] = []
    for line in kept:
        if not line.strip() and out and not out[-1].strip():
            continue
        out.append(line)
    return "\n".join(out).strip()
