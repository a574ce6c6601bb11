"""Self-written prompts (Magpie-style): the target writes the user turns it is then asked.

What it is: `self_prompts()` feeds the target only the chat template's text up to where a
user's message would start (the "pre-query": whatever the template puts before the user's
content, its default system prompt included) and samples until the end of the turn. The
text it writes is a user message in the target's own distribution, which is what matters
for draft acceptance (docs/training.md). A `zh_share` of the turns
start with a short Traditional-Chinese opener so the target continues in Chinese. Turns
that are too short, loop, repeat an earlier one, hold non-printable text or control tokens,
or do not end within `max_tokens` are dropped. Many turns are sampled per decode; each
attempt has its own seeded generator and the results are kept in attempt order, so a seed
gives the same prompts on every machine whatever the batching.

Measured on SmolLM2-135M (2 cores): English turns are plausible; its Chinese turns are
mostly noise even at T 0.7 / top-p 0.9 and rarely pass the filters (1 of ~30 attempts kept),
so asking for a zh share from it mostly costs attempts.

The pre-query is derived from the template itself: render a one-user-message conversation
whose content is a sentinel and cut at the sentinel. No template is written out here.

What it is not: the answers (capture.py captures them like any prompt) or the built-in
generator (prompts.py, whose prompt shape this returns: {"id", "category": "self", "lang",
"messages": [{"role": "user", "content"}]}).
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from engine.llama.chat_template import ChatTemplate
from engine.llama.context import Context, ContextConfig
from engine.llama.model import Model

from .capture import looping

SENTINEL = "\u2063SELF-PROMPT\u2063"  # content no real message has; the cut point
ZH_OPENERS = ("請幫我", "請問", "我想請問", "可以幫我寫一封", "幫我整理", "請用繁體中文", "我們公司", "客戶問",
              "麻煩你", "老闆要我", "有沒有辦法", "怎麼")
# A 135M target's tail at T 1 is noise, and its Chinese worse: nucleus sampling, Chinese cooler
TOP_P = 0.9
ZH_TEMPERATURE = 0.7
MIN_CHARS = {"en": 16, "zh": 6}  # shorter turns are dropped (zh: characters beyond the opener)
MAX_ATTEMPTS_PER_PROMPT = 8  # give up after n * this many attempts (a target that never ends its turns)
CJK = re.compile(r"[\u4e00-\u9fff]")


def pre_query(template: ChatTemplate) -> str:
    """The rendered text before a user message's content, for this template."""
    text = template.render([{"role": "user", "content": SENTINEL}])
    if SENTINEL not in text:
        raise ValueError("the chat template does not show the user's message verbatim: no pre-query to cut")
    return text[:text.index(SENTINEL)]


def self_prompts(target_path: str, n: int, *, seed: int = 0, zh_share: float = 0.35, chat_template_vars=None,
                 n_threads: int = 2, n_seq: int = 16, temperature: float = 1.0, max_tokens: int = 96,
                 progress=None, top_p: float = TOP_P, zh_temperature: float = ZH_TEMPERATURE) -> list[dict]:
    """`n` user turns written by the target (fewer only if it keeps failing the filters);
    `progress(n_kept)` after every decode."""
    if n <= 0:
        return []
    model = Model(target_path)
    try:
        head = pre_query(ChatTemplate(model, chat_template_vars))
        temps = {"en": temperature, "zh": zh_temperature}
        texts = _sample_turns(model, head, n, seed, zh_share, n_threads, n_seq, temps, top_p, max_tokens, progress)
    finally:
        model.close()
    return [{"id": f"self-{seed}-{i}", "category": "self", "lang": lang, "messages": [{"role": "user", "content": t}]}
            for i, (lang, t) in enumerate(texts[:n])]


class _Attempt:
    def __init__(self, i: int, seed: int, zh_share: float, head_tokens: list[int], model: Model):
        self.i = i
        self.rng = np.random.default_rng([seed, i])
        self.lang = "zh" if self.rng.random() < zh_share else "en"
        self.opener = ZH_OPENERS[int(self.rng.integers(len(ZH_OPENERS)))] if self.lang == "zh" else ""
        # the opener is tokenized on its own and appended: the head's tokens stay as the template makes them
        self.tokens = head_tokens + (model.tokenize(self.opener, add_bos=False, special=False) if self.opener else [])
        self.n_head = len(self.tokens)
        self.n_done = 0
        self.ended = False  # the target ended its turn


