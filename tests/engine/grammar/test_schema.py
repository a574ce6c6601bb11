"""response_format -> grammar. Refusals are 400s naming the keyword and where it is; what compiles is
run through llama.cpp's own grammar sampler over a byte vocabulary (a GGUF with a tokenizer and no
tensors, written here), so "the grammar allows exactly this JSON" is tested, not just "it parses".
No model, no threads; well under a second. Strings (patterns, formats) are test_schema_strings.py's,
numbers and integer bounds test_schema_numbers.py's.
"""

import dataclasses
import json

import pytest
from llama_cpp.llama_grammar import json_schema_to_gbnf

from conftest import EVAL_DATA
from engine.grammar.schema import PARAM, compile_response_format
from engine.grammar.rules import MAX_INT
from grammar_vocab import accepts, js, refused

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"},
        "qty": {"type": "integer"},
        "colour": {"enum": ["red", "navy"]},
        "due": {"type": "string", "format": "date"},
        "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "minItems": 1, "maxItems": 3},
    },
    "required": ["id", "qty", "lines"],
    "additionalProperties": False,
    "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string"}, "n": {"type": "number"}},
                       "required": ["sku"]}},
}


# --- the envelope -------------------------------------------------------------------------------

def test_text_and_absent_mean_no_constraint():
    assert compile_response_format(None) is None
    assert compile_response_format({"type": "text"}) is None


def test_json_object_allows_any_object_and_nothing_else(vocab):
    c = compile_response_format({"type": "json_object"})
    assert (c.kind, c.name, c.schema) == ("json_object", None, None)
    assert accepts(vocab, c.grammar, '{"a": [1, "x", {"b": null}], "c": true}')
    for text in ('[1]', '"x"', '{"a": 1', '{"a": "x\ny"}'):
        assert not accepts(vocab, c.grammar, text), text


@pytest.mark.parametrize("rf, param", [
    ("json", "response_format"),
    ({}, "response_format.type"),
    ({"type": "json"}, "response_format.type"),
    ({"type": "json_object", "schema": {}}, "response_format.schema"),  # llama-cpp-python's dialect
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "response_format.json_schema.name"),
    (js({}, name="work order"), "response_format.json_schema.name"),
    (js({}, strict="yes"), "response_format.json_schema.strict"),
    (js({}, description=5), "response_format.json_schema.description"),
    (js({}, extra=1), "response_format.json_schema.extra"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, PARAM),
    (js(True), PARAM),
])
def test_envelope_errors_name_the_field(rf, param):
    assert refused(rf).param == param


def test_strict_is_accepted_and_changes_nothing():
    grammars = {compile_response_format(js(ORDER, strict=s)).grammar for s in (True, False, None)}
    assert len(grammars) == 1


@pytest.mark.parametrize("schema, fragment", [
    ({"type": "strin"}, "at /type"),
    ({"properties": {"a": {"type": 5}}}, "at /properties/a/type"),
    ({"required": "a"}, "at /required"),
    ({"type": "string", "pattern": "^(a$"}, "at /pattern"),
    ({"$schema": "http://json-schema.org/draft-04/schema#"}, '"$schema"'),
    ({"$schema": "https://example.com/my-meta"}, '"$schema"'),
])
def test_invalid_schema_is_a_400(schema, fragment):
    e = refused(js(schema))
    assert e.param == PARAM and fragment in e.message


# --- fail closed: what the grammar cannot enforce ------------------------------------------------

