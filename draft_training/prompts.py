"""The prompt mix a draft is trained on: what the target will be asked in a shop.

What it is: a seeded generator of chat prompts for self-distillation (the target answers
them, and those answers are the draft's training data), covering the product's uses in
English and Traditional Chinese — work orders, customer messages, quotes, general chat,
arithmetic, short code, JSON extraction (the user's own prompt and document files, which make
a draft that fits their shop, are user_prompts.py's). The prompts vary the phrasing, the shop's
trade (print, garment, metal, sign, packaging, wood), the slot values, the message shapes
(emails with greeting and signature, terse notes, chat messages with typos, mixed English
and Chinese), and sometimes add a system prompt or a canned earlier turn. The word lists
and templates live in `prompt_words.json` next to this file. What it is not: the answers
(the target writes them, in draft_training/capture.py) or any model code; the evaluation
prompts (tests/data) are never used here.

Every prompt is `{"id", "category", "lang", "messages"}` with OpenAI-style messages; the
last message is the user's. The same seed gives the same prompts on every machine (one
`random.Random(seed)`, lists in file order).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

CATEGORIES = ("work_order", "customer_message", "quote", "chat", "arithmetic", "code", "json_extraction")
MIX = (4, 3, 2, 3, 3, 2, 3)  # prompts of each category in every 20, interleaved
SYSTEM_SHARE = 0.2  # prompts that start with a system message (a fifth of those in the other language)
FOLLOWUP_SHARE = 0.06  # prompts that are a second user turn after a canned assistant turn
TAIL_SHARE = 0.25  # prompts with one more instruction at the end ("Keep it short.")
TYPO_SHARE = 0.15  # English customer texts (`*_text` slots) with a typo or two

_DATA = json.loads((Path(__file__).parent / "prompt_words.json").read_text("utf-8"))
WORDS, TRADES, TEMPLATES = _DATA["words"], _DATA["trades"], _DATA["templates"]


def builtin_prompts(n: int, seed: int = 0, zh_share: float = 0.35) -> list[dict]:
    """`n` prompts, categories interleaved at the shares of MIX, a `zh_share` of them in
    Traditional Chinese."""
    rng, cycle, out = random.Random(seed), _cycle(), []
    for i in range(n):
        cat = cycle[i % len(cycle)]
        lang = "zh" if rng.random() < zh_share else "en"
        s = _Slots(rng, lang)
        turns = _DATA["followups"].get(cat, {}).get(lang)
        if turns and rng.random() < FOLLOWUP_SHARE:
            msgs = [{"role": r, "content": s.fill(t)} for r, t in zip(("user", "assistant", "user"), rng.choice(turns))]
        else:
            text = s.fill(rng.choice(TEMPLATES[cat][lang]))
            if rng.random() < TAIL_SHARE:
                tail = s.fill(rng.choice(_DATA["tails"].get(cat, _DATA["tails"]["text"])[lang]))
                text += ("\n\n" if "\n" in text else " " if lang == "en" else "") + tail
            msgs = [{"role": "user", "content": text}]
        if rng.random() < SYSTEM_SHARE:
            sys_lang = lang if rng.random() < 0.8 else {"en": "zh", "zh": "en"}[lang]
            pool = _DATA["system"][cat if cat in _DATA["system"] and rng.random() < 0.5 else "any"][sys_lang]
            msgs.insert(0, {"role": "system", "content": _Slots(rng, sys_lang, s.trade).fill(rng.choice(pool))})
        out.append({"id": f"gen-{seed}-{i}", "category": cat, "lang": lang, "messages": msgs})
    return out


def _cycle() -> list[str]:
    """Smooth weighted round-robin: every category in every 20 prompts, spread out."""
    cur, out = [0] * len(MIX), []
    for _ in range(sum(MIX)):
        cur = [c + w for c, w in zip(cur, MIX)]
        j = cur.index(max(cur))
        cur[j] -= sum(MIX)
        out.append(CATEGORIES[j])
    return out


class _Slots(dict):
    """The slot values of one prompt, drawn the first time a template names them: from a
    generator in _GEN, a word list (the prompt's trade first; no entry twice in a prompt,
    so `product2` differs from `product`), or a record list (`faq_q` and `faq_a` come from
    one entry). A trailing digit names another draw of the same slot."""

    def __init__(self, rng: random.Random, lang: str, trade: str | None = None, picked: dict | None = None):
        super().__init__()
        self.rng, self.lang = rng, lang
        self.trade = trade or rng.choice(list(TRADES[lang]))
        self.words, self.tw = WORDS[lang], TRADES[lang][self.trade]
        self.picked = {} if picked is None else picked  # word list -> entries drawn (shared with children)

    def child(self) -> _Slots:
        """Fresh slots for one more line of the same prompt (same trade, no repeated product)."""
        return _Slots(self.rng, self.lang, self.trade, self.picked)

    def fill(self, template: str) -> str:
        return template.format_map(self)

    def __missing__(self, key: str) -> str:
        base = key.rstrip("0123456789")
        if base in _GEN:
            v = _GEN[base](self)
        elif base in self.tw or base in self.words:
            pool, used = self.tw.get(base) or self.words[base], self.picked.setdefault(base, [])
            raw = self.rng.choice([w for w in pool if w not in used] or pool)
            used.append(raw)
            v = self.fill(raw)
        else:
            head, _, _ = key.rpartition("_")
            records = self.words.get(head)
            if not (records and isinstance(records[0], dict)):
                raise KeyError(key)
            for field, t in self.rng.choice(records).items():
                self[f"{head}_{field}"] = self.fill(t)
            return self[key]
        if key.endswith("_text") and self.lang == "en" and self.rng.random() < TYPO_SHARE:
            v = _typos(self.rng, v)
        self[key] = v
        return v


def _num(s: _Slots, v: int) -> str:
    """An integer as people write it: usually with thousands separators."""
    return f"{v:,}" if v >= 1000 and s.rng.random() < 0.7 else str(v)


def _qty(s: _Slots) -> str:
    """An order quantity; trades that make big pieces (a `max_qty` in their words) order fewer."""
    r, top = s.rng, s.tw.get("max_qty", [5000])[0]
    v = r.choice([r.randint(2, 24), r.randint(2, 30) * 10, r.randint(1, 40) * 25, r.randint(1, 12) * 100,
                  r.randint(1, 10) * 500])
    return _num(s, v if v <= top else r.randint(1, 20) * r.choice([1, 5, 10]))


def _cents(s: _Slots, lo: int, hi: int) -> int:
    """A price in cents between lo and hi US cents, log-uniform (as many under $10 as over $100);
    in Chinese prompts the same price in whole NT$ (about 30 to the dollar, no cents in practice)."""
    if s.lang == "zh":
        lo, hi = lo * 30, hi * 30
    c = int(math.exp(s.rng.uniform(math.log(lo), math.log(hi))))
    return max(100, c // 100 * 100) if s.lang == "zh" else c


def _cur(s: _Slots, cents: int) -> str:
    if s.lang == "zh":
        return f"{cents // 100:,}元"
    return f"${cents / 100:,.2f}" if cents % 100 else f"${cents // 100:,}"


def _money(s: _Slots, lo: int, hi: int) -> str:
    """A price (or, with a larger range, an amount) as people write it: often round, NT$ now and then."""
    r, c = s.rng, _cents(s, lo, hi)
    if r.random() < 0.5:
        c = max(100, c // 100 * 100)
    if s.lang == "zh":
        return f"NT${c // 100:,}" if r.random() < 0.3 else _cur(s, c)
    return ("NT$" if c % 100 == 0 and r.random() < 0.2 else "$") + _cur(s, c)[1:]


def _date(s: _Slots) -> str:
    r = s.rng
    y, mo, d = r.choice([2025, 2026, 2027]), r.randint(1, 12), r.randint(1, 28)
    if s.lang == "zh":
        return r.choice([f"{mo}月{d}日", f"{mo}/{d}", f"{y}年{mo}月{d}日", f"{y}-{mo:02d}-{d:02d}"])
    name = WORDS["en"]["month"][mo - 1]
    return r.choice([f"{name} {d}", f"{d} {name}", f"{y}-{mo:02d}-{d:02d}", f"{d}/{mo}/{y}", f"{name} {d}, {y}"])


def _time(s: _Slots) -> str:
    r = s.rng
    h, mm = r.randint(8, 19), r.choice([0, 0, 15, 30, 45])
    h12 = (h - 1) % 12 + 1
    if s.lang == "zh":
        spoken = ("上午" if h < 12 else "下午") + f"{h12}點" + ("半" if mm == 30 else f"{mm}分" if mm else "")
        return r.choice([f"{h}:{mm:02d}", spoken])
    return r.choice([f"{h}:{mm:02d}", f"{h12}:{mm:02d} {'am' if h < 12 else 'pm'}"])


def _phone(s: _Slots) -> str:
    """A Taiwanese mobile or landline number, in one of the ways people write them."""
    r = s.rng
    a, b, c = r.randint(10, 99), r.randint(100, 999), r.randint(100, 999)
    area, x, y = r.randint(2, 8), r.randint(2000, 9999), r.randint(1000, 9999)
    return r.choice([f"09{a}-{b}-{c}", f"09{a} {b} {c}", f"+886 9{a} {b} {c}", f"0{area}-{x}-{y}",
                     f"(0{area}) {x}-{y}"])


def _email(s: _Slots) -> str:
    r = s.rng
    domain = "".join(ch for ch in s["customer"].lower() if ch.isascii() and ch.isalnum())[:16]
    domain = domain or f"{r.choice(['shop', 'studio', 'co', 'store'])}{r.randint(10, 999)}"
    names = s["person"].lower().split() if s.lang == "en" else []
    local = (r.choice([".".join(names), names[0]]) if names and r.random() < 0.6 else
             r.choice(["orders", "office", "info", "service", "purchase", "admin"]))
    return f"{local}@{domain}.{r.choice(['example', 'example.com', 'example.tw'])}"


def _eq(s: _Slots) -> str:
    """A linear equation with a whole-number solution."""
    r = s.rng
    x, a, c, b = r.randint(-9, 15), r.randint(2, 12), r.randint(1, 11), r.randint(-30, 30)
    a += a == c
    d = (a - c) * x + b
    side = lambda k, m: f"{k}x {'+' if m >= 0 else '-'} {abs(m)}"  # noqa: E731
    return r.choice([f"{side(a, b)} = {side(c, d)}", f"{a}(x - {abs(b)}) = {a * (x - abs(b))}"])


def _expr(s: _Slots) -> str:
    r = s.rng
    a, b, c, d = (r.randint(2, 60) for _ in range(4))
    return r.choice([f"({a} + {b}) × {c} − {d}", f"{a} × {b} + {c} × {d}", f"{a * c} ÷ {c} + {b}",
                     f"{a}² − {b}²", f"{a} − {b} × ({c} + {d})", f"{a}.{b} × {c}"])


def _items(s: _Slots, key: str = "_items", frame: str | None = None) -> list[str]:
    """One to four item lines of this prompt (drawn once per key), each from fresh slots."""
    if key not in s:
        frames = s.words[frame] if frame else s.tw["item"]
        s[key] = [s.child().fill(s.rng.choice(frames)) for _ in range(s.rng.choice([1, 1, 2, 2, 2, 3, 4]))]
    return s[key]


def _inline(s: _Slots, xs: list[str]) -> str:
    if s.lang == "zh":
        return "；".join(xs)
    sep = "; " if any("," in x for x in xs) else ", "
    return xs[0] if len(xs) == 1 else sep.join(xs[:-1]) + " and " + xs[-1]


def _bullets(s: _Slots, xs: list[str]) -> str:
    mark = s.rng.choice(["- ", "* ", "• ", "#. "])
    return "\n".join(mark.replace("#", str(j + 1)) + x for j, x in enumerate(xs))


def _invoice(s: _Slots) -> str:
    """An invoice whose lines, tax and total add up."""
    r, zh, rows, sub = s.rng, s.lang == "zh", [], 0
    table = r.random() < 0.5
    for _ in range(r.randint(1, 4)):
        qty = r.choice([r.randint(1, 20), r.randint(1, 20) * 10, r.randint(1, 10) * 100])
        qty = min(qty, s.tw.get("max_qty", [5000])[0])
        unit = _cents(s, *s.tw["unit_cents"])
        sub += qty * unit
        cells = (s.child()["product"], str(qty), _cur(s, unit), _cur(s, qty * unit))
        rows.append(" | ".join(cells) if table else f"{cells[1]} x {cells[0]} @ {cells[2]} = {cells[3]}")
    step = 100 if zh else 1  # NT$ invoices round tax to whole dollars
    tax = round(sub * int(s["tax"]) / 100 / step) * step
    if zh:
        head = f"發票號碼：{s['invoice_no']}\n日期：{s['date']}\n客戶：{s['customer']}\n"
        foot = f"小計：{_cur(s, sub)}\n營業稅 {s['tax']}%：{_cur(s, tax)}\n總計：{_cur(s, sub + tax)}"
        return head + ("品名 | 數量 | 單價 | 金額\n" if table else "") + "\n".join(rows) + "\n" + foot
    head = f"INVOICE {s['invoice_no']}\nDate: {s['date']}\nBill to: {s['customer']}\n"
    foot = (f"Subtotal: {_cur(s, sub)}\nTax ({s['tax']}%): {_cur(s, tax)}\nTotal due: {_cur(s, sub + tax)}\n"
            f"Payment within {s['days']} days.")
    return head + ("Item | Qty | Unit price | Amount\n" if table else "") + "\n".join(rows) + "\n" + foot


def _table(s: _Slots) -> str:
    """A small table (pipes, CSV or tabs) with columns from `table_cols` ("name:kind")."""
    r = s.rng
    cols = [c.split(":") for c in r.choice(s.words["table_cols"])]
    cell = {"code": lambda c: f"{r.choice('ABKMST')}{r.choice('ABCLPRT')}-{r.randint(1, 99):02d}",
            "qty": lambda c: str(r.randint(0, 400)), "price": lambda c: _cur(c, _cents(c, *c.tw["unit_cents"]))}
    rows = [[name for name, _ in cols]]
    for c in (s.child() for _ in range(r.randint(3, 6))):
        rows.append([cell[kind](c) if kind in cell else c[kind] for _, kind in cols])
    sep = r.choice([" | ", ",", "\t"])
    return "\n".join(sep.join(f'"{x}"' if sep == "," and "," in x else x for x in row) for row in rows)


def _tiers(s: _Slots) -> str:
    """Three quantity tiers with falling unit prices."""
    r, parts = s.rng, []
    q, cents = r.choice([50, 100, 200, 250, 500, 1000]), _cents(s, *s.tw["unit_cents"])
    for f in r.choice([(1, 2, 5), (1, 5, 10), (1, 2, 4), (1, 3, 10)]):
        parts.append(f"{_num(s, q * f)}{'個每個' if s.lang == 'zh' else ' at '}{_cur(s, cents)}")
        cents = max(1, round(cents * r.uniform(0.75, 0.92)))
        cents = max(100, cents // 100 * 100) if s.lang == "zh" else cents
    return _inline(s, parts)


def _sizes_mix(s: _Slots) -> str:
    r, sizes = s.rng, ["XS", "S", "M", "L", "XL", "2XL"]
    i = r.randint(0, 3)
    return ("、" if s.lang == "zh" else ", ").join(f"{r.randint(1, 20)} {z}" for z in sizes[i:i + r.randint(2, 4)])


def _nums(s: _Slots) -> str:
    """Order amounts for mean/median questions, sometimes with one outlier."""
    r = s.rng
    xs = [r.randint(5, 400) for _ in range(r.randint(5, 8))] + [r.randint(900, 5000)] * (r.random() < 0.4)
    return ", ".join(map(str, xs))


def _invoice_no(s: _Slots) -> str:
    r, letters = s.rng, "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return r.choice([f"INV-{r.randint(2025, 2027)}-{r.randint(1, 9999):04d}",  # or a Taiwanese e-invoice number
                     f"{r.choice(letters)}{r.choice(letters)}{r.randint(0, 99999999):08d}"])


def _typos(rng: random.Random, text: str) -> str:
    """One or two slips of the keyboard: two letters swapped, one dropped or doubled."""
    words = text.split(" ")
    spots = [j for j, w in enumerate(words) if len(w) >= 5 and w.isascii() and w.isalpha()]
    for j in rng.sample(spots, min(len(spots), rng.randint(1, 2))):
        w, k = words[j], rng.randrange(1, len(words[j]) - 1)
        words[j] = rng.choice([w[:k] + w[k + 1] + w[k] + w[k + 2:], w[:k] + w[k + 1:], w[:k] + w[k] + w[k:]])
    return " ".join(words)


def _pick(*values):  # a slot that is one of `values`, as text
    return lambda s: f"{s.rng.choice(values):g}" if isinstance(values[0], float) else str(s.rng.choice(values))


def _between(lo: int, hi: int, times: int = 1):  # a slot that is a whole number in [lo, hi], times `times`
    return lambda s: str(s.rng.randint(lo, hi) * times)


_GEN = {  # slot -> value; every other slot comes from the word lists
    "n": _qty, "m": _between(2, 60), "k": _pick(4, 5, 6, 8, 10, 12, 20, 24, 25, 30, 36, 48, 50, 100),
    "few_n": _between(2, 5), "a": lambda s: str(s.rng.randint(2, 40) * s.rng.choice([1, 2, 3, 4, 6, 12])),
    "b": lambda s: str(s.rng.randint(2, 40) * s.rng.choice([1, 2, 3, 4, 6, 12])),
    "x": lambda s: _num(s, s.rng.randint(120, 99999)), "prime": lambda s: str(s.rng.randrange(51, 999, 2)),
    "pct": _pick(2.5, 3.0, 4.0, 5.0, 6.0, 7.5, 8.0, 10.0, 12.0, 12.5, 15.0, 18.0, 20.0, 25.0, 30.0, 35.0, 40.0, 60.0),
    "tax": _pick(5, 5, 5, 6, 8, 10), "days": _between(3, 90), "w": _pick(30, 40, 50, 60, 80, 100, 120, 150),
    "dec": lambda s: f"{s.rng.uniform(0.2, 4.8):.{s.rng.choice([1, 1, 2])}f}",
    "hours": _pick(2.0, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 7.5, 8.0, 9.0, 10.0, 12.0),
    "len": _pick(20.0, 25.0, 30.0, 45.0, 50.0, 60.0, 75.0, 100.0, 45.7, 91.4), "rate": _between(3, 120, 5),
    "stars": _between(1, 5), "w_cm": _between(4, 60, 10), "h_cm": _between(4, 30, 10),
    "ratio": lambda s: f"{s.rng.randint(1, 5)}:{s.rng.randint(1, 7)}", "year": _pick(2025, 2026, 2027),
    "founded": _between(1985, 2019), "nums": _nums, "price": lambda s: f"{_cents(s, 5, 30000) / 100:g}",
    "money": lambda s: _money(s, *s.tw["unit_cents"]), "total": lambda s: _money(s, 20000, 50000000),
    "sqm_price": lambda s: _money(s, 300, 4000), "wage": lambda s: _money(s, 700, 4500),
    "postcode": lambda s: str(s.rng.randint(100, 983) if s.lang == "zh" or s.rng.random() < 0.5 else
                              s.rng.randint(10000, 99999)),
    "order_ref": lambda s: s.rng.choice(["#", "PO-", "SO-", "A", "WO-", "ORD"]) + str(s.rng.randint(100, 99999)),
    "invoice_no": _invoice_no, "first": lambda s: s["person"].split()[0] if s.lang == "en" else s["person"],
    "date": _date, "time": _time, "phone": _phone, "email": _email, "eq": _eq, "expr": _expr, "sizes_mix": _sizes_mix,
    "items": lambda s: _inline(s, _items(s)), "item_lines": lambda s: _bullets(s, _items(s)),
    "quote_lines": lambda s: _bullets(s, _items(s, "_quote", "quote_line")), "tiers": _tiers,
    "invoice_text": _invoice, "table_text": _table,
}
