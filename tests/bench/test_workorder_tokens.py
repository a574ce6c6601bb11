"""bench/workorder_tokens.py without a model: each character's kind in a hand-made answer."""

from __future__ import annotations

from bench.workorder_tokens import enum_fields, kinds_of
from server.workorders.templates import TemplateStore


def test_each_character_is_structure_copy_choice_number_or_free():
    text = '{"customer_name": "Lin", "priority": "high", "items": [{"quantity": 12, "unit": "pcs"}], "x": null}'
    kind, firsts = kinds_of(text, {"customer_name"}, {"priority"})
    spans = {}
    for i, k in enumerate(kind):
        spans.setdefault(k, "")
        spans[k] += text[i]
    assert spans["copy"] == "Lin" and spans["choice"] == "highnull" and spans["number"] == "12"
    assert spans["free"] == "pcs" and '"customer_name": "' in spans["structure"]
    assert [text[i] for i in firsts] == ["L", "h", "1", "p", "n"]


def test_choices_are_found_through_defs_and_alternatives():
    schema = {"type": "object", "$defs": {"item": {"type": "object", "properties": {
        "finish": {"anyOf": [{"enum": ["matte", "gloss"]}, {"type": "null"}]}, "note": {"type": "string"}}}},
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}}, "kind": {"const": "order"}}}
    assert enum_fields(schema) == {"items[].finish", "kind"}
    assert {"priority", "order_type", "delivery_method"} <= enum_fields(TemplateStore(None).get("work_order").schema)
