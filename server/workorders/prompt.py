"""The extraction prompt: the template's instructions, a field guide written from the schema's
descriptions, and the message with its sent date (relative dates need it).

Not the grammar (the schema constrains the answer whatever the prompt says) nor the checks.
"""

from __future__ import annotations

import datetime as dt

LANGUAGES = {"en": "English", "zh-TW": "Traditional Chinese", "zh": "Chinese", "mixed": "Chinese and English mixed"}


def field_guide(schema: dict, prefix: str = "") -> list[str]:
    """One line per property, nested ones as parent[].child, from the schema's descriptions."""
    lines = []
    defs = schema.get("$defs", {})
    for name, sub in schema.get("properties", {}).items():
        sub = _resolve(sub, defs)
        path = f"{prefix}{name}"
        text = sub.get("description", "").strip()
        choices = sub.get("enum")
        if choices:
            text += (" " if text else "") + "One of: " + ", ".join(str(c) for c in choices) + "."
        lines.append(f"- {path}: {text}" if text else f"- {path}")
        items = _resolve(sub.get("items", {}), defs) if isinstance(sub.get("items"), dict) else {}
        if items.get("properties"):
            lines += field_guide({**items, "$defs": defs}, prefix=f"{path}[].")
    return lines


def _resolve(node: dict, defs: dict) -> dict:
    ref = node.get("$ref", "") if isinstance(node, dict) else ""
    if ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), {})
    return node if isinstance(node, dict) else {}


def messages(template, text: str, sent: dt.date, language: str | None = None) -> list[dict]:
    system = "\n".join([template.instructions.strip(), "", "Fields:", *field_guide(template.schema), "",
                        "Answer with one JSON object and nothing else."])
    head = f"Sent: {sent.isoformat()} ({sent.strftime('%A')})"
    if language:
        head += f"\nLanguage: {LANGUAGES.get(language, language)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{head}\n\n{text.strip()}"}]
