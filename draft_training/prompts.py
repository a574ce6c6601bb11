"""The prompt mix a draft is trained on: what the target will be asked in a shop.

What it is: a seeded generator of chat prompts for self-distillation (the target answers
them, and those answers are the draft's training data), covering the product's uses in
English and Traditional Chinese — work orders, customer messages, quotes, general chat,
arithmetic, short code — plus the user's own prompt and document files, which make a
draft that fits their shop. What it is not: the answers (the target writes them, in
draft_training/data.py) or any model code.

Every prompt is `{"id", "category", "lang", "messages"}` with OpenAI-style messages.
The same seed gives the same prompts on every machine.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

CATEGORIES = ("work_order", "customer_message", "quote", "chat", "arithmetic", "code")
MAX_FILE_BYTES = 8 << 20  # a user file larger than this is read only this far
DOC_CHUNK_CHARS = 1200  # documents are cut into pieces of about this many characters

# Slot values, one list per language; templates below pick from them.
WORDS = {
    "en": {
        "customer": ["Chen Printing", "Lin Metalworks", "Harbor Cafe", "Wang & Sons", "Sunrise Clinic",
                     "Blue Mountain School", "Kaohsiung Tools", "Maple Bakery"],
        "product": ["business cards", "A4 flyers", "vinyl banners", "stainless brackets", "aluminium panels",
                    "paper bags", "stickers", "acrylic signs", "M6 bolts", "laser-cut gaskets"],
        "spec": ["350 gsm matte", "full colour both sides", "2 mm thick", "brushed finish", "with logo",
                 "die-cut round", "UV coated", "powder-coated black"],
        "when": ["by Friday", "next Tuesday", "before the 15th", "within two weeks", "tomorrow morning",
                 "end of the month"],
        "issue": ["the colours were too dark", "three boxes arrived damaged", "the size is wrong",
                  "the invoice amount does not match", "the delivery was two days late", "some holes are misaligned"],
        "topic": ["how to keep a small workshop organised", "tips for writing a polite reminder email",
                  "what to check before sending a file to print", "how to plan a week of production",
                  "ways to reduce paper waste", "how to explain a price increase to a customer"],
        "task": ["reverses a string", "sums a list of prices", "checks whether a date is a weekday",
                 "counts words in a text", "converts millimetres to inches", "finds the largest order"],
        "lang_code": ["Python", "JavaScript", "SQL"],
    },
    "zh": {
        "customer": ["陳記印刷", "林氏金屬", "港灣咖啡", "王家五金", "晨光診所", "青山國小", "高雄工具行", "楓葉烘焙"],
        "product": ["名片", "A4 傳單", "帆布布條", "不鏽鋼支架", "鋁板", "紙袋", "貼紙", "壓克力招牌", "M6 螺絲", "雷射切割墊片"],
        "spec": ["350磅霧面", "雙面彩色", "厚度2公釐", "髮絲紋處理", "印上標誌", "圓形模切", "上亮光", "黑色烤漆"],
        "when": ["週五前", "下週二", "15號以前", "兩週內", "明天早上", "月底前"],
        "issue": ["顏色印得太深", "有三箱送到時破損", "尺寸不對", "發票金額不符", "晚了兩天才送到", "有些孔位沒對齊"],
        "topic": ["小工廠怎麼整理環境", "怎麼寫一封客氣的催款信", "送印前要檢查哪些地方", "如何安排一週的生產",
                  "怎麼減少紙張浪費", "怎麼跟客戶說明漲價"],
        "task": ["反轉字串", "加總價格清單", "判斷日期是不是平日", "計算文字的字數", "把公釐換成英寸", "找出最大的訂單"],
        "lang_code": ["Python", "JavaScript", "SQL"],
    },
}

TEMPLATES = {
    "work_order": {
        "en": ["Turn this order into a work order with customer, items, quantities and due date: "
               "{customer} needs {n} {product}, {spec}, {when}.",
               "New order from {customer}: {n} {product} ({spec}) and {m} {product2}. Deliver {when}. "
               "List the production steps.",
               "Write a short job ticket for the workshop: {n} pcs {product}, {spec}, customer {customer}, due {when}."],
        "zh": ["請把這張訂單整理成工單，包含客戶、品項、數量和交期：{customer}要{n}份{product}，{spec}，{when}交貨。",
               "{customer}的新訂單：{product}{n}個（{spec}），另外{product2}{m}個，{when}送達。請列出生產步驟。",
               "幫現場寫一張簡短的工作單：{product}{n}件，{spec}，客戶{customer}，{when}完成。"],
    },
    "customer_message": {
        "en": ["A customer ({customer}) wrote: \"{issue}.\" Write a polite reply that apologises and offers a fix.",
               "Summarise this message in one sentence and say what the customer wants: "
               "\"Hello, this is {customer}. About our order of {n} {product}: {issue}. Please call us.\"",
               "Reply to {customer}, who asks whether {n} {product} can be ready {when}."],
        "zh": ["客戶（{customer}）來信說：「{issue}。」請寫一封有禮貌的回信，道歉並提出解決辦法。",
               "用一句話摘要這則訊息，並說明客戶要什麼：「您好，我是{customer}，我們訂的{product}{n}個，{issue}，請回電。」",
               "回覆{customer}：他們想知道{product}{n}個能不能在{when}做好。"],
    },
    "quote": {
        "en": ["Prepare a price quote for {customer}: {n} {product} at {price} each and {m} {product2} at "
               "{price2} each, 5% tax. Show the total.",
               "Write a short quote email for {n} {product}, {spec}, unit price {price}, valid for 30 days."],
        "zh": ["幫{customer}做報價：{product}{n}個，每個{price}元；{product2}{m}個，每個{price2}元，另加5%稅，請算出總價。",
               "寫一封簡短的報價信：{product}{n}個，{spec}，單價{price}元，報價30天內有效。"],
    },
    "chat": {
        "en": ["Give me three practical tips on {topic}.", "Explain briefly: {topic}.",
               "I run a small shop. What should I know about {topic}?"],
        "zh": ["請給我三個關於{topic}的實用建議。", "簡單說明：{topic}。", "我開一間小店，關於{topic}我應該知道什麼？"],
    },
    "arithmetic": {
        "en": ["What is {a} + {b}?", "A box holds {k} {product}. How many boxes for {n} of them?",
               "{n} {product} cost {price} each. What is the total?", "What is {a} times {k}?"],
        "zh": ["{a} 加 {b} 等於多少？", "一箱可以裝{k}個{product}，{n}個需要幾箱？", "{product}每個{price}元，{n}個總共多少錢？",
               "{a} 乘以 {k} 是多少？"],
    },
    "code": {
        "en": ["Write a short {lang_code} function that {task}.", "Show a {lang_code} example that {task}, with a comment."],
        "zh": ["用{lang_code}寫一個簡短的函式，功能是{task}。", "給一個{lang_code}範例，功能是{task}，加上註解。"],
    },
}


def builtin_prompts(n: int, seed: int = 0, zh_share: float = 0.35) -> list[dict]:
    """`n` prompts, categories in turn, a `zh_share` of them in Traditional Chinese."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cat = CATEGORIES[i % len(CATEGORIES)]
        lang = "zh" if rng.random() < zh_share else "en"
        words = WORDS[lang]
        pick = {k: rng.choice(v) for k, v in words.items()}
        pick["product2"] = rng.choice([p for p in words["product"] if p != pick["product"]])
        pick |= {"n": rng.choice([20, 50, 100, 250, 500, 1000, 1200]), "m": rng.randint(2, 60),
                 "k": rng.choice([6, 12, 24, 25, 50]), "a": rng.randint(2, 999), "b": rng.randint(2, 999),
                 "price": rng.choice([3, 12, 45, 80, 150, 1200]), "price2": rng.choice([5, 20, 60, 300])}
        text = rng.choice(TEMPLATES[cat][lang]).format(**pick)
        out.append({"id": f"gen-{seed}-{i}", "category": cat, "lang": lang,
                    "messages": [{"role": "user", "content": text}]})
    return out


