"""Where a work order's answer tokens lie, by what could write them: the frontier of the grammar
and copy drafters (issue 52).

Each answer of a workorders run (`python -m bench workorders`: its baseline's result, as json.dumps writes it, which is
the model's habit: a blank after "," and ":"; items written again in a row are already removed
there, so a loop's tokens are not counted) is tokenized by the default model and each token is put
where its first byte lies:
  structure   keys, quotes, brackets and punctuation: the schema fixes them (the grammar drafter);
  copy        a copy field's value (`x-copy`): its first token chooses where the copy starts, the
              rest can come from the message (the copy drafter, once the start is unique);
  choice      an enum value, true, false or null: the first token chooses, the grammar may finish;
  number      digits;
  free        other strings (descriptions, units, notes): the model's own words.
The bound on what the grammar and copy drafters can write, without lookup or a draft model, is
structure plus every choice and copy token after a value's first.

    .venv/bin/python -m bench workorder_tokens [bench/out/workorders.json]
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench import lib
from bench.lib import OUT_DIR, Record
from engine.grammar import copy
from engine.llama.model import Model
from server.workorders.spans import value_spans
from server.workorders.templates import TemplateStore, load_file

KINDS = ("structure", "copy", "choice", "number", "free")


def enum_fields(schema: dict) -> set[str]:
    """Paths ("priority", "items[].unit") whose value is one of a list."""
    out: set[str] = set()
    defs = {f"#/$defs/{k}": v for k, v in schema.get("$defs", {}).items()}

    def visit(node, path: str) -> None:
        if not isinstance(node, dict):
            return
        if "$ref" in node and node["$ref"] in defs:
            visit(defs[node["$ref"]], path)
        if "enum" in node or "const" in node:
            out.add(path)
        for alt in node.get("anyOf", []) + node.get("oneOf", []):
            visit(alt, path)
        for name, sub in node.get("properties", {}).items():
            visit(sub, f"{path}.{name}" if path else name)
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{path}[]")

    visit(schema, "")
    return out


def kinds_of(text: str, copies: set[str], enums: set[str]) -> tuple[list[str], list[int]]:
    """Each character's kind, and where each value's first character is."""
    kind, firsts = ["structure"] * len(text), []
    for a, b, path in value_spans(text):
        pattern = re.sub(r"\[\d+\]", "[]", path)
        if text[a] == '"':
            a, b = a + 1, b - 1  # the quotes are the schema's
            what = "copy" if pattern in copies else "choice" if pattern in enums else "free"
        else:
            what = "number" if text[a] in "-0123456789" else "choice"
        kind[a:b] = [what] * (b - a)
        firsts.append(a)
    return kind, firsts


def add_arguments(ap) -> None:
    ap.add_argument("run", nargs="?", default=str(OUT_DIR / "workorders.json"), help="a workorders record")


def run(a) -> Record:
    data = json.loads(Path(a.run).read_text("utf-8"))
    name = data["template"]
    template = load_file(Path(name), "user") if name.endswith(".json") else TemplateStore(None).get(name)
    copies, enums = set(copy.fields(template.schema)), enum_fields(template.schema)
    path = lib.model_path(a.model)  # the tokenizer
    model = Model(path)
    count = dict.fromkeys(KINDS, 0)
    later = {"copy": 0, "choice": 0}  # tokens after a value's first
    try:
        for output in data["outputs"].values():
            if not isinstance(output, dict):
                continue  # not valid JSON: no spans
            text = json.dumps(output, ensure_ascii=False)
            kind, firsts = kinds_of(text, copies, enums)
            starts, at = set(firsts), 0
            raw = text.encode("utf-8")
            char_at = [i for i, ch in enumerate(text) for _ in ch.encode("utf-8")]  # byte -> character
            for tok in model.tokenize(text, add_bos=False, special=False):
                c = char_at[min(at, len(raw) - 1)]
                at += len(model.piece(tok))
                count[kind[c]] += 1
                if kind[c] in later and not (starts & set(range(c, char_at[min(at, len(raw)) - 1] + 1))):
                    later[kind[c]] += 1
    finally:
        model.close()
    total = sum(count.values())
    print(f"{name} at {data.get('commit')}: {len(data['outputs'])} answers, {total} tokens")
    for k in KINDS:
        print(f"  {k:10} {count[k] / total:6.1%}" + (f"  ({later[k] / total:.1%} after a value's first token)"
                                                     if k in later else ""))
    bound = count["structure"] + later["copy"] + later["choice"]
    print(f"grammar + copy bound (structure, and every copy or choice token after a value's first): "
          f"{bound / total:.1%}")
    return Record("workorder_tokens", {"run": a.run, "template": name, "run_commit": data.get("commit")},
                  figures={"tokens": total, "share": {k: count[k] / total for k in KINDS},
                           "after_first": {k: later[k] / total for k in later}, "grammar_copy_bound": bound / total},
                  model={"path": path})
