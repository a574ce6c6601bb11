"""Response formats: OpenAI `response_format` -> a GBNF grammar llama.cpp enforces while sampling.

What it is: `compile_response_format()` turns {"type": "text" | "json_object" | "json_schema"} into
a `Constraint` (None for text). Schemas go through llama-cpp-python 0.3.36's own converter
(`llama_grammar.json_schema_to_gbnf`); this module decides what may reach it and fails closed: a
keyword the grammar would not enforce is an InvalidRequest (400) naming it and its JSON pointer,
never a 200 with unconstrained output. llama.cpp's parser then checks each grammar (no vocab
needed), which also refuses $ref cycles that never enter a property or item (left recursion).
What it is not: the sampler (the engine applies `grammar` to the target's logits), nor HTTP.

Supported, all else refused. Annotations: title description examples default $comment deprecated
readOnly writeOnly; $schema (drafts 6, 7, 2019-09, 2020-12) and $id at the root only. Any value:
type, enum, const, anyOf, local $ref ("#..."); oneOf only if its alternatives' types are disjoint
(no grammar can say "exactly one"; then at most one matches). A list of types beside enum/const
is checked against the values; beside other keywords it becomes anyOf of one schema per type with
the keywords of that type, each checked as below (rules.split_types). Objects:
properties, required, additionalProperties. Arrays: items + minItems/maxItems (<= 500),
prefixItems (or draft-7 list items). Strings ("type": "string"): minLength/maxLength (<= 2000);
format date, time, date-time, uuid, email, ipv4; pattern (any regex whose language is regular:
no backreferences, lookaround or flags), each alone or together: the grammar enforces the strings
all of them accept, an automaton we build (string.py, regex.py, automaton.py), or the
converter's own format rule when the others take every string of the format. Integers: minimum,
maximum, exclusiveMinimum, exclusiveMaximum (an exact GBNF range we write, as the converter
ignores bounds), multipleOf (an integer <= 1000). Numbers ("type": "number"): the same bounds and
integer multipleOf (number.py); a non-integer multipleOf is refused (jsonschema checks
it in floating point). "x-copy" (ours, copy.py): a string that is a stretch of the request's text,
or an integer the text writes in digits.
Stricter than the schema, so output stays valid: properties in a fixed order (required first);
only properties the schema names (absent additionalProperties counts as false; true or a schema
beside properties is dropped); a tuple has exactly its prefixItems; enum/const values appear as
json.dumps writes them; integers have at most 16 digits, no exponent and no leading zero, and a
bounded one is never "-0"; a bounded number has no exponent, at most 15 digits and is never -0, a
multiple is written as an integer; a pattern's "$" matches only at the very end, and characters
come raw but for '"', '\\' and controls, written as json.dumps writes them. `{}` is any value.
"strict" is checked (bool or null) and changes nothing: output is always constrained, optional
properties stay optional (OpenAI's strict mode would refuse them). date (alone and in
date-time) is a calendar date; time is RFC 3339's shape (hours 00-23, no leap second).

Converter bugs worked around: $ref rules are named by the pointer's last segment and a taken name
(a property's rule, "string") is silently reused -> refs renamed uniquely; a root $ref hides the
refs under it (KeyError) -> wrapped in anyOf. Its `char` rule admits raw control characters
(invalid JSON) -> patched, and \\u surrogates left out so lengths count code points.
enum/const values and property names are written unescaped -> '"', '\\', control and non-BMP
characters refused. `{}`/true mean "any object", annotation-only schemas crash -> all six types.
Keywords beside the one it dispatches on are dropped (maxLength beside pattern) -> refused or
enforced by our rule. A property "" takes the root rule, "*" repeats; an empty enum is an empty
rule; minItems > maxItems emits minItems items; patterns with a top-level |, escapes, ".", [^...],
(?...) or a stray } translate wrongly, fail to parse or hang -> patterns never reach it. It
ignores minimum/maximum and takes no raw GBNF -> a node with a rule of ours (a bounded integer or
number, a string language) goes in as a placeholder const, then replaced (splice.py).

References: OpenAI structured outputs guide; json-schema.org 2020-12; llama.cpp grammars/README.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

import jsonschema
from jsonschema import validators

from . import copy
from . import number as numbers
from . import rules
from . import splice
from . import string as strings
from ..errors import InvalidRequest
from ..llama.grammar import gbnf_parses, llama_grammar

PARAM = "response_format.json_schema.schema"
MAX_ITEMS = 500  # the converter recurses once per optional item; Python stops at 1000
MAX_LENGTH = 2000  # the grammar grows linearly with a length bound
MAX_DEPTH = 64
ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly"}
ROOT_ONLY = {"$schema", "$id"}  # below the root, $id would move the base of "#" refs
CONTAINERS = ("$defs", "definitions")
TYPES = ["string", "number", "boolean", "object", "array", "null"]  # integer is a number
JSON_TYPE = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object",
             type(None): "null"}
DRAFTS = (jsonschema.Draft6Validator, jsonschema.Draft7Validator, jsonschema.Draft201909Validator,
          jsonschema.Draft202012Validator)
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for json_schema.name
HINT = "HINT: remove it, or check it in your own code after the response"
# Keywords some branch enforces: elsewhere the message says where they would work.
SUPPORTED = {"$ref", "oneOf", "anyOf", "type", "const", "enum", "properties", "required", "additionalProperties",
             "items", "prefixItems", "minItems", "maxItems", "pattern", "format", "minLength", "maxLength",
             "multipleOf", copy.KEYWORD, *rules.BOUNDS}
# The converter's string character, and the same without raw control characters and \\u surrogates.
_CHAR = "char ::= " + llama_grammar.PRIMITIVE_RULES["char"].content
_CHAR_FIXED = (r'char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F] | [dD] [0-7]) '
               r'[0-9a-fA-F] [0-9a-fA-F])')


@dataclass(frozen=True)
class Constraint:
    kind: str  # "json_object" | "json_schema"
    name: str | None
    schema: dict | None
    grammar: str  # GBNF, root rule "root"; with copy fields, without the rule each request defines
    copy_rules: tuple = ()  # copy.Rule: what each request defines (x-copy fields), if any

    def grammar_for(self, sources: list[str]) -> str:
        """The whole grammar for one request whose copy fields copy from `sources`; InvalidRequest
        when the schema has copy fields and the sources hold nothing to copy."""
        if not self.copy_rules:
            return self.grammar
        try:
            return self.grammar + "\n".join(copy.define(self.copy_rules, sources)) + "\n"
        except ValueError as e:
            raise InvalidRequest(f'the schema has "{copy.KEYWORD}" fields, and {e}', param="messages") from None

    def validate(self, text: str) -> list[str]:
        """Problems with a finished response; [] when it is valid."""
        try:
            value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_not_json)
        except ValueError as e:
            return [f"not valid JSON: {e}"]
        if self.schema is None:
            return [] if isinstance(value, dict) else ["not a JSON object"]
        cls = validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        errors = cls(self.schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value)
        return [f"{_at(_pointer(e.absolute_path))}: {e.message}"
                for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])]


def compile_response_format(response_format: dict | None) -> Constraint | None:
    """OpenAI `response_format` -> Constraint, None for plain text; InvalidRequest when refused."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise InvalidRequest('response_format must be an object such as {"type": "json_object"}',
                             param="response_format")
    kind = response_format.get("type")
    keys = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}
    if kind not in keys:
        raise InvalidRequest(f'response_format.type must be "text", "json_object" or "json_schema", not {kind!r}',
                             param="response_format.type")
    _no_unknown(response_format, keys[kind], "response_format")
    if kind == "text":
        return None
    if kind == "json_object":
        return Constraint("json_object", None, None, _checked(llama_grammar.JSON_GBNF))
    where, env = "response_format.json_schema", response_format.get("json_schema")
    if not isinstance(env, dict):
        raise InvalidRequest(f'{where} must be an object {{"name": ..., "schema": {{...}}}}', param=where)
    _no_unknown(env, {"name", "schema", "strict", "description"}, where)
    for key, ok, what in (("name", lambda v: isinstance(v, str) and NAME_RE.fullmatch(v),
                           "1-64 letters, digits, _ or -"),
                          ("strict", lambda v: v is None or isinstance(v, bool), "true, false or null"),
                          ("description", lambda v: v is None or isinstance(v, str), "a string")):
        if not ok(env.get(key)):
            raise InvalidRequest(f"{where}.{key} must be {what}", param=f"{where}.{key}")
    name, schema = env["name"], env.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest(f"{where}.schema must be a JSON Schema object", param=PARAM)
    cls = jsonschema.Draft202012Validator
    if "$schema" in schema:
        uri = schema["$schema"]
        cls = validators.validator_for(schema, default=None) if isinstance(uri, str) else None
        if cls not in DRAFTS:
            raise _bad(f'"$schema" {uri!r} is not supported; HINT: use JSON Schema 2020-12 (omit "$schema")')
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise _bad(f"invalid JSON Schema {_at(_pointer(e.absolute_path))}: {e.message}") from None
    return Constraint("json_schema", name, schema, *_to_grammar(schema))


