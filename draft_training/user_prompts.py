"""The user's own prompt and document files as training prompts: what makes a draft that fits
their shop (`flashdesk train-draft --prompts FILE ...`).

What it is: `file_prompts()`. A `.jsonl` file holds one prompt per line; any other file is
text: short lines are one prompt each, a document is cut into paragraph-aligned pieces the
target is asked to summarise and to continue. Prompts have the shape of the built-in ones
(`{"id", "category", "lang", "messages"}`, category "user_file").

What it is not: the built-in prompt mix (prompts.py) or the prompts the target writes itself
(self_prompts.py); the answers are capture.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_FILE_BYTES = 8 << 20  # a user file larger than this is read only this far
DOC_CHUNK_CHARS = 1200  # documents are cut into pieces of about this many characters


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