DRAFT7 = "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize("schema, keyword, where", [
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {}, "uniqueItems": True}}},
     "uniqueItems", "at /properties/tags"),
    ({"minimum": 0}, "minimum", 'without "type"'),
    ({"type": "number", "multipleOf": 0.5}, "multipleOf", "at the root"),
    ({"allOf": [{"type": "object"}]}, "allOf", "at the root"),
    ({"not": {"type": "null"}}, "not", "at the root"),
    ({"if": {"type": "string"}, "then": {"maxLength": 2}}, "if", "at the root"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties", "at the root"),
    ({"type": "object", "properties": {"a": {}}, "minProperties": 1}, "minProperties", "at the root"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames", "at the root"),
    ({"type": "array", "items": {}, "contains": {"type": "null"}}, "contains", "at the root"),
    ({"type": "integer", "nullable": True}, "nullable", "at the root"),
    ({"$defs": {"a": {"type": "string", "format": "hostname"}}, "$ref": "#/$defs/a"}, "format", "at /$defs/a"),
    ({"type": "number", "multipleOf": 0.01}, "multipleOf", "floating point"),
    ({"type": "integer", "multipleOf": 1001}, "multipleOf", "above 1000"),
    ({"type": "number", "minimum": 0.30000000000000004}, "minimum", "significant digits"),
    ({"type": ["object", "null"], "properties": {"a": {}}, "minProperties": 1}, "minProperties", "at the root"),
    ({"properties": {"a": {"type": ["string", "null"], "minLength": 1, "not": {}}}}, "not", "at /properties/a"),
    ({"type": ["string", "null"], "minimum": 0}, "minimum", 'with "type": "string"'),  # no listed type takes it
    ({"type": ["array", "null"], "items": {}, "uniqueItems": True}, "uniqueItems", "at the root"),
    # a pattern no string of the format matches
    ({"properties": {"d": {"type": ["string", "null"], "format": "date", "pattern": "^[0-9]{4}-[0-9]{2}$"}}},
     "pattern", 'at /properties/d next to "pattern": no string matches it together with format'),
    ({"type": "string", "format": "time", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}, "pattern", "no string"),
    ({"type": "string", "format": "email", "pattern": "^[a-z]+$"}, "pattern", "no string matches"),
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 0}, "maxLength", "no string matches"),
    ({"type": "string", "enum": ["a"], "minLength": 1}, "minLength", 'next to "enum"'),
    ({"type": "string", "const": 1}, "type", 'next to "const"'),
    ({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}}, "type", 'next to "$ref"'),
    ({"oneOf": [{"type": "string"}], "anyOf": [{"type": "null"}]}, "anyOf", 'next to "oneOf"'),
    ({"type": "integer", "minLength": 1}, "minLength", 'with "type": "integer"'),
    ({"minLength": 2}, "minLength", 'without "type"'),
    ({"type": "object", "required": ["a"]}, "required", 'with "type": "object"'),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "required", "at the root"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}, "$ref", "at /properties/a"),
    ({"$schema": DRAFT7, "type": "array", "items": [{}], "additionalItems": False}, "additionalItems", "at the root"),
    ({"type": "object", "properties": {"a": {"$id": "a", "type": "string"}}}, "$id", "at /properties/a"),
    ({"type": "string", "maxLength": 5000}, "maxLength", "above 2000"),
    ({"type": "array", "items": {}, "maxItems": 501}, "maxItems", "above 500"),
    ({"prefixItems": [{}], "items": {"type": "string"}}, "prefixItems", "at the root"),
    ({"prefixItems": [{}, {}], "minItems": 3}, "minItems", "exactly the 2 prefixItems"),
    ({"enum": ["a\\b"]}, "enum", "at the root"),
    ({"properties": {"a": {"const": "two\nlines"}}}, "const", "at /properties/a"),
    ({"const": {"say \"hi\"": 1}}, "const", "at the root"),
    ({"enum": ["\U0001F600"]}, "enum", "at the root"),
    ({"type": "object", "properties": {"a/b": {"type": "string", "pattern": "^(?=a)"}}}, "pattern",
     "at /properties/a~1b"),
])
def test_unsupported_keyword_is_named_with_its_path(schema, keyword, where):
    e = refused(js(schema))
    assert e.param == PARAM
    assert f'keyword "{keyword}" ' in e.message and where in e.message and "HINT" in e.message, e.message


