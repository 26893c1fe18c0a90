"""The RunReport's warning for a field a rule reads that no source has and no earlier rule sets."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.rules.model import parse_rules
from firefeed.rules.unread import unread_field_warnings

FIELDS = ["id", "title", "price", "quantity", "item_group_id"]


def warnings(rules: list[dict[str, Any]], fields: list[str] = FIELDS, **parse: Any) -> list[str]:
    return unread_field_warnings(parse_rules(rules, key_field="id", **parse), fields)


def test_a_misspelled_field_in_a_condition_is_named_with_its_rule() -> None:
    rules = [
        {"name": "ok", "when": {"field": "quantity", "op": "lte", "value": "0"}, "then": [{"exclude": "true"}]},
        {"name": "typo", "when": {"field": "Quantty", "op": "lte", "value": "0"}, "then": [{"exclude": "true"}]},
    ]
    (warning,) = warnings(rules)
    assert warning.startswith("rules[1] ('typo') reads 'Quantty' (did you mean 'quantity'?), which no source has")


def test_a_field_an_earlier_rule_or_action_sets_is_known() -> None:
    rules = [
        {"name": "make", "then": [{"set": "label", "value": "{title} {colour}"}, {"copy": "short", "from": "label"}]},
        {"name": "use", "when": {"field": "short", "op": "contains", "value": "x"}, "then": [{"exclude": "true"}]},
        {"name": "agg", "then": [{"aggregate": "low", "op": "min", "of": "{pricce}"}]},
        {"name": "off", "enabled": "false", "when": {"field": "nothing", "op": "eq", "value": ""}, "then": []},
    ]
    assert warnings(rules, group="item_group_id") == [
        "rules[0] ('make') reads 'colour', which no source has and no earlier rule sets: it reads as empty on"
        " every item (a misspelled field name?)",
        "rules[2] ('agg') reads 'pricce' (did you mean 'price'?), which no source has and no earlier rule sets:"
        " it reads as empty on every item (a misspelled field name?)",
    ]


def test_a_rule_reading_a_field_only_a_later_rule_sets_is_warned_about() -> None:
    rules = [
        {"name": "early", "when": {"field": "label", "op": "eq", "value": ""}, "then": [{"set": "x", "value": "1"}]},
        {"name": "late", "then": [{"set": "label", "value": "{title}"}]},
    ]
    assert [w.split(" reads ")[0] for w in warnings(rules)] == ["rules[0] ('early')"]


def test_a_lookup_target_nothing_made_yet_is_no_warning_but_a_misspelled_match_is() -> None:
    lookup = {"lookup": "cats", "match": "{match}", "set": {"google_product_category": "gpc", "label": "lbl"}}
    ok = warnings([{"name": "map", "then": [{**lookup, "match": "title"}]}], lookups={"cats": "t"})
    typo = warnings([{"name": "map", "then": [{**lookup, "match": "titel"}]}], lookups={"cats": "t"})
    assert ok == []
    assert [w.split(", which")[0] for w in typo] == ["rules[0] ('map') reads 'titel' (did you mean 'title'?)"]


def export_warnings(export: dict[str, Any], fields: list[str] = FIELDS) -> list[str]:
    from firefeed.rules.unread import unread_export_field_warnings
    from firefeed.spec.loader import parse_spec

    spec = parse_spec(
        {
            "company": "c",
            "project": "p",
            "sources": [{"name": "a", "url": "a.csv"}],
            "exports": [{"name": "out", "format": "csv", "path": "out.csv", **export}],
        }
    )
    return unread_export_field_warnings(spec.exports[0], fields, path="exports[0]")


def test_an_export_field_naming_nothing_is_named_with_where_it_is_read() -> None:
    (warning,) = export_warnings(
        {
            "fields": {"id": "id", "shipping.country": "US", "price": "{price} {currency}", "again": "US"},
            "where": {"field": "stok", "op": "gt", "value": "0"},
        }
    )
    assert warning.startswith(
        "exports[0] ('out') reads fields that no source has and no rule sets: 'US' (fields.shipping.country,"
        " fields.again), 'currency' (fields.price), 'stok' (where). They read as empty on every item"
    )
    assert "a fixed text as {value: US}, with a rule's `set`" in warning


def test_a_literal_in_an_export_reads_no_field_and_a_mapping_with_another_key_is_a_spec_error() -> None:
    # C1: `{value: TEXT}` is a fixed text, never a field name: no warning, even when it looks like one.
    export = {"fields": {"id": "id", "condition": {"value": "new"}, "shipping.country": {"value": "US"}}}
    assert export_warnings(export) == []
    assert export_warnings({"fields": {"id": "id", "price": {"value": "{currency}"}}}) == []
    with pytest.raises(SpecError) as err:
        export_warnings({"fields": {"id": "id", "shipping.country": {"value": "US", "valeu": "x"}}})
    assert err.value.path == 'exports[0].fields["shipping.country"]'
    assert "'valeu' is not a key it takes" in str(err.value)
    with pytest.raises(SpecError) as err:
        export_warnings({"fields": {"id": "id", "condition": {"text": "new"}}})
    assert err.value.path == "exports[0].fields.condition" and "'text'" in str(err.value)


def test_an_export_reading_known_fields_and_its_own_rules_fields_has_no_warning() -> None:
    export = {
        "fields": {"id": "id", "title": "{title}", "label": "label", "first": "{images[0]}"},
        "where": {"field": "label", "op": "not_empty"},
        "rules": [{"name": "l", "then": [{"set": "label", "value": "{title}"}]}],
    }
    assert export_warnings(export, [*FIELDS, "images"]) == []
    assert export_warnings({}) == [], "without fields every field is written as itself"


def test_an_export_reading_thousands_of_unknown_names_gets_one_bounded_warning() -> None:
    # As many as a spec may name (spec_max_fields, 1,000).
    fields = {"id": "id", **{f"a{i}": f"missing_{i}" for i in range(499)}, **{f"b{i}": "US" for i in range(499)}}
    (warning,) = export_warnings({"fields": fields})
    assert "'missing_19' (fields.a19) and 480 more" in warning and "missing_20" not in warning
    assert len(warning) < 2000
    (warning,) = export_warnings({"fields": {f"b{i}": "US" for i in range(30)}})
    assert "'US' (fields.b0, fields.b1," in warning and "fields.b19 and 10 more)" in warning


def test_a_misspelled_name_is_given_the_closest_field_and_a_name_yaml_cut_at_a_comment_is_told_to_quote() -> None:
    (warning,) = export_warnings(
        {"fields": {"id": "id", "price": "prcie", "ref": "Reference"}}, [*FIELDS, "Reference #"]
    )
    assert "'prcie' (did you mean 'price'?) (fields.price)" in warning
    assert "'Reference' (did you mean 'Reference #'? In YAML ' #' starts a comment: quote the name" in warning
    (none,) = export_warnings({"fields": {"id": "id", "x": "zzzzqqq"}})
    assert "did you mean" not in none


def test_a_place_reading_a_field_twice_is_named_once() -> None:
    (warning,) = export_warnings(
        {
            "fields": {"x": "{colour}{colour}"},
            "where": {
                "any": [{"field": "colour", "op": "eq", "value": "a"}, {"field": "colour", "op": "eq", "value": "b"}]
            },
        }
    )
    assert "'colour' (fields.x, where)." in warning


def test_a_rule_reading_many_unknown_fields_and_many_such_rules_stay_bounded() -> None:
    from firefeed.rules.unread import MAX_WARNINGS, spec_warnings
    from firefeed.spec.loader import parse_spec

    wide = {"name": "wide", "then": [{"set": "t", "value": " ".join(f"{{u{i}}}" for i in range(30))}]}
    many = [{"name": f"r{i}", "when": {"field": f"m{i}", "op": "empty"}, "then": []} for i in range(80)]
    spec = parse_spec(
        {
            "company": "c",
            "project": "p",
            "sources": [{"name": "a", "url": "a.csv"}],
            "rules": [wide, *many],
            "exports": [{"name": "out", "format": "csv", "path": "out.csv"}],
        }
    )
    found = spec_warnings(spec, FIELDS, FIELDS)
    assert len(found) == MAX_WARNINGS + 1 and found[-1] == "and 31 more rules or exports read fields nothing makes"
    assert "'u19' and 10 more, which no source has" in found[0]
