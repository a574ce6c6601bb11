"""The self-distillation prompt mix: built-in generator and the user's own files."""

import json
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from conftest import EVAL_DATA
from draft_training import prompts
from draft_training.prompts import CATEGORIES, MIX, builtin_prompts
from draft_training.user_prompts import DOC_CHUNK_CHARS, file_prompts

SLOT = re.compile(r"\{[a-z_]+[0-9]*\}")  # a slot left unfilled


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_builtin_mix_is_seeded_and_covers_every_use_in_both_languages():
    a, b = builtin_prompts(240, seed=7), builtin_prompts(240, seed=7)
    assert a == b and a != builtin_prompts(240, seed=8)
    assert {p["category"] for p in a} == set(CATEGORIES) and "json_extraction" in CATEGORIES
    for cat in CATEGORIES:
        langs = {p["lang"] for p in a if p["category"] == cat}
        assert langs == {"en", "zh"}, cat
    zh = [p for p in a if p["lang"] == "zh"]
    assert 0.2 < len(zh) / len(a) < 0.5
    assert all(_has_cjk(p["messages"][-1]["content"]) for p in zh)
    for p in a:
        roles = [m["role"] for m in p["messages"]]
        assert roles in (["user"], ["system", "user"], ["user", "assistant", "user"],
                         ["system", "user", "assistant", "user"])
        for m in p["messages"]:
            assert m["content"].strip() and not SLOT.search(m["content"]), m["content"]  # every slot filled
    assert len({p["id"] for p in a}) == len(a) and a[5]["id"] == "gen-7-5"
    assert len({p["messages"][-1]["content"] for p in a}) > 230  # varied, not a handful repeated


def test_builtin_mix_is_wide_and_keeps_its_shares():
    ps = builtin_prompts(12000, seed=0)
    texts = [p["messages"][-1]["content"] for p in ps]
    assert len(set(texts)) >= 10000
    cats = Counter(p["category"] for p in ps)
    for cat, w in zip(CATEGORIES, MIX):
        assert cats[cat] == 12000 * w // sum(MIX), cat
        for lang in ("en", "zh"):
            mine = [t for p, t in zip(ps, texts) if p["category"] == cat and p["lang"] == lang]
            assert len(set(mine)) > 0.6 * len(mine), (cat, lang)
    zh = [t for p, t in zip(ps, texts) if p["lang"] == "zh"]
    assert all(_has_cjk(t) for t in zh) and 0.3 < len(zh) / len(ps) < 0.4
    firsts = Counter(p["messages"][0]["role"] for p in ps)
    assert 0.15 < firsts["system"] / len(ps) < 0.25  # a system prompt sometimes
    assert any(p["lang"] == "zh" and p["messages"][0]["role"] == "system" and not _has_cjk(p["messages"][0]["content"])
               for p in ps)  # a system prompt in either language
    assert 0.02 < sum(len(p["messages"]) >= 3 for p in ps) / len(ps) < 0.1  # some second turns
    assert sum("\n" in t for t in texts) > 2000  # emails, notes, tables, code
    json_ex = [" ".join(m["content"] for m in p["messages"]) for p in ps if p["category"] == "json_extraction"]
    assert all("JSON" in t or "json" in t for t in json_ex)


def test_every_slot_a_template_names_can_be_filled():
    """Walk every string in prompt_words.json: each {slot} must come from a generator, a word
    list of the same language (trade lists in every trade) or a record field."""
    data = json.loads((Path(prompts.__file__).parent / "prompt_words.json").read_text("utf-8"))

    def strings(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from strings(v)
        elif isinstance(node, list):
            for v in node:
                yield from strings(v)

    for lang in ("en", "zh"):
        words, trades = data["words"][lang], data["trades"][lang].values()
        nodes = [words, *trades] + [data[k][c][lang] for k in ("templates", "tails", "system", "followups")
                                    for c in data[k] if lang in data[k][c]]
        for text in (t for node in nodes for t in strings(node)):
            for _, name, _, _ in string.Formatter().parse(text):  # raises on a stray brace
                if name is None:
                    continue
                base, head = name.rstrip("0123456789"), name.rpartition("_")[0]
                ok = (base in prompts._GEN or base in words or all(base in t for t in trades)
                      or (head in words
                          and all(isinstance(r, dict) and name[len(head) + 1:] in r for r in words[head])))
                assert ok, (lang, name, text[:80])


def test_dev_prompts_stay_unseen():
    """No dev text is generated, and no 30-character (12 for Chinese) piece of one either."""
    dev = []
    for name in ("prompts-dev.jsonl", "workorders-dev.jsonl"):
        for line in (EVAL_DATA / name).read_text("utf-8").splitlines():
            obj = json.loads(line)
            dev += [m["content"] for m in obj.get("messages", [])] + ([obj["text"]] if "text" in obj else [])
    grams = {n: set() for n in (12, 30)}
    for t in dev:
        n = 12 if _has_cjk(t) else 30
        grams[n] |= {t[i:i + n] for i in range(len(t) - n + 1)}
    dev_set = set(dev)
    for p in builtin_prompts(12000, seed=0):
        for m in p["messages"]:
            t = m["content"]
            assert t not in dev_set
            for n, seen in grams.items():
                hit = next((t[i:i + n] for i in range(len(t) - n + 1) if t[i:i + n] in seen), None)
                assert hit is None, (p["id"], hit)


def test_user_files_lines_jsonl_and_documents(tmp_path):
    lines = tmp_path / "messages.txt"
    lines.write_text("Please send 200 flyers by Monday.\n\n請問名片可以週五前做好嗎？\n", "utf-8")
    jl = tmp_path / "orders.jsonl"
    jl.write_text("\n".join([json.dumps("a plain prompt"), json.dumps({"prompt": "quote 50 mugs"}),
                             json.dumps({"id": "x1", "messages": [{"role": "system", "content": "Be brief."},
                                                                  {"role": "user", "content": "hi"}]})]), "utf-8")
    doc = tmp_path / "handbook.md"
    doc.write_text("\n\n".join(f"Paragraph {i}. " + "Safety first in the workshop. " * 12 for i in range(12)), "utf-8")
    got = file_prompts([lines, jl, doc])
    texts = [p["messages"][-1]["content"] for p in got]
    assert texts[:2] == ["Please send 200 flyers by Monday.", "請問名片可以週五前做好嗎？"]
    assert texts[2:4] == ["a plain prompt", "quote 50 mugs"] and got[4]["id"] == "x1" and len(got[4]["messages"]) == 2
    docs = [t for t in texts[5:]]
    assert docs and len(docs) % 2 == 0 and all(t.startswith(("Summarise", "Continue")) for t in docs)
    assert all(len(t) < 2 * DOC_CHUNK_CHARS + 200 for t in docs)
    assert "Paragraph 11." in "".join(docs)  # nothing of the document is lost


def test_bad_user_files_are_refused_clearly(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n', "utf-8")
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        file_prompts([bad])
    shape = tmp_path / "shape.jsonl"
    shape.write_text('{"messages": [{"role": "robot", "content": "x"}]}\n', "utf-8")
    with pytest.raises(ValueError, match="shape.jsonl:1: expected"):
        file_prompts([shape])
    with pytest.raises(ValueError, match="cannot read prompt file"):
        file_prompts([tmp_path / "missing.txt"])
