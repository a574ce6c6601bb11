"""Command-line flags made from a pydantic settings model: one flag per field, whose help is
the field's description and whose default is the field's, shown, never restated.

`add_flags(parser, Settings)` adds `--ctx`, `--api-key`, ... (a field's `flag` extra renames
one: `spec_block` is `--block`); `given(args, Settings)` returns only the flags the user
typed, so `Settings(**given(...))` keeps the order defaults < FLASHDESK_* < flags
(pydantic-settings ranks keyword arguments above the environment). Validation stays the
model's: argparse only parses, so a bad value gets the model's message.

The same idea as llama-cpp-python's `add_args_from_model` (llama_cpp/server/cli.py);
written for these fields: bools are switches, lists repeat, Literals are choices.

What this is not: the command line itself (server/cli.py) or the settings (server/settings.py).
"""

from __future__ import annotations

import argparse
import types
from typing import Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def flag_name(name: str, field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}  # ours are dicts
    flag = extra.get("flag") or name
    assert isinstance(flag, str), flag
    return "--" + flag.replace("_", "-")


def _help(field: FieldInfo, env: str) -> str:
    # Field(ge=, le=) leaves annotated_types.Ge / Le in the metadata; read by attribute, so
    # pydantic's own dependency need not be ours too.
    ge = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    le = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    facts = [f"{ge}-{le}"] if ge is not None and le is not None else []
    default = field.get_default(call_default_factory=True)
    if default not in (None, False, []):  # absent, off and none go without saying
        facts.append(f"default {default}")
    facts.append(f"env {env}")
    return f"{field.description} ({', '.join(facts)})"


def _type(annotation):
    """The one non-None type of `X | None`; strings for anything argparse cannot build (SecretStr)."""
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def add_flag(parser: argparse.ArgumentParser, model: type[BaseModel], name: str) -> None:
    field = model.model_fields[name]
    kind = _type(field.annotation)
    flag = flag_name(name, field)
    env = f"{model.model_config.get('env_prefix', '')}{name}".upper()
    kw: dict = {"dest": name, "default": None, "help": _help(field, env)}
    if kind is bool:
        kw["action"] = "store_true"  # a switch turns it on; absent leaves the env or the default
    elif get_origin(kind) is Literal:
        kw["choices"] = get_args(kind)
    else:
        repeated = get_origin(kind) is list
        kw["type"] = get_args(kind)[0] if repeated else kind if kind in (int, float) else str
        kw["metavar"] = flag.removeprefix("--").replace("-", "_").upper()
        if repeated:
            kw["action"] = "append"
    parser.add_argument(flag, **kw)


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel], skip: tuple[str, ...] = ()) -> None:
    for name in model.model_fields:
        if name not in skip:
            add_flag(parser, model, name)


def given(args: argparse.Namespace, model: type[BaseModel]) -> dict:
    """The fields the user set on the command line (argparse leaves the others None)."""
    return {name: v for name in model.model_fields if (v := getattr(args, name, None)) is not None}