@dataclass
class _Walk:
    nodes: dict = field(default_factory=dict)  # JSON pointer -> normalised node (for $ref targets)
    refs: list = field(default_factory=list)  # (normalised node holding "$ref", its pointer)
    own: list = field(default_factory=list)  # (normalised node, writer): rules of ours (splice.py)
    names: set = field(default_factory=set)  # every property name: $ref rule names must differ
    copy_rule: str | None = None  # the request's string copies, once the converter's rule names are known
    copy_rules: list = field(default_factory=list)  # copy.Rule: what each request defines


def _to_grammar(schema: dict) -> tuple[str, tuple]:
    """(the grammar, the copy.Rules it leaves for each request to define: none without copy fields)."""
    walk = _Walk()
    root = _walk(schema, "", walk, 0)
    prefix = "ref"  # rules for $ref targets; no property rule may start with it
    while any(llama_grammar.INVALID_RULE_CHARS_RE.sub("-", n).startswith(prefix) for n in walk.names):
        prefix += "x"
    names: dict[str, str] = {}  # target pointer -> rule name
    defs = {}  # rule name -> target node
    for node, ptr in walk.refs:
        target = unquote(node["$ref"][1:])
        if target not in walk.nodes:
            raise _bad(f'"$ref" {node["$ref"]!r} {_at(ptr)} does not point to a subschema of this schema')
        # letters only: the converter de-duplicates rule names with digit suffixes
        name = names.setdefault(target, prefix + "".join("abcdefghij"[int(d)] for d in str(len(names))))
        defs[name] = walk.nodes[target]
        node["$ref"] = f"#/$defs/{name}"
    for i, (node, _) in enumerate(walk.own):  # the converter has no such rule: a const holds the place
        node.clear()
        node["const"] = splice.placeholder(i)
    if "$ref" in root:  # the converter would not look for refs in the siblings of a root $ref
        root = {"anyOf": [root]}
    try:
        text = llama_grammar.json_schema_to_gbnf(json.dumps({**root, "$defs": defs}))
    except (AssertionError, KeyError, ValueError, TypeError, RecursionError) as e:
        raise _bad(f"llama.cpp's JSON Schema converter failed: {e}; HINT: simplify the schema") from None
    walk.copy_rule = copy.free_name(text)
    try:
        text = splice.splice(text, [writer for _, writer in walk.own])
    except ValueError as e:
        raise _bad(f"{e} (a bug); HINT: drop the bounds, pattern or format for now") from None
    text = "\n".join(_CHAR_FIXED if line == _CHAR else line for line in text.split("\n"))
    if f" {walk.copy_rule} " in text:
        walk.copy_rules.insert(0, copy.Rule(walk.copy_rule))
    if not walk.copy_rules:
        return _checked(text), ()
    _checked(text + "\n".join(copy.define(walk.copy_rules, ["a stand-in 1"])) + "\n")  # every request's shape
    return text, tuple(walk.copy_rules)


