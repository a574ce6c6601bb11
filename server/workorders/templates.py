"""Work-order templates: a JSON Schema (whose descriptions become the extraction prompt), the
model's instructions and the business fields a person must see filled, as data files.

Built-in templates ship in `builtin/`; a user adds one by dropping `<name>.json` into
`<home>/templates/` (a user file with a built-in's name replaces it). A file that does not
load (bad JSON, unknown keys, a schema the grammar cannot enforce) is listed with its error
instead of stopping the server. Not the prompt (prompt.py) nor the checks (review.py).

File format: {"name", "title", "description", "instructions", "schema", "review": {"required": [...]},
"guide": "full" | "brief", "examples": [{"text", "sent_date", "output"}], "date_field": "due_date"}
where review.required
holds field paths such as "due_date" or "items[].quantity", guide says whether the prompt
quotes the schema's descriptions whole or their first sentences, and each example's output
must be valid under the schema (it is shown to the model as a worked answer). date_field names a
top-level date property that dates.py fills from the message's own date words (the model's
arithmetic on "next Friday" is unreliable).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError, InvalidRequest
from engine.grammar import copy
from engine.grammar.schema import Constraint, compile_response_format

from .spans import copy_values

BUILTIN = Path(__file__).parent / "builtin"
NAME_RE = re.compile(r"[a-z0-9_][a-z0-9_-]{0,63}")
KEYS = {"name", "title", "description", "instructions", "schema", "review", "guide", "examples", "date_field"}
DEFAULT_INSTRUCTIONS = ("You turn one customer message into JSON for a small shop. Copy names, numbers and "
                        "descriptions from the message as written, in the message's language. Resolve relative "
                        "dates against the sent date. Use null for anything the message does not say.")


@dataclass
class Template:
    name: str
    title: str
    description: str
    instructions: str
    schema: dict
    required: list[str] = field(default_factory=list)  # business fields a person must see filled
    source: str = "builtin"  # "builtin" | "user" | "request"
    constraint: Constraint | None = None
    guide: str = "full"  # "full" | "brief": how much of each description the prompt quotes
    examples: list[dict] = field(default_factory=list)  # {"text", "sent_date", "output"}
    date_field: str | None = None  # a top-level date property resolved from the message (dates.py)

    @property
    def compiled(self) -> Constraint:
        """`constraint`, which every Template handed out here has (from_schema and load_file compile it)."""
        assert self.constraint is not None, f"template {self.name!r} was not compiled"
        return self.constraint

    def summary(self) -> dict:
        return {"name": self.name, "title": self.title, "description": self.description, "source": self.source,
                "fields": list(self.schema.get("properties", {})), "review_required": self.required}

    def detail(self) -> dict:
        return self.summary() | {"instructions": self.instructions, "schema": self.schema}


def from_schema(schema, instructions: str | None = None) -> Template:
    """A request's own `schema`: checked and compiled like a template file's (400 when refused)."""
    if not isinstance(schema, dict):
        raise InvalidRequest("schema must be a JSON Schema object", param="schema")
    t = Template("custom", schema.get("title", "Custom schema"), schema.get("description", ""),
                 instructions or DEFAULT_INSTRUCTIONS, schema, source="request")
    t.constraint = _compile(t, param="schema")
    return t


def load_file(path: Path, source: str) -> Template:
    """One template file -> Template; ValueError saying what is wrong with it."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not a readable JSON file: {e}") from None
    if not isinstance(data, dict):
        raise ValueError("a template file holds one JSON object")
    unknown = set(data) - KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; allowed: {sorted(KEYS)}")
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name != path.stem:
        raise ValueError(f"name {name!r} must be lower-case letters, digits, _ or - and match the file name")
    required = (data.get("review") or {}).get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError('review.required must be a list of field paths such as "items[].quantity"')
    texts = {k: data.get(k, "") for k in ("title", "description", "instructions")}
    if not all(isinstance(v, str) for v in texts.values()):
        raise ValueError("title, description and instructions must be strings")
    t = Template(name, texts["title"] or name, texts["description"], texts["instructions"] or DEFAULT_INSTRUCTIONS,
                 data.get("schema") or {}, required, source, guide=data.get("guide", "full"),
                 examples=data.get("examples", []), date_field=data.get("date_field"))
    if t.guide not in ("full", "brief"):
        raise ValueError('guide must be "full" or "brief"')
    if t.date_field is not None and t.date_field not in (t.schema or {}).get("properties", {}):
        raise ValueError(f"date_field {t.date_field!r} is not a property of the schema")
    try:
        t.constraint = _compile(t, param="schema")
    except EngineError as e:
        raise ValueError(e.message) from None
    for i, ex in enumerate(t.examples if isinstance(t.examples, list) else [None]):
        problems = _example_problems(ex, t.constraint)
        if problems:
            raise ValueError(f"examples[{i}]: {problems}")
    return t


