"""The extraction prompt: the template's instructions, a field guide written from the schema's
descriptions, and the message with its sent date (relative dates need it).

Not the grammar (the schema constrains the answer whatever the prompt says) nor the checks.
"""

from __future__ import annotations

import datetime as dt
import json

LANGUAGES = {"en": "English", "zh-TW": "Traditional Chinese", "zh": "Chinese", "mixed": "Chinese and English mixed"}


def field_guide(schema: dict, prefix: str = "", brief: bool = False) -> list[str]:
    """One line per property, nested ones as parent[].child, from the schema's descriptions
    (`brief`: their first sentence only)."""
    lines = []
    defs = schema.get("$defs", {})
    for name, sub in schema.get("properties", {}).items():
        sub = _resolve(sub, defs)
        path = f"{prefix}{name}"
        text = sub.get("description", "").strip()
        if brief and ". " in text:
            text = text[:text.index(". ") + 1]
        choices = sub.get("enum")
        if choices:
            text += (" " if text else "") + "One of: " + ", ".join(str(c) for c in choices) + "."
        lines.append(f"- {path}: {text}" if text else f"- {path}")
        items = _resolve(sub.get("items", {}), defs) if isinstance(sub.get("items"), dict) else {}
        if items.get("properties"):
            lines += field_guide({**items, "$defs": defs}, prefix=f"{path}[].", brief=brief)
    return lines


def _resolve(node: dict, defs: dict) -> dict:
    ref = node.get("$ref", "") if isinstance(node, dict) else ""
    if ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), {})
    return node if isinstance(node, dict) else {}


def messages(template, text: str, sent: dt.date, language: str | None = None) -> list[dict]:
    """System: instructions and field guide; then each worked example as a user and an
    assistant turn (small models copy a format far better than they follow rules); then the
    message. Everything before the message is the same for every request: its KV is reused."""
    guide = field_guide(template.schema, brief=template.guide == "brief")
    system = "\n".join([template.instructions.strip(), "", "Fields:", *guide, "",
                        "Answer with one JSON object and nothing else."])
    out = [{"role": "system", "content": system}]
    for ex in template.examples:
        out += [{"role": "user", "content": _turn(ex["text"], dt.date.fromisoformat(ex["sent_date"]), None)},
                {"role": "assistant", "content": json.dumps(ex["output"], ensure_ascii=False)}]
    return out + [{"role": "user", "content": _turn(text, sent, language)}]


def _turn(text: str, sent: dt.date, language: str | None) -> str:
    head = f"Sent: {sent.isoformat()} ({sent.strftime('%A')})"
    if language:
        head += f"\nLanguage: {LANGUAGES.get(language, language)}"
    return f"{head}\n\n{text.strip()}"
