"""Should a person look at this parse before work starts, and why: `needs_review` with reasons,
plus warnings tied to fields.

Reasons (needs_review): the answer is not valid (cut off, or failed the schema); a business
field the template requires is empty; the model itself set needs_review; a date before the
sent date; a quantity or contact that appears nowhere in the message; a required field
written by tokens the model was unsure of; items the model repeated (extract.py removes
exact repeats when the result stays valid without them); a message too long for the context,
of which only the start was read (extract.fit_request: cut_to_fit). Warnings: the same checks
on fields the template does not require, names that are not copied from the message, and copy
fields (`x-copy`) left empty.
Checks read the message (the part the model read), never guess: "not found" means a person
should look, not that the value is wrong.

Not the extraction (prompt.py and the grammar) nor storage (server/stores/audit.py).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

LOW_CONFIDENCE = 0.35  # a value written through a token below this probability is "uncertain"
NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "dozen": 12, "a dozen": 12,
                "一": 1, "兩": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}


# Every finding's code. The UI words each one in the reader's language (ui/i18n/*.json,
# workorders.flag.<code>; tests/ui/test_i18n.py checks they all exist). routes.py adds
# no_sent_date and failed; extract.py the date notes, closed_early and cut_to_fit.
CODES = frozenset({"invalid", "missing", "repeats", "model_says", "uncertain", "not_a_date", "before_sent",
                   "far_future", "not_in_message", "not_copied", "not_found", "date_from_message", "date_none",
                   "several_dates", "closed_early", "cut_to_fit", "no_sent_date", "failed"})


@dataclass
class Review:
    """Each finding is an English sentence (for logs, the CSV export and API clients that show
    it as is) plus a stable `code` and its `params`, from which the UI writes the sentence in
    the reader's language (ui/i18n: workorders.flag.<code>)."""

    needs_review: bool = False
    reasons: list[str] = field(default_factory=list)
    details: list[dict] = field(default_factory=list)  # per reason, same order: {code, field, params, message}
    warnings: list[dict] = field(default_factory=list)  # {field, message, code, params}

    def flag(self, code: str, reason: str, path: str | None = None, **params) -> None:
        assert code in CODES, code
        self.needs_review = True
        if reason not in self.reasons:
            self.reasons.append(reason)
            self.details.append({"code": code, "field": path, "params": params, "message": reason})

    def warn(self, path: str, code: str, message: str, **params) -> None:
        assert code in CODES, code
        self.warnings.append({"field": path, "message": message, "code": code, "params": params})


def review(result: dict | None, problems: list[str], required: list[str], message: str, sent: dt.date,
           confidence: dict[str, float], repeats: int = 0, copies=()) -> Review:
    """`copies`: the template's copy fields ("items[].color"), a null one of which is marked: the
    model found nothing to copy there (how often such a field is wrong: bench/review_marks.py)."""
    r = Review()
    if result is None or problems:
        for p in problems or ["no answer"]:
            r.flag("invalid", f"the answer is not valid: {p}", detail=p)
        if result is None:
            return r
    for path in required:
        for where, value in _values(result, path):
            if value is None or value == "" or value == []:
                r.flag("missing", f"missing {where}", where)
    missing = {d["field"] for d in r.details if d["code"] == "missing"}
    for path in copies:
        for where, value in _values(result, path):
            if value is None and where not in missing:
                r.warn(where, "not_found", f"{where} is empty: the message may give it")
    if repeats:
        r.flag("repeats", f"the model wrote the same item again and again; {repeats} exact repeats were removed",
               n=repeats)
    if result.get("needs_review") is True:
        r.flag("model_says", "the answer itself says needs_review", "needs_review")
    _check_dates(result, sent, r)
    _check_copied(result, message, r)
    for path, prob in sorted(confidence.items()):
        if prob < LOW_CONFIDENCE:
            text = f"uncertain {path} (the model's probability {prob:.2f})"
            r.warn(path, "uncertain", text, probability=round(prob, 2))
            if any(_matches(path, req) for req in required):
                r.flag("uncertain", text, path, probability=round(prob, 2))
    return r


def without_repeats(result: dict) -> tuple[dict, int]:
    """A copy without list entries equal to the entry before them (small models loop), and how
    many were dropped."""
    out, n = dict(result), 0
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out[key] = [v for i, v in enumerate(value) if i == 0 or v != value[i - 1]]
            n += len(value) - len(out[key])
    return out, n


def _values(obj, path: str, where: str = ""):
    """(concrete path, value) for a template path such as "items[].quantity" (missing -> None)."""
    head, _, rest = path.partition(".")
    many = head.endswith("[]")
    key = head.removesuffix("[]")
    value = obj.get(key) if isinstance(obj, dict) else None
    here = f"{where}.{key}" if where else key
    if not many:
        if rest:
            yield from _values(value, rest, here)
        else:
            yield here, value
        return
    for i, item in enumerate(value if isinstance(value, list) else []):
        if rest:
            yield from _values(item, rest, f"{here}[{i}]")
        else:
            yield f"{here}[{i}]", item


def _matches(concrete: str, template_path: str) -> bool:
    return re.sub(r"\[\d+\]", "[]", concrete) == template_path or concrete == template_path


def _check_dates(result: dict, sent: dt.date, r: Review) -> None:
    for key, value in result.items():
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) and key != "sent_date":
            try:
                day = dt.date.fromisoformat(value)
            except ValueError:
                r.flag("not_a_date", f"{key} {value} is not a calendar date", key, value=value)
                continue
            if day < sent:
                r.flag("before_sent", f"{key} {value} is before the message was sent ({sent.isoformat()})", key,
                       value=value, sent=sent.isoformat())
            elif (day - sent).days > 366:
                r.warn(key, "far_future", f"{value} is more than a year after the message was sent", value=value)


def _numbers_in(message: str) -> set[int]:
    text = re.sub(r"(?<=\d)[,，](?=\d{3})", "", message)  # 1,200 -> 1200
    found = {int(n) for n in re.findall(r"\d+", text)}
    lower = message.lower()
    found |= {v for w, v in NUMBER_WORDS.items() if (re.search(rf"\b{w}\b", lower) if w.isascii() else w in message)}
    return found


def _squash(s: str) -> str:
    return re.sub(r"[\s\-().+]", "", s).casefold()


def _check_copied(result: dict, message: str, r: Review) -> None:
    numbers = _numbers_in(message)
    for where, q in _values(result, "items[].quantity"):
        if isinstance(q, int) and q != 0 and q not in numbers:
            r.flag("not_in_message", f"{where} {q} does not appear in the message", where, value=q)
    plain = _squash(message)
    contact = result.get("contact")
    if isinstance(contact, str):
        for part in re.split(r"[;；]", contact):
            if part.strip() and _squash(part.split(":")[-1]) not in plain:
                r.flag("not_in_message", f"contact {part.strip()!r} does not appear in the message", "contact",
                       value=part.strip())
    name = result.get("customer_name")
    if isinstance(name, str) and name.strip() and _squash(name) not in plain:
        r.warn("customer_name", "not_copied", f"{name!r} is not written like this in the message", value=name)