def file_prompts(paths: list[str | Path]) -> list[dict]:
    """Prompts from the user's files. A `.jsonl` file holds one prompt per line (a string,
    or an object with `messages` or `prompt`); any other file is text: a file of short
    lines is one prompt per line, a document is cut into pieces that the target is asked
    to summarise and to continue (the shop's own words in its answers)."""
    out: list[dict] = []
    for path in paths:
        p = Path(path)
        try:
            with p.open("rb") as f:
                raw = f.read(MAX_FILE_BYTES)
        except OSError as e:
            raise ValueError(f"cannot read prompt file {p}: {e.strerror or e}") from None
        text = raw.decode("utf-8", errors="replace")
        stem = p.stem
        if p.suffix.lower() == ".jsonl":
            for j, line in enumerate(text.splitlines()):
                if line.strip():
                    out.append(_jsonl_prompt(line, f"{stem}-{j}", p, j + 1))
            continue
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if lines and max(len(ln) for ln in lines) <= 300:  # a list of messages or questions
            out += [_user(f"{stem}-{j}", ln) for j, ln in enumerate(lines)]
            continue
        for j, chunk in enumerate(_chunks(text)):
            out.append(_user(f"{stem}-s{j}", f"Summarise this text in a few sentences:\n\n{chunk}"))
            out.append(_user(f"{stem}-c{j}", f"Continue this text in the same style:\n\n{chunk}"))
    return out


def _user(pid: str, content: str) -> dict:
    return {"id": pid, "category": "user_file", "lang": "", "messages": [{"role": "user", "content": content}]}


def _jsonl_prompt(line: str, pid: str, path: Path, lineno: int) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not JSON ({e.msg})") from None
    if isinstance(obj, str):
        return _user(pid, obj)
    if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
        return _user(pid, obj["prompt"])
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    if (isinstance(msgs, list) and msgs
            and all(isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") in
                    ("system", "user", "assistant") for m in msgs)):
        return {"id": str(obj.get("id", pid)), "category": "user_file", "lang": "", "messages": msgs}
    raise ValueError(f"{path}:{lineno}: expected a string, {{\"prompt\": ...}} or {{\"messages\": [...]}}")


def _chunks(text: str) -> list[str]:
    """Paragraph-aligned pieces of about DOC_CHUNK_CHARS characters."""
    pieces, cur = [], ""
    for para in (p.strip() for p in text.split("\n\n")):
        if not para:
            continue
        while len(para) > DOC_CHUNK_CHARS:  # one huge paragraph: cut it
            pieces.append((cur + "\n\n" + para[:DOC_CHUNK_CHARS]).strip())
            cur, para = "", para[DOC_CHUNK_CHARS:]
        if len(cur) + len(para) > DOC_CHUNK_CHARS and cur:
            pieces.append(cur)
            cur = para
        else:
            cur = (cur + "\n\n" + para).strip()
    if cur:
        pieces.append(cur)
    return pieces