@pytest.mark.parametrize("schema, fragment", [
    ({"enum": []}, "is empty"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "no value can match"),
    ({"type": "object", "properties": {"": {}}}, "property name ''"),
    ({"type": "object", "properties": {"*": {}}}, "property name '*'"),
    ({"type": "object", "properties": {'a"b': {}}}, "property name"),
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "exactly one"),
    ({"oneOf": [{"$ref": "#/$defs/a"}, {"type": "null"}], "$defs": {"a": {"type": "string"}}}, "exactly one"),
    ({"type": "object", "properties": {"a": False}}, "schema false at /properties/a"),
    ({"$ref": "#/$defs/missing"}, "does not point to a subschema"),
    ({"properties": {"a": {"$ref": "#/properties/b/default"}, "b": {"default": {}}}}, "does not point"),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}}, "llama.cpp refused"),
    ({"type": "integer", "minimum": 10, "maximum": 5}, "no integer"),
    ({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4}, "no integer"),
    ({"type": "integer", "minimum": MAX_INT + 1}, "at most 16 digits"),
    ({"oneOf": [{"type": "integer", "minimum": 0}, {"type": "number"}]}, "exactly one"),
])
def test_other_refusals(schema, fragment):
    e = refused(js(schema))
    assert e.param == PARAM and fragment in e.message, e.message


def test_deep_nesting_is_refused_not_a_crash():
    schema = {"type": "string"}
    for _ in range(70):
        schema = {"type": "array", "items": schema}
    assert "nested more than" in refused(js(schema)).message


# --- what compiles, and that llama.cpp allows exactly the valid JSON -----------------------------

def test_work_order_grammar(vocab):
    c = compile_response_format(js(ORDER))
    assert (c.kind, c.name, c.schema) == ("json_schema", "work_order", ORDER)
    assert "root ::= " in c.grammar
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.grammar = ""
    good = ['{"id": "AB-1234", "qty": 3, "lines": [{"sku": "T-1", "n": 2.5}]}',
            '{"id":"AB-1234","qty":-1,"lines":[{"sku":"x"},{"sku":"y"}],"colour":"navy","due":"2024-05-31",'
            '"note":null}',
            '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "line one\\nline two"}], "note": "caf\\u00e9"}']
    bad = ['{"id": "AB-1234", "qty": 3}',  # required lines missing
           '{"id": "AB-1234", "qty": "3", "lines": [{"sku": "x"}]}',  # wrong type
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "x"}], "extra": 1}',  # additionalProperties false
           '{"id": "AB-1234", "qty": 3, "lines": []}',  # minItems 1
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}, {"sku": "d"}]}',
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "line one\nline two"}]}',  # raw newline: not JSON
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "\\ud800"}]}',  # a surrogate escape
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "x"}], "colour": "green"}',
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "x"}], "due": "2024-13-01"}',
           '{"id": "AB-1234", "qty": 3, "lines": [{"sku": "x"}], "note": "twenty-one characters"}']
    for text in good:
        assert accepts(vocab, c.grammar, text), text
        assert c.validate(text) == []
    for text in bad:
        assert not accepts(vocab, c.grammar, text), text


def test_ref_names_never_collide_with_other_rules(vocab):
    """The converter names a $ref rule by the pointer's last segment and reuses a taken name."""
    schema = {"type": "object", "required": ["item", "other", "s"], "additionalProperties": False,
              "properties": {"item": {"enum": [1, 2]}, "other": {"$ref": "#/$defs/item"},
                             "s": {"$ref": "#/definitions/string"}},
              "$defs": {"item": {"type": "string"}}, "definitions": {"string": {"type": "boolean"}}}
    text = '{"item": 1, "other": "x", "s": true}'
    assert not accepts(vocab, json_schema_to_gbnf(json.dumps(schema)), text)  # the bug, unworked-around
    grammar = compile_response_format(js(schema)).grammar
    assert accepts(vocab, grammar, text)
    assert not accepts(vocab, grammar, '{"item": 1, "other": 2, "s": true}')