def _walk(node, ptr: str, walk: _Walk, depth: int) -> dict:
    """Check one subschema against what the converter enforces; return it normalised."""
    if depth > MAX_DEPTH:
        raise _bad(f"the schema is nested more than {MAX_DEPTH} levels deep {_at(ptr)}")
    if node is False:
        raise _bad(f"the schema false {_at(ptr)} is not supported; HINT: leave that property or item out")
    node = {} if node is True else node
    if ptr and ROOT_ONLY & node.keys():
        raise _unsupported(min(ROOT_ONLY & node.keys()), ptr, " below the root")
    for container in CONTAINERS:
        for name, sub in node.get(container, {}).items():
            _walk(sub, ptr + _pointer([container, name]), walk, depth + 1)
    body = {k: v for k, v in node.items() if k not in ANNOTATIONS | ROOT_ONLY and k not in CONTAINERS}
    walk.nodes[ptr] = _node(body, ptr, walk, depth) if body else {"type": list(TYPES)}
    return walk.nodes[ptr]


def _node(body: dict, ptr: str, walk: _Walk, depth: int) -> dict:
    alternatives = rules.split_types(body)  # each checked as if it stood here
    if alternatives:
        return {"anyOf": [_node(alt, ptr, walk, depth) for alt in alternatives]}
    if body.get("type") == "array" and "items" not in body and "prefixItems" not in body:
        body = {**body, "items": True}  # else the converter drops minItems/maxItems
    kind, allowed, where = _branch(body)
    for key in body:
        if key in rules.BOUNDS and key not in allowed:
            raise _unsupported(key, ptr, f" {where}", 'HINT: bounds are enforced beside "type": "number" or '
                               '"integer"; or remove it and check it yourself')
        if key not in allowed:
            raise _unsupported(key, ptr, f" {where}" if key in SUPPORTED else "")
    out = dict(body)

    def sub(path, value):
        return _walk(value, ptr + _pointer(path), walk, depth + 1)

    if kind == "$ref":
        if not isinstance(body["$ref"], str) or not body["$ref"].startswith("#"):
            raise _unsupported("$ref", ptr, f" to {body['$ref']!r}: only local references (\"#/$defs/...\")")
        walk.refs.append((out, ptr))
    elif kind in ("anyOf", "oneOf"):
        out[kind] = [sub([kind, i], s) for i, s in enumerate(body[kind])]
        if kind == "oneOf" and not _disjoint(out[kind]):
            raise _bad(f'"oneOf" {_at(ptr)} has alternatives that may overlap, and a grammar cannot enforce '
                       '"exactly one"; HINT: use anyOf, or give each alternative its own "type"')
    elif kind in ("const", "enum"):
        values = [body["const"]] if kind == "const" else body["enum"]
        if not values:
            raise _bad(f'"enum" {_at(ptr)} is empty: no value can match')
        for v in values:
            if not _literal_ok(v):
                raise _unsupported(kind, ptr, f" with {v!r}: the converter writes strings with '\"', '\\', control "
                                   "characters or non-BMP characters wrongly")
        types = body.get("type", TYPES + ["integer"])
        types = [types] if isinstance(types, str) else types
        if not all(any(jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(v, t) for t in types) for v in values):
            raise _unsupported("type", ptr, f' next to "{kind}" with a value of another type (the grammar allows it)')
        out.pop("type", None)  # implied by the values; a type list would hide them from the converter
    elif kind == "object":
        props = body.get("properties", {})
        for name in props:
            if name in ("", "*") or not _literal_ok(name):
                raise _bad(f"property name {name!r} {_at(ptr)} is not supported by the grammar converter")
        missing = [r for r in body.get("required", []) if r not in props]
        if missing:
            raise _unsupported("required", ptr, f": {missing[0]!r} is not in properties (the grammar never writes it)")
        out["properties"] = {n: sub(["properties", n], s) for n, s in props.items()}
        walk.names |= set(props)
        if body.get("additionalProperties", False) is not False:
            out["additionalProperties"] = sub(["additionalProperties"], body["additionalProperties"])
            if props:  # the converter would let a declared name through with this value schema
                del out["additionalProperties"]
    elif kind == "array":
        items = body.get("items")
        tuple_ = body["prefixItems"] if "prefixItems" in body else items if isinstance(items, list) else None
        if tuple_ is None:
            _bounds(out, "minItems", "maxItems", MAX_ITEMS, ptr)
            out["items"] = sub(["items"], items)
        else:
            if "prefixItems" in body and items not in (None, False):
                raise _unsupported("prefixItems", ptr, ' next to an "items" schema (the converter ignores it)')
            if not body.get("minItems", 0) <= len(tuple_) <= body.get("maxItems", len(tuple_)):
                raise _unsupported("minItems" if body.get("minItems", 0) > len(tuple_) else "maxItems", ptr,
                                   f": the grammar writes exactly the {len(tuple_)} prefixItems")
            key = "prefixItems" if "prefixItems" in body else "items"
            out = {"prefixItems": [sub([key, i], s) for i, s in enumerate(tuple_)]}
    elif kind == "range":
        try:
            walk.own.append((out, splice.integer_rule(*rules.integer_range(body))))
        except ValueError as e:
            raise _bad(f"integer bounds {_at(ptr)}: {e}") from None
    elif kind == "language":
        try:
            dfa = strings.language(body, MAX_LENGTH)
        except rules.Refused as e:
            raise _unsupported(e.args[0], ptr, f" {where}: {e.args[1]}") from None
        if dfa is None:  # the format's own rule is exact
            out = {k: v for k, v in body.items() if k in ("type", "format")}
        else:
            walk.own.append((out, splice.string(dfa)))
    elif kind == "number":
        try:
            walk.own.append((out, splice.number(numbers.language(body))))
        except rules.Refused as e:
            raise _unsupported(e.args[0], ptr, f" {where}: {e.args[1]}") from None
    elif kind == "string":
        _bounds(out, "minLength", "maxLength", MAX_LENGTH, ptr)
    elif kind == "copy":
        try:
            spec = copy.Copy.read(body[copy.KEYWORD])
        except ValueError as e:
            raise _bad(f'"{copy.KEYWORD}" {_at(ptr)} {e}') from None
        def own(name):
            assert walk.copy_rule is not None  # named (grammar_of) before any rule of its own is written
            return spec.expression(walk.copy_rule), []
        walk.own.append((out, own))
    elif kind == "copy-number":
        if body[copy.KEYWORD] is not True:
            raise _bad(f'"{copy.KEYWORD}" {_at(ptr)} must be true on an integer (a separator joins strings)')
        try:
            lo, hi = rules.integer_range(body)
        except ValueError as e:
            raise _bad(f"integer bounds {_at(ptr)}: {e}") from None

        def written_numbers(name: str) -> tuple[str, list[str]]:  # each request defines the rule (copy.define)
            walk.copy_rules.append(copy.Rule(name, (lo, hi)))
            return f"{name} space", []
        walk.own.append((out, written_numbers))
    return out


