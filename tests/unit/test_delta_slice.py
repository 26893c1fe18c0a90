"""What a change of some fields reaches through the rules (pipeline/delta_slice.py, #52): the rules a delta
runs over its changed items, the columns it takes from them, the counts it replaces; None where a slice
would not be exact."""

from __future__ import annotations

from typing import Any

from firefeed.pipeline.delta_slice import reach, replace_counts
from firefeed.rules.model import parse_rules


def rules(*raw: dict[str, Any]) -> list[Any]:
    return parse_rules(list(raw), key_field="id")


OUT_OF_STOCK = {
    "name": "out of stock",
    "when": {"field": "quantity", "op": "lte", "value": "0"},
    "then": [{"set": "availability", "value": "out_of_stock"}],
}
STOCK_LABEL = {
    "name": "stock label",
    "when": {"field": "quantity", "op": "lt", "value": "5"},
    "then": [{"set": "custom_label_2", "value": "low"}],
    "else": [{"set": "custom_label_2", "value": "stocked"}],
}
BRAND_IN_TITLE = {
    "name": "brand in title",
    "when": {"field": "brand", "op": "not_empty"},
    "then": [{"set": "title", "value": "{brand} {title}"}],
}
EXCLUSIONS = {
    "name": "exclusions",
    "when": {
        "any": [{"field": "title", "op": "contains", "value": "outlet"}, {"field": "price", "op": "lt", "value": "1"}]
    },
    "then": [{"exclude": True}],
}


def test_a_changed_availability_needs_only_the_rule_that_writes_it() -> None:
    # The benchmark's stock refresh: the availability changed, no rule decides on it.
    s = reach(rules(BRAND_IN_TITLE, OUT_OF_STOCK, STOCK_LABEL, EXCLUSIONS), {"availability"})
    assert s is not None
    assert [r.name for r in s.rules] == ["out of stock"]
    assert s.reached == {"availability"} and not s.counted
    assert s.from_slice("availability") and not s.from_slice("title") and not s.from_slice("_ff_m1")
    assert s.describe() == "slice: 1 rules (availability changed)"


def test_a_rule_deciding_on_a_changed_field_is_counted_and_its_writes_reached() -> None:
    s = reach(rules(BRAND_IN_TITLE, OUT_OF_STOCK, STOCK_LABEL, EXCLUSIONS), {"quantity"})
    assert s is not None
    assert [r.name for r in s.rules] == ["out of stock", "stock label"]
    assert s.counted == {"out of stock", "stock label"}
    assert s.reached == {"quantity", "availability", "custom_label_2"}
    # Their flags (their `when`'s verdicts) are the slice's, the others' the kept rows'.
    assert s.flags == {"_ff_m2", "_ff_m3"} and s.from_slice("_ff_m3") and not s.from_slice("_ff_m1")


def test_the_rules_writing_what_a_needed_rule_reads_are_needed_too() -> None:
    note = {"name": "note", "then": [{"set": "note", "value": "{custom_label_2} {title}"}]}
    cheap = {
        "name": "cheap",
        "when": {"field": "price", "op": "lt", "value": "10"},
        "then": [{"set": "tag", "value": "x"}],
    }
    s = reach(rules(BRAND_IN_TITLE, STOCK_LABEL, cheap, note), {"quantity"})
    assert s is not None
    # `note` reads the label `stock label` writes and the title `brand in title` writes; `cheap` is not needed.
    assert [r.name for r in s.rules] == ["brand in title", "stock label", "note"]
    assert s.reached == {"quantity", "custom_label_2", "note"}
    assert s.counted == {"stock label"}
    assert {"brand", "title", "quantity", "custom_label_2", "note"} <= s.fields and "price" not in s.fields


def test_an_action_reading_a_reached_field_is_reached_without_its_rule_deciding() -> None:
    copy = {"name": "copy", "when": {"field": "brand", "op": "not_empty"}, "then": [{"copy": "gtin", "from": "mpn"}]}
    s = reach(rules(copy), {"mpn"})
    assert s is not None and s.reached == {"mpn", "gtin"} and not s.counted


def test_an_exclusion_deciding_on_a_reached_field_is_not_sliced() -> None:
    assert reach(rules(BRAND_IN_TITLE, EXCLUSIONS), {"brand"}) is None  # the title it writes decides
    assert reach(rules(OUT_OF_STOCK, EXCLUSIONS), {"price"}) is None
    assert reach(rules(OUT_OF_STOCK, EXCLUSIONS), {"availability"}) is not None


def test_rules_reading_across_items_are_not_sliced() -> None:
    counted = {"name": "group size", "then": [{"aggregate": "label", "op": "count", "of": "id"}]}
    grouped = parse_rules([OUT_OF_STOCK, counted], key_field="id", group="item_group_id")
    assert reach(grouped, {"availability"}) is None


def test_the_counts_are_the_kept_rows_but_where_the_slice_counted() -> None:
    s = reach(rules(OUT_OF_STOCK, STOCK_LABEL, BRAND_IN_TITLE), {"quantity"})
    assert s is not None
    before = {"out of stock": 5, "stock label": 9, "brand in title": 30}
    got = replace_counts(before, s, {"out of stock": 7, "stock label": 4}, {"brand in title": 1, "stock label": 2})
    assert got == {"out of stock": 7, "stock label": 6, "brand in title": 31}