@pytest.mark.parametrize("schema, good, bad", [
    ({}, ['1', '"x"', '[1, {"a": null}]', '{"a": [true]}', 'null'], ['', 'nul']),
    ({"type": "object", "properties": {"meta": {}, "x": True}},
     ['{"meta": 5}', '{"meta": "m", "x": [1]}', '{}'], ['{"other": 1}']),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, ['{"a": 1, "b": 2}', '{}'], ['{"a": "x"}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     ['{"a": 1}', '{}'], ['{"a": "x"}', '{"b": "x"}']),  # extras dropped: a declared name never gets the wrong value
    ({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, ['["a", 1]'],
     ['["a"]', '["a", 1, 2]']),
    ({"$schema": DRAFT7, "type": "array", "items": [{"type": "string"}]}, ['["a"]'], ['[1]', '[]']),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, ['[1]', '[1, 2]'],
     ['[]', '[1, 2, 3]']),
    ({"type": "array", "minItems": 1}, ['[1]', '["a", null]'], ['[]']),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"\\u00e9\\u00e9"', '"日本語"'], ['"a"', '"abcd"']),
    ({"type": ["string", "null"], "enum": ["a", None]}, ['"a"', 'null'], ['"b"']),
    ({"type": ["integer", "boolean"]}, ['1', 'true'], ['1.5', '"1"']),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}, {"const": None}]}, ['"x"', '7', 'null'], ['1.5', 'true']),
    # written as json.dumps does
    ({"const": {"k": ["caf\u00e9", 1]}}, ['{"k": ["café", 1]}'], ['{"k": ["cafe", 1]}', '{"k":["café",1]}']),
    ({"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567"']),
    ({"type": "string", "format": "date-time"}, ['"2024-05-31T12:00:00Z"'], ['"2024-05-31 12:00"']),
    ({"$defs": {"node": {"type": "object",
                         "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
      "$ref": "#/$defs/node"}, ['{"kids": [{"kids": []}, {}]}'], ['{"kids": [1]}']),
    ({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}},  # "#" is the root
     ['{"next": {"next": null}}', '{}'], ['{"next": 1}']),
])
def test_supported_schemas_allow_exactly_their_json(vocab, schema, good, bad):
    c = compile_response_format(js(schema))
    assert "root ::= " in c.grammar
    for text in good:
        assert accepts(vocab, c.grammar, text), text
    for text in bad:
        assert not accepts(vocab, c.grammar, text), text


def test_the_users_schema_is_left_untouched():
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}, "b": True}, "$defs": {"a": {}}}
    before = json.dumps(schema)
    compile_response_format(js(schema))
    assert json.dumps(schema) == before


# --- a list of types with type-specific keywords ----------------------------------------------