def _branch(s: dict) -> tuple[str, set[str], str]:
    """The branch of the converter's `visit` this node takes, the keywords that branch enforces,
    and where that is (for messages). Same order as `visit`, except enum/const before a type list."""
    t = s.get("type")
    typed = f'with "type": {json.dumps(t)}' if t else 'without "type"'
    for key in ("$ref", "oneOf", "anyOf"):  # the converter takes oneOf and drops anyOf
        if key in s:
            return key, {key}, f'next to "{key}"'
    for key in ("const", "enum"):
        if key in s:
            return key, {key, "type"}, f'next to "{key}"'
    if isinstance(t, list):  # alone: anything beside it was split (rules.split_types)
        return "types", {"type"}, "next to a list of types"
    if t in (None, "object") and ("properties" in s or s.get("additionalProperties", True) is not True):
        return "object", {"type", "properties", "required", "additionalProperties"}, "in an object schema"
    if t in (None, "array") and ("items" in s or "prefixItems" in s):
        return "array", {"type", "items", "prefixItems", "minItems", "maxItems"}, "in an array schema"
    if t in (None, "string") and copy.KEYWORD in s:  # a copy is bounded by its text: nothing else applies
        return "copy", {"type", copy.KEYWORD}, f'next to "{copy.KEYWORD}"'
    if t == "integer" and copy.KEYWORD in s:  # a number written in the text, within the bounds
        return "copy-number", {"type", copy.KEYWORD, *rules.BOUNDS}, f'next to "{copy.KEYWORD}"'
    if t in (None, "string") and strings.needs_language(s):
        where = 'next to "pattern"' if "pattern" in s else 'next to "format"'
        return "language", {"type", *strings.KEYWORDS}, where
    if t in (None, "string") and s.get("format") in strings.CONVERTER_FORMATS:
        return "format", {"type", "format"}, 'next to "format"'
    if t == "string":
        return "string", {"type", "minLength", "maxLength"}, typed
    if t == "object":  # additionalProperties is true here: any object
        return "any-object", {"type", "additionalProperties"}, typed
    if numbers.needs_language(s):
        return "number", {"type", "multipleOf", *rules.BOUNDS}, typed
    if t == "integer" and any(k in s for k in rules.BOUNDS):
        return "range", {"type", *rules.BOUNDS}, typed
    return "primitive", {"type"}, typed


