"""Dates in a shop order, resolved against the day it was sent, and the due date they imply.

`find_dates(message, sent)` lists every date mention (English, Traditional Chinese, mixed) with
its character span and resolved date; `due_date(message, sent)` picks the due date by the
conventions of the `due_date` field in tests/data/workorder.schema.json:
today/今天 = sent; tomorrow/明天 = +1; day after tomorrow/後天 = +2; in/within N days, N天內/後 = +N
(a week = 7); a bare weekday (Friday, Fri, 週五, 星期五, 禮拜五) = the first such day AFTER sent;
this <weekday>/這週X/本週X = that day of the sent Monday-to-Sunday week; next <weekday>/下週X =
that day of the following week; end of (next) month/月底 = its last day; absolute dates (ISO,
"April 10", "10 April", "3月5日", numeric slash dates read as M/D like the dev data) without
a year = their next occurrence on or after sent. A weekday next to a date ("Tuesday June 30")
is one mention and the date wins; last <weekday>/上週X is in the previous week (never due).

The due-date rule, deliberately small:
  1. Candidates are mentions dated on or after sent, minus those whose clause (same sentence
     part, at most 50 characters before the mention) says the date is not a deadline:
     past cues ("received", "got", "dropped off", "picked up", "ordered", "last week/month",
     上週, 上禮拜, 收到, 拿到, 訂的) and reply cues ("call me", "reply", "let us know"; 回覆, 回電 also
     just after): "please call me today" asks for a call, not for the goods.
  2. A date changed into another ("從 9/30 改成 9/11", "moved to") is superseded by the new one.
  3. The due date is the earliest candidate. An event date ("the fair opens on", "tour on",
     尾牙是, 演出是, 運動會) does not conflict with an earlier pick-up or delivery date; two or more
     different non-event dates do, and so does a deadline later than the event (conflict=True:
     a person should look).
Habits are not dates ("every Friday", "Saturday mornings", 每週五), nor are times (9:40), phone
numbers, sizes (30x22x8), fractions with a unit (3/4 sleeve), order numbers (2026-0612) or
"last month"; numbers must form a valid calendar date between word-ish boundaries.

Not a date parser for arbitrary prose: vague dates ("early June", "before our first game",
"next week") give no date, holidays are not known, business days are not counted; the model's
extraction (prompt.py) and the review (review.py) decide what to do with the answer.
References: the schema's `due_date` description; dateparser/duckling for what a full parser does.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass


@dataclass
class DateMention:
    text: str  # the words as written: "next Wednesday", "下週三", "12/10", "March 2"
    start: int  # character offsets in the message
    end: int
    date: dt.date  # resolved against the sent date
    kind: str  # "absolute" | "day" | "relative" | "weekday" | "month_end"


_CN_DIGIT = {"一": 1, "二": 2, "兩": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_EN_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fourteen": 14, "fifteen": 15,
           "twenty": 20, "thirty": 30}
_CN_WEEKDAY = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

# Longest spellings first only for readability: every use ends in \b, so the regex backtracks.
_WD = (r"(?:monday|mon|tuesday|tuseday|tues|tue|wednesday|wednsday|wensday|wendsday|weds|wed|thursday"
       r"|thrusday|thurs|thur|thu|friday|firday|fri|saturday|saterday|sat|sunday|sun)")
_MON = (r"(?:january|february|febuary|march|april|may|june|july|august|september|october|november"
        r"|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)")
_CN_NUM = r"(?:\d{1,3}|[一二兩两三四五六七八九十]{1,3})"
_WD_TAG = r"(?:\s*[（(](?:週|周|星期|禮拜)?[一二三四五六日天][)）])?"  # "7/3（五）": the date decides
_AMBIGUOUS = {"mon", "wed", "sat", "sun"}  # also plain words: only capitalised, or after this/next/last


def _weekday_index(word: str) -> int:
    return {"mo": 0, "tu": 1, "we": 2, "th": 3, "fr": 4, "fi": 4, "sa": 5, "su": 6}[word.lower()[:2]]


def _cn_int(s: str) -> int | None:
    if s.isdigit():
        return int(s)
    if "十" in s:  # 十 = 10, 十五 = 15, 二十 = 20, 二十一 = 21
        tens, _, ones = s.partition("十")
        if len(tens) > 1 or len(ones) > 1:
            return None
        return (_CN_DIGIT.get(tens, 0) if tens else 1) * 10 + (_CN_DIGIT.get(ones, 0) if ones else 0)
    return _CN_DIGIT.get(s) if len(s) == 1 else None


def _next_occurrence(sent: dt.date, month: int, day: int) -> dt.date | None:
    """A date without a year: its next occurrence on or after sent (Feb 29 waits for a leap year)."""
    for year in range(sent.year, sent.year + 9):
        try:
            d = dt.date(year, month, day)
        except ValueError:
            continue
        if d >= sent:
            return d
    return None


def _calendar_date(sent: dt.date, year: str | None, month: int, day: int) -> dt.date | None:
    if not year:
        return _next_occurrence(sent, month, day)
    y = int(year) + (2000 if len(year) == 2 else 0)
    try:
        return dt.date(y, month, day)
    except ValueError:  # 2026-02-30 is a number, not a date
        return None


def _day_only(sent: dt.date, day: int) -> dt.date | None:
    """A day alone ("the 19th"): the next such day on or after sent."""
    y, m = sent.year, sent.month
    for _ in range(13):
        if day <= calendar.monthrange(y, m)[1] and dt.date(y, m, day) >= sent:
            return dt.date(y, m, day)
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return None


def _month_end(sent: dt.date, months_ahead: int) -> dt.date:
    y, m = divmod(sent.year * 12 + sent.month - 1 + months_ahead, 12)
    return dt.date(y, m + 1, calendar.monthrange(y, m + 1)[1])


def _weekday(sent: dt.date, wd: int, which: str) -> dt.date:
    week = {"this": 0, "next": 7, "last": -7}  # Monday-to-Sunday weeks
    if which in week:
        return sent - dt.timedelta(days=sent.weekday()) + dt.timedelta(days=wd + week[which])
    return sent + dt.timedelta(days=(wd - sent.weekday() - 1) % 7 + 1)  # bare: first one AFTER sent


# Each handler gets the match and sent, returns (date, kind) or "skip" (not a date after all);
# date None = "not a date, but these words are taken" (a habit, an invalid date) so that a shorter
# pattern cannot claim them.
def _en_weekday(m, sent):
    prefix, word, suffix = (m["pre"] or "").lower(), m["wd"], (m["suf"] or "").lower()
    if prefix == "every" or m["habit"]:
        return None, "habit"
    if word.lower() in _AMBIGUOUS and (not (word[0].isupper() or prefix)
                                       or re.match(r"\s+[A-Z]", m.string[m.end():])):
        return "skip"  # "we sat down", "Sun Printing Co."
    return _weekday(sent, _weekday_index(word), prefix or suffix), "weekday"


def _cn_weekday(m, sent):
    pre = m["pre"] or ""
    if pre.startswith("每"):
        return None, "habit"
    if not pre and m.start() > 0 and m.string[m.start() - 1] in "一二兩两三四五六七八九十0123456789":
        return "skip"  # "一週一次" is once a week, not Monday
    which = {"這": "this", "这": "this", "本": "this", "下": "next", "上": "last"}.get(pre[:1], "")
    return _weekday(sent, _CN_WEEKDAY[m["d"]], which), "weekday"


def _month_name(m, sent):
    if m["mon"] == "may":
        return "skip"  # lower-case "may" is the verb
    month = _MONTHS.index(m["mon"].lower()[:3]) + 1
    return _calendar_date(sent, m["year"], month, int(m["day"])), "absolute"


def _numeric(m, sent):
    if not m["year"] and re.match(r"\s*(?:[\"”″']|inch|in\b|mm|cm|m\b|kg|oz|lb|吋|寸|sleeve|length|price|off\b"
                                  r"|of\b|%)", m.string[m.end():], re.I):
        return "skip"  # "3/4 sleeve", "1/2 inch": a fraction
    return _calendar_date(sent, m["year"], int(m["mon"]), int(m["day"])), "absolute"


def _ordinal(m, sent):
    if not (m["wd"] or m["the"]):
        return "skip"  # "our 1st game" is not the 1st of the month
    return _day_only(sent, int(m["day"])), "day"


def _within(m, sent):
    n = int(m["n"]) if m["n"].isdigit() else _EN_NUM.get(m["n"].lower())
    if n is None:
        return "skip"  # "in these days"
    days = n * (7 if m["unit"].lower().startswith("w") else 1)
    return sent + dt.timedelta(days=days), "relative"


def _cn_within(m, sent):
    n = _cn_int(m["n"])
    if n is None:
        return "skip"
    return sent + dt.timedelta(days=n * (1 if m["unit"] in "天日" else 7)), "relative"


def _end_of_named_month(m, sent):
    month = _MONTHS.index(m["mon"].lower()[:3]) + 1
    d = _month_end(dt.date(sent.year, month, 1), 0)
    return (d if d >= sent else _month_end(dt.date(sent.year + 1, month, 1), 0)), "month_end"


def _relative_word(m, sent):
    word = m[0].lower()  # the spellings of tomorrow all mean +1
    return sent + dt.timedelta(_REL_WORDS.get(word, 2 if "after" in word else 1)), "relative"


_REL_WORDS = {"today": 0, "tonight": 0, "今天": 0, "今日": 0, "今早": 0, "今晚": 0, "明天": 1, "明日": 1,
              "明早": 1, "明晚": 1, "後天": 2, "后天": 2, "大後天": 3, "大后天": 3}

_PATTERNS = [
    (re.compile(rf"\b(?:(?P<pre>this|next|last|every)\s+)?(?:coming\s+)?(?P<wd>{_WD})\b"
                rf"(?:\s+(?P<suf>next|this)\s+week\b)?(?P<habit>\s+(?:mornings|afternoons|evenings|nights)\b)?",
                re.I), _en_weekday),
    (re.compile(r"(?P<pre>這個|这个|這|这|本|下個|下个|下|上個|上个|上|每個|每个|每)?(?:週|周|星期|禮拜|礼拜)"
                r"(?P<d>[一二三四五六日天])"), _cn_weekday),
    (re.compile(rf"\b(?P<mon>{_MON})\.?\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\b(?![:/.]\d)"
                rf"(?:,?\s+(?P<year>\d{{4}})\b)?", re.I), _month_name),
    (re.compile(rf"(?<![\d,.:/-])\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mon>{_MON})\b\.?"
                rf"(?:,?\s+(?P<year>\d{{4}})\b)?", re.I), _month_name),
    (re.compile(r"(?<![0-9A-Za-z\-/.#])(?P<year>\d{4})(?P<sep>[-/.])(?P<mon>\d{1,2})(?P=sep)(?P<day>\d{1,2})"
                rf"(?![0-9A-Za-z]|[-/.]\d){_WD_TAG}"), _numeric),
    (re.compile(r"(?<![0-9A-Za-z/.,:\-#])(?P<mon>\d{1,2})/(?P<day>\d{1,2})(?:/(?P<year>\d{4}|\d{2}))?"
                rf"(?![0-9A-Za-z/]|[.,:]\d){_WD_TAG}"), _numeric),
    (re.compile(r"(?<![0-9])(?:(?P<year>\d{4})\s*年\s*)?(?P<mon>\d{1,2})\s*月\s*(?P<day>\d{1,2})\s*[日號号]?"
                rf"(?![0-9個个件張张組组箱份台]){_WD_TAG}"), _numeric),
    (re.compile(rf"\b(?:(?P<wd>{_WD})\.?,?\s+)?(?P<the>the\s+)?(?P<day>\d{{1,2}})(?:st|nd|rd|th)\b"
                r"(?!\s+(?!at\b|and\b|or\b)[A-Za-z])", re.I), _ordinal),
    (re.compile(r"\b(?:in|within)\s+(?P<n>\d{1,3}|[a-z]+)\s+(?P<unit>days?|weeks?|wks?)\b", re.I), _within),
    (re.compile(r"\b(?P<n>\d{1,3}|[a-z]+)\s+(?P<unit>days?|weeks?)\s+from\s+(?:now|today)\b", re.I), _within),
    (re.compile(rf"(?P<n>{_CN_NUM})\s*(?:個|个)?\s*(?P<unit>天|日|週|周|禮拜|礼拜|星期)\s*之?[內内後后]"), _cn_within),
    (re.compile(r"\b(?:the\s+)?day\s+after\s+(?:tomorrow|tmr)\b|\b(?:today|tonight|tomorrow|tomorow|tommorow"
                r"|tommorrow|tmrw|tmr)\b|大?[後后]天|今天|今日|今早|今晚|明天|明日|明早|明晚", re.I), _relative_word),
    (re.compile(r"\bend\s+of\s+(?:the\s+|this\s+|(?P<next>next\s+))?month\b|\bmonth[\s-]end\b", re.I),
     lambda m, s: (_month_end(s, 1 if m["next"] else 0), "month_end")),
    (re.compile(rf"\bend\s+of\s+(?P<mon>{_MON})\b", re.I), _end_of_named_month),
    (re.compile(r"(?P<rel>下個|下个|下|上個|上个|上)?(?:本|這個|这个|當)?月底"),
     lambda m, s: (_month_end(s, {"下": 1, "上": -1}.get((m["rel"] or " ")[0], 0)), "month_end")),
]

# Why a mention is not a deadline (rule 1 of the module docstring), read in its clause.
_CLAUSE_END = re.compile(r"[.!?;。！？；，,、\n]|\b(?:and|but|so)\b|但|可是|然後|然后")
_PAST = re.compile(r"\b(?:received|got(?!\s+to)|dropped\s+off|picked\s+up|ordered|last\s+(?:week|wk|month))\b"
                   r"|上週|上周|上禮拜|上礼拜|上星期|收到|拿到|訂的|订的", re.I)
_REPLY = re.compile(r"\b(?:call\s+(?:me|us|back)|reply|respond|let\s+(?:me|us)\s+know|get\s+back\s+to)\b"
                    r"|回覆|回复|回電|回电", re.I)
_EVENT = re.compile(r"\b(?:event|fair|opens?|opening|launch|wedding|party|tour|show|concert|game|match|festival"
                    r"|ceremony|exhibition|expo)\b|尾牙|婚期|婚禮|婚礼|運動會|运动会|演出|活動|活动|表演|比賽|比赛"
                    r"|開幕|开幕|展覽|展览|典禮|典礼", re.I)
_CHANGED_TO = re.compile(r"\s*(?:改成|改為|改为|改到|延到|延後到|延后到|提前到|→|->"
                         r"|(?:changed?|moved?|pushed?)\s+to)\s*$", re.I)


def find_dates(message: str, sent: dt.date) -> list[DateMention]:
    """Every date mention, in message order; overlapping matches keep the longest."""
    found = []
    for pattern, handle in _PATTERNS:
        for m in pattern.finditer(message):
            r = handle(m, sent)
            if r != "skip":
                found.append((m.start(), m.end(), *r))
    taken, chosen = [False] * (len(message) + 1), []
    for start, end, date, kind in sorted(found, key=lambda f: (f[0] - f[1], f[0])):
        if not any(taken[start:end]):
            taken[start:end] = [True] * (end - start)
            if date is not None:  # habits and invalid dates only hold their words
                chosen.append(DateMention(message[start:end], start, end, date, kind))
    return _merge_weekday_dates(message, sorted(chosen, key=lambda d: d.start))


def _merge_weekday_dates(message: str, mentions: list[DateMention]) -> list[DateMention]:
    """A weekday next to a date ("Tuesday June 30", "June 30 (Tue)") is one mention: the date wins."""
    out: list[DateMention] = []
    for m in mentions:
        prev = out[-1] if out else None
        if (prev and {prev.kind, m.kind} in ({"weekday", "absolute"}, {"weekday", "day"})
                and re.fullmatch(r"[\s,，(（]*(?:the\s+)?", message[prev.end:m.start], re.I)):
            date, kind = (prev.date, prev.kind) if prev.kind != "weekday" else (m.date, m.kind)
            out[-1] = DateMention(message[prev.start:m.end], prev.start, m.end, date, kind)
        else:
            out.append(m)
    return out


def due_date(message: str, sent: dt.date) -> tuple[dt.date | None, list[DateMention], bool]:
    """(due date, the candidate mentions it was chosen from, conflict) by the module docstring's rule."""
    mentions = find_dates(message, sent)
    candidates, events = [], set()
    for i, m in enumerate(mentions):
        before = _CLAUSE_END.split(message[max(0, m.start - 50):m.start])[-1]  # its clause, 50 chars at most
        after = _CLAUSE_END.split(message[m.end:m.end + 8])[0]  # and the few characters after it
        nxt = mentions[i + 1] if i + 1 < len(mentions) else None
        # Chinese puts the verb after the date (明天回覆), but 拿到 after a date is the goods (8/15 前拿到).
        if m.date < sent or _PAST.search(before) or _REPLY.search(before + " " + after):
            continue
        if nxt and _CHANGED_TO.match(message[m.end:nxt.start]):
            continue  # superseded by the next date
        candidates.append(m)
        if _EVENT.search(before) or _EVENT.search(after):
            events.add(id(m))
    if not candidates:
        return None, [], False
    due = min(m.date for m in candidates)
    others = {m.date for m in candidates if id(m) not in events}
    # Two deadlines disagree, or the only deadline comes after the event it is for.
    conflict = len(others) > 1 or (bool(others) and min(others) > due)
    return due, candidates, conflict
