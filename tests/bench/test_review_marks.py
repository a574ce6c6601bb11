"""bench/review_marks.py without a model: one hand-made order, its marks counted by hand."""

from __future__ import annotations

from bench.review_marks import field_truth, null_copies, tally


def item(description, quantity, color=None, size=None) -> dict:
    return {"description": description, "quantity": quantity, "unit": "pcs", "color": color, "size": size,
            "material": None}


EXPECTED = {"customer_name": "Greenfield Hardware", "contact": None, "order_type": "new_order",
            "items": [item("polo shirt", 6, "navy", "S"), item("polo shirt", 10, "navy", "M")],
            "due_date": None, "priority": "normal", "delivery_method": "pickup", "needs_review": False}
CASE = {"id": "t-1", "text": "Polos for Greenfield Hardware, 6 S and 10 M, navy.", "expected": EXPECTED}
# right: customer_name, contact, order_type, due_date, priority; wrong: delivery_method; item 0 is
# paired and wrong on its colour only; the second expected item is not written (6 wrong fields)
OUTPUT = {**EXPECTED, "delivery_method": "delivery", "items": [item("polo shirt", 6, "red", "S")]}


def test_fields_are_right_or_wrong_as_the_scorer_says():
    truth, missed = field_truth(CASE, OUTPUT)
    assert missed == 6
    assert [p for p, ok in truth.items() if not ok] == ["delivery_method", "items[0].color"]
    assert len(truth) == 6 + 6  # the case fields (needs_review is the flag itself) and one item's


def test_marks_on_fields_and_on_the_whole_order_are_counted():
    run = {"case": "t-1", "confidence": {"items[0].color": 0.2, "priority": 0.3, "customer_name": 0.9},
           "marks": [{"field": "delivery_method", "code": "not_in_message", "flag": True},
                     {"field": "priority", "code": "uncertain", "flag": False}]}
    n = tally([CASE], [run], {"t-1": OUTPUT}, None)
    assert (n["fields"], n["wrong"], n["marked"], n["marked_wrong"]) == (18, 8, 2, 1)
    # redrawn at 0.25: priority (0.3) is no longer marked, the colour (0.2) is
    n = tally([CASE], [run], {"t-1": OUTPUT}, 0.25)
    assert (n["marked"], n["marked_wrong"], n["recall"]) == (2, 2, 2 / 8)
    # a mark on the whole order marks every field, the unwritten item's too
    whole = {**run, "marks": run["marks"] + [{"field": None, "code": "repeats", "flag": True}]}
    n = tally([CASE], [whole], {"t-1": OUTPUT}, None)
    assert (n["marked"], n["marked_wrong"], n["precision"], n["orders_flagged"]) == (18, 8, 8 / 18, 1)
    assert tally([CASE], [whole], {"t-1": OUTPUT}, None, orders=False)["marked"] == 2


def test_empty_copy_fields_are_counted_with_the_template_that_made_them():
    # the built-in work_order copies contact (null here, and rightly) and each item's colour, size, material
    assert null_copies([CASE], {"t-1": OUTPUT}, "work_order") == [2, 0]  # contact, items[0].material