def _bounds(out: dict, lo_key: str, hi_key: str, cap: int, ptr: str) -> None:
    lo, hi = int(out.get(lo_key, 0)), out.get(hi_key)
    for key, n in ((lo_key, lo), (hi_key, hi)):
        if n is not None and n > cap:
            raise _unsupported(key, ptr, f" above {cap} (the grammar grows with it)")
    if hi is not None and lo > hi:
        raise _bad(f"{lo_key} > {hi_key} {_at(ptr)}: no value can match")
    # 2.0 is a count to jsonschema, not to the converter
    out.update({k: int(out[k]) for k in (lo_key, hi_key) if k in out})


def _disjoint(alternatives: list[dict]) -> bool:
    """True when no JSON value has the type of two alternatives (so at most one matches)."""
    seen: set[str] = set()
    for types in map(_types, alternatives):
        if not types or types & seen:
            return False
        seen |= types
    return True


def _types(alt: dict) -> set[str]:
    """The JSON types a normalised node may match; empty when not known (a $ref)."""
    if "anyOf" in alt:  # a split list of types
        sets = [_types(a) for a in alt["anyOf"]]
        return set().union(*sets) if all(sets) else set()
    values = [alt["const"]] if "const" in alt else alt.get("enum", [])  # an enum/const has no "type" left
    types = alt.get("type", [JSON_TYPE[type(v)] for v in values])
    return {"number" if t == "integer" else t for t in ([types] if isinstance(types, str) else types)}