@pytest.mark.parametrize("schema, good, bad", [
    ({"type": ["string", "null"], "minLength": 2, "maxLength": 3}, ['"ab"', 'null'], ['"a"', '"abcd"', '1']),
    ({"type": ["object", "null"], "properties": {"a": {"type": "integer"}}, "required": ["a"]},
     ['{"a": 1}', 'null'], ['{}', '{"a": 1, "b": 2}', '"x"']),
    ({"type": ["array", "string"], "items": {"type": "integer"}, "maxItems": 2, "pattern": "^[a-c]+$"},
     ['[1, 2]', '[]', '"abc"'], ['[1, 2, 3]', '["a"]', '"abd"', 'null']),
    ({"type": ["integer", "boolean"], "maximum": 3}, ['3', '-1', 'true'], ['4', '3.5', 'null']),
    ({"type": ["string", "null"], "format": "date", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
     ['"2026-01-16"', 'null'], ['"2026-1-16"', '"2026-01-16T00:00:00Z"', '""']),
])
def test_type_lists_split_by_type(vocab, schema, good, bad):
    c = compile_response_format(js(schema))
    for text in good:
        assert accepts(vocab, c.grammar, text), text
        assert c.validate(text) == [], text
    for text in bad:
        assert not accepts(vocab, c.grammar, text), text


# --- the product's own schema -------------------------------------------------------------------



def _grammar_order(value, node: dict, root: dict):
    """The converter writes properties in a fixed order: the required ones, then the others, each in
    the order of "properties"."""
    if "$ref" in node:
        node = root["$defs"][node["$ref"].split("/")[-1]]
    if isinstance(value, dict):
        props, required = node["properties"], node.get("required", [])
        keys = [k for k in props if k in required] + [k for k in props if k not in required]
        return {k: _grammar_order(value[k], props[k], root) for k in keys if k in value}
    if isinstance(value, list):
        return [_grammar_order(v, node["items"], root) for v in value]
    return value


def test_the_work_order_schema_allows_every_expected_answer(vocab):
    schema = json.loads((EVAL_DATA / "workorder.schema.json").read_text("utf-8"))
    c = compile_response_format(js(schema))
    lines = (EVAL_DATA / "workorders-dev.jsonl").read_text("utf-8").splitlines()
    answers = [json.loads(line)["expected"] for line in lines
               if line.strip()]
    assert answers
    for answer in answers:
        assert c.validate(json.dumps(answer, ensure_ascii=False)) == [], answer
        ordered = _grammar_order(answer, schema, schema)
        for text in (json.dumps(ordered, ensure_ascii=False), json.dumps(ordered, separators=(",", ":")),
                     json.dumps(ordered, ensure_ascii=False, separators=(",", ":"))):
            assert accepts(vocab, c.grammar, text), text
    first = _grammar_order(answers[0], schema, schema)
    assert list(answers[0]) != list(first) and not accepts(vocab, c.grammar, json.dumps(answers[0]))  # fixed order
    item = first["items"][0]
    for change in ({"due_date": "2026-13-01"}, {"due_date": "16/01/2026"}, {"priority": "asap"},
                   *({"items": [{**item, **bad}]}
                     for bad in ({"quantity": -1}, {"quantity": 1.5}, {"description": ""}))):
        assert not accepts(vocab, c.grammar, json.dumps({**first, **change})), change
    assert accepts(vocab, c.grammar, json.dumps({**first, "items": [{**item, "quantity": 0}], "due_date": None}))


# --- validate(): the check after generation ------------------------------------------------------

def test_validate_reports_what_is_wrong():
    c = compile_response_format(js(ORDER))
    assert c.validate('{"id": "AB-1234", "qty": 1, "lines": [{"sku": "x"}]}') == []
    assert c.validate('{"id": "AB-1234", "qty": 1') [0].startswith("not valid JSON")
    assert c.validate('{"id": "AB-1234", "qty": NaN, "lines": []}')[0].startswith("not valid JSON")
    assert "repeats a key" in c.validate('{"id": "AB-1234", "id": "AB-1234", "qty": 1, "lines": [{"sku": "x"}]}')[0]
    problems = c.validate('{"id": "ab", "qty": "1", "lines": [{"n": 1}], "due": "2024-02-31", "x": 1}')
    text = "\n".join(problems)
    assert "at the root: Additional properties are not allowed ('x' was unexpected)" in text
    assert "at /qty: '1' is not of type 'integer'" in text
    assert "at /id: 'ab' does not match" in text
    assert "at /lines/0: 'sku' is a required property" in text
    assert "at /due: '2024-02-31' is not a 'date'" in text  # a calendar the grammar cannot know


def test_validate_json_object():
    c = compile_response_format({"type": "json_object"})
    assert c.validate('{"a": 1}') == []
    assert c.validate("[1]") == ["not a JSON object"]
    assert c.validate("{'a': 1}")[0].startswith("not valid JSON")