def _sample_turns(model: Model, head: str, n: int, seed: int, zh_share: float, n_threads: int, n_seq: int,
                  temps: dict, top_p: float, max_tokens: int, progress) -> list[tuple[str, str]]:
    head_tokens = model.tokenize(head)
    ctx = Context(model, ContextConfig(n_ctx_seq=len(head_tokens) + max_tokens + 16, n_seq=n_seq, n_batch=512,
                                       n_threads=n_threads))
    slots: list[_Attempt | None] = [None] * n_seq
    finished: dict[int, tuple[str, str] | None] = {}  # attempt -> (lang, text), None = dropped
    launched, seen = 0, set()  # seen: the distinct texts kept so far

    try:
        while True:
            for i in range(n_seq):
                if slots[i] is None and len(seen) < n and launched < n * MAX_ATTEMPTS_PER_PROMPT:
                    slots[i] = _Attempt(launched, seed, zh_share, head_tokens, model)
                    launched += 1
            if all(s is None for s in slots):
                break
            ctx.batch.clear()
            rows = []  # (slot, batch row of its logits)
            for i, s in sorted(enumerate(slots), key=lambda x: x[1] is None or x[1].n_done < x[1].n_head):
                if s is None or ctx.batch.room == 0:
                    continue  # sampling sequences first (one token each), then prefill chunks
                m = min(ctx.batch.room, len(s.tokens) - s.n_done)
                for j in range(m):
                    row = ctx.batch.add(s.tokens[s.n_done + j], s.n_done + j, i, s.n_done + j == len(s.tokens) - 1)
                s.n_done += m
                if s.n_done == len(s.tokens):
                    rows.append((i, row))
            ctx.decode(ctx.batch)
            logits = ctx.logits([r for _, r in rows]) if rows else []  # [len(rows), V]
            for (i, _), lg in zip(rows, logits):
                s = slots[i]
                tok = nucleus_token(lg, temps[s.lang], top_p, s.rng)
                if model.is_eog(tok):
                    s.ended = True
                else:
                    s.tokens.append(tok)
                if s.ended or len(s.tokens) - s.n_head >= max_tokens:
                    finished[s.i] = _judge(model, s)
                    if finished[s.i] is not None:
                        seen.add(_norm(finished[s.i][1]))
                    ctx.forget(i)
                    slots[i] = None
            if progress is not None:
                progress(len(seen))
    finally:
        ctx.close()
    # duplicates dropped in attempt order, not finishing order: every attempt before the n-th
    # distinct text has finished, so the first n are the same whatever the batching
    out, firsts = [], set()
    for i in sorted(finished):
        if finished[i] is not None and _norm(finished[i][1]) not in firsts:
            firsts.add(_norm(finished[i][1]))
            out.append(finished[i])
    return out


def nucleus_token(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token from the smallest set of most likely tokens holding top_p of softmax(logits / T)."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    order = np.argsort(-p, kind="stable")
    c = np.cumsum(p[order])
    keep = int(np.searchsorted(c, top_p * c[-1])) + 1  # [0, keep) of order hold top_p of the mass
    return int(order[min(int(np.searchsorted(c[:keep], rng.random() * c[keep - 1], side="right")), keep - 1)])


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _judge(model: Model, s: _Attempt) -> tuple[str, str] | None:
    """(lang, text) of a finished attempt, or None where a filter drops it (duplicates aside)."""
    gen = s.tokens[s.n_head:]
    if not s.ended or looping(gen, 8, 3, 12):
        return None
    if any(model.piece(t) == b"" for t in gen):  # a control token (a new turn header) inside the turn
        return None
    body = model.detokenize(gen)
    text = (s.opener + body).strip()
    if len(body.strip()) < MIN_CHARS[s.lang] or not _printable(text):
        return None
    if s.lang == "zh" and len(CJK.findall(body)) < MIN_CHARS["zh"]:
        return None  # the target left Chinese after the opener
    return s.lang, text


def _printable(text: str) -> bool:
    return "\ufffd" not in text and all(c in "\n\t" or unicodedata.category(c)[0] != "C" for c in text)