def _literal_ok(v) -> bool:
    """json.dumps(v) goes into a GBNF literal unescaped: right only with no backslash left but in
    \\uXXXX escapes of printable BMP characters (GBNF decodes those back)."""
    return "\\" not in re.sub(r"\\u(?!00[01]|d[89a-f])[0-9a-f]{4}", "", json.dumps(v))


def _checked(grammar: str) -> str:
    """Let llama.cpp's own parser judge the grammar (parsing needs no vocab)."""
    if not gbnf_parses(grammar):
        raise _bad("llama.cpp refused the grammar built from this schema (a $ref cycle that never enters a "
                   "property or an item is the usual cause); HINT: simplify the schema")
    return grammar


def _no_unknown(obj: dict, known: set[str], where: str) -> None:
    for key in obj:
        if key not in known:
            raise InvalidRequest(f"unknown field {where}.{key}; allowed: {', '.join(sorted(known))}",
                                 param=f"{where}.{key}")


def _no_duplicates(pairs: list) -> dict:
    if len({k for k, _ in pairs}) < len(pairs):
        raise ValueError("an object repeats a key")
    return dict(pairs)


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: Python's json would take them


def _pointer(path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _at(ptr: str) -> str:
    return f"at {ptr}" if ptr else "at the root"


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message, param=PARAM)


def _unsupported(key: str, ptr: str, why: str = "", hint: str = HINT) -> InvalidRequest:
    return _bad(f'unsupported JSON Schema keyword "{key}" {_at(ptr)}{why}; {hint}')
