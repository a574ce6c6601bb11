"""The self-distillation prompt mix: built-in generator and the user's own files."""

import json

import pytest

from draft_training.prompts import CATEGORIES, DOC_CHUNK_CHARS, builtin_prompts, file_prompts


def test_builtin_mix_is_seeded_and_covers_every_use_in_both_languages():
    a, b = builtin_prompts(240, seed=7), builtin_prompts(240, seed=7)
    assert a == b and a != builtin_prompts(240, seed=8)
    assert {p["category"] for p in a} == set(CATEGORIES)
    for cat in CATEGORIES:
        langs = {p["lang"] for p in a if p["category"] == cat}
        assert langs == {"en", "zh"}, cat
    zh = [p for p in a if p["lang"] == "zh"]
    assert 0.2 < len(zh) / len(a) < 0.5
    assert all(any("\u4e00" <= ch <= "\u9fff" for ch in p["messages"][0]["content"]) for p in zh)
    for p in a:
        text = p["messages"][0]["content"]
        assert p["messages"][0]["role"] == "user" and "{" not in text and "}" not in text  # every slot filled
    assert len({p["id"] for p in a}) == len(a)
    assert len({p["messages"][0]["content"] for p in a}) > 200  # varied, not a handful repeated


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