def _example_problems(ex, constraint: Constraint) -> str:
    if not isinstance(ex, dict) or set(ex) != {"text", "sent_date", "output"} or not isinstance(ex["text"], str):
        return 'an example is {"text": "...", "sent_date": "YYYY-MM-DD", "output": {...}}'
    try:
        dt.date.fromisoformat(ex["sent_date"])
    except (TypeError, ValueError):
        return f"sent_date {ex['sent_date']!r} is not YYYY-MM-DD"
    errors = constraint.validate(json.dumps(ex["output"]))
    if errors:
        return f"output does not match the schema: {errors[0]}"
    assert constraint.schema is not None  # a json_schema constraint keeps its schema
    for path, spec, value in copy_values(ex["output"], copy.fields(constraint.schema)):
        if (value not in copy.numbers([ex["text"]]) if isinstance(value, int)
                else any(part not in ex["text"] for part in spec.parts(value))):  # the model learns to copy them
            return f"output's {path} {value!r} is an {copy.KEYWORD} field, and it is not copied from the text"
    return ""


def _compile(t: Template, param: str) -> Constraint:
    if not isinstance(t.schema, dict) or t.schema.get("type") != "object":
        raise InvalidRequest('the schema must describe an object ("type": "object")', param=param)
    try:
        compiled = compile_response_format({"type": "json_schema",
                                            "json_schema": {"name": "workorder", "schema": t.schema}})
    except InvalidRequest as e:
        raise InvalidRequest(e.message.replace("response_format.json_schema.schema", param), param=param) from None
    assert compiled is not None  # a json_schema response_format always compiles to a Constraint
    return compiled


class TemplateStore:
    """Built-in templates plus the user's folder, read again when a file changes."""

    def __init__(self, user_dir: Path | None):
        self.user_dir = user_dir
        self._cache: dict[Path, tuple[float, Template | str]] = {}

    def _load(self, path: Path, source: str) -> Template | str:
        try:
            mtime = path.stat().st_mtime
        except OSError as e:
            return f"cannot read: {e}"
        hit = self._cache.get(path)
        if hit and hit[0] == mtime:
            return hit[1]
        try:
            value: Template | str = load_file(path, source)
        except ValueError as e:
            value = str(e)
        self._cache[path] = (mtime, value)
        return value

    def all(self) -> tuple[dict[str, Template], dict[str, str]]:
        """(name -> template, file name -> why it was not loaded)."""
        found, broken = {}, {}
        user = [(self.user_dir, "user")] if self.user_dir and self.user_dir.is_dir() else []
        folders = [(BUILTIN, "builtin")] + user
        for folder, source in folders:
            for path in sorted(folder.glob("*.json")):
                t = self._load(path, source)
                if isinstance(t, Template):
                    found[t.name] = t
                else:
                    broken[path.name] = t
        return found, broken

    def get(self, name: str) -> Template:
        found, broken = self.all()
        if name in found:
            return found[name]
        why = broken.get(f"{name}.json")
        if why:
            raise InvalidRequest(f"template {name!r} could not be loaded: {why}", param="template")
        raise InvalidRequest(f"unknown template {name!r}; available: {', '.join(sorted(found))} "
                             "(GET /v1/workorders/templates)", param="template")
