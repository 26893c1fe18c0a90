"""Lists in the spec (SPEC 9): which fields are lists, the new ops and actions, and their spec errors."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.rules.model import Dedupe, Join, Leaf, Remove, Split, Take, parse_rules
from firefeed.rules.reference import apply_rules
from firefeed.rules.template import FieldRef, parse_template
from firefeed.spec.loader import parse_spec


def spec(**top: Any) -> dict[str, Any]:
    source = {"name": "main", "url": "main.csv", "lists": {"images": ","}}
    return {"company": "c", "project": "p", "sources": [source], **top}


def spec_error(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


def test_a_field_is_a_list_when_a_source_declares_it_or_a_rule_splits_or_copies_a_list_into_it() -> None:
    rules = [
        {"then": [{"copy": "gallery", "from": "images"}, {"split": "tags", "separator": "|"}]},
        {"then": [{"copy": "tags_copy", "from": "tags"}]},
        {"enabled": "false", "then": [{"split": "never"}]},
    ]
    lists = parse_spec(spec(rules=rules)).list_fields
    assert lists.fields == {"images", "gallery", "tags", "tags_copy"}
    assert lists.declared == {"images"}


def test_a_spec_without_lists_has_no_list_fields() -> None:
    doc = spec(rules=[{"then": [{"set": "a", "value": "{b}"}]}])
    del doc["sources"][0]["lists"]
    assert not parse_spec(doc).list_fields
    assert not parse_spec(doc).parsed_rules[0].lists


def test_the_key_field_cannot_be_a_list() -> None:
    doc = spec()
    doc["sources"][0]["lists"] = {"id": ","}
    assert spec_error(doc).path == "sources[0].lists.id"


def test_a_list_separator_must_not_be_empty() -> None:
    doc = spec()
    doc["sources"][0]["lists"] = {"images": ""}
    err = spec_error(doc)
    assert err.path == "sources[0].lists.images" and "separator" in str(err)  # P6: the field it names
    doc["sources"][0]["lists"] = {"": ","}
    err = spec_error(doc)
    assert err.path == "sources[0].lists" and "name" in str(err)


def test_new_actions_parse_with_their_defaults() -> None:
    (rule,) = parse_rules(
        [{"then": [{"split": "a"}, {"join": "a", "separator": ""}, {"take": "a", "count": "2"}, {"dedupe": "a"}]}],
        key_field="id",
    )
    assert rule.then == (Split("a", ","), Join("a", ""), Take("a", 2), Dedupe("a"))


@pytest.mark.parametrize(
    ("action", "path"),
    [
        ({"split": "a", "separator": ""}, "rules[0].then[0].separator"),
        ({"take": "a", "count": "-1"}, "rules[0].then[0].count"),
        ({"take": "a"}, "rules[0].then[0].count"),
        ({"remove": "a", "when": {"field": "b", "op": "eq", "value": "x"}}, "rules[0].then[0].when.field"),
        (
            {"remove": "a", "when": {"not": {"any": [{"field": "x", "op": "empty"}]}}},
            "rules[0].then[0].when.not.any[0].field",
        ),
    ],
)
def test_list_action_mistakes_name_their_path(action: dict[str, Any], path: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_rules([{"then": [action]}], key_field="id")
    assert info.value.path == path


def test_remove_takes_element_leaves_whose_values_may_read_the_item() -> None:
    (rule,) = parse_rules(
        [{"then": [{"remove": "a", "when": {"field": "_", "op": "eq", "value": "{b}"}}]}], key_field="id"
    )
    assert isinstance(rule.then[0], Remove) and isinstance(rule.then[0].when, Leaf)


@pytest.mark.parametrize("value", ["1.5", "x", "-1", "{n}", "", " 1", "1 ", "+1", "\u0661"])
def test_count_values_are_digits_only(value: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_rules([{"when": {"field": "a", "op": "count_gt", "value": value}}], key_field="id")
    assert info.value.path == "rules[0].when.value"


def test_templates_read_indexes_left_to_right() -> None:
    assert parse_template("{{{a[0]}}}", "p").parts == ("{", FieldRef("a", 0), "}")
    assert parse_template("{images[-1]}", "p").parts == (FieldRef("images", -1),)
    assert parse_template("{a[x]}", "p").parts == (FieldRef("a[x]"),)
    # any integer is an index (P9): a sign, leading zeros, and more digits than Python reads at once
    assert parse_template("{a[+1]}{a[-007]}", "p").parts == (FieldRef("a", 1), FieldRef("a", -7))
    (far,) = parse_template("{a[" + "9" * 5000 + "]}", "p").parts
    assert isinstance(far, FieldRef) and far.name == "a" and far.index is not None and far.index >= 2**31
    with pytest.raises(SpecError):
        parse_template("{a}}", "p")


def test_the_reference_reads_lists_per_element_and_counts_them() -> None:
    rules = parse_rules(
        [
            {
                "name": "any",
                "when": {"field": "images", "op": "ends_with", "value": ".png"},
                "then": [{"set": "png", "value": "y"}],
            },
            {
                "name": "none",
                "when": {"field": "images", "op": "ne", "value": "a.jpg"},
                "then": [{"set": "no_a", "value": "y"}],
            },
            {
                "name": "two",
                "when": {"field": "images", "op": "count_eq", "value": "2"},
                "then": [{"uppercase": "images"}],
            },
            {"name": "first", "then": [{"set": "first", "value": "{images[0]}|{images[-1]}|{images[5]}|{images}"}]},
        ],
        key_field="id",
        declared_lists=frozenset({"images"}),
    )
    items = [{"id": "1", "images": ("a.jpg", "b.png")}, {"id": "2", "images": ()}]
    out = apply_rules(items, rules)
    assert out.matched == {"any": 1, "none": 1, "two": 1, "first": 2}
    assert out.items[0]["images"] == ("A.JPG", "B.PNG")
    assert out.items[0]["first"] == "A.JPG|B.PNG||A.JPG,B.PNG"
    assert out.items[1] == {"id": "2", "images": (), "no_a": "y", "first": "|||"}


def _one(
    raw_then: list[dict[str, Any]], item: dict[str, Any], declared: frozenset[str] = frozenset({"images"})
) -> dict[str, Any]:
    rules = parse_rules([{"then": raw_then}], key_field="id", declared_lists=declared)
    (out,) = apply_rules([{"id": "1", **item}], rules).items
    return out


def test_append_adds_one_element_and_nothing_for_an_empty_template() -> None:
    got = _one([{"append": "images", "value": "a,b"}, {"append": "images", "value": "{missing}"}], {"images": ("x",)})
    assert got["images"] == ("x", "a,b")  # P12: the rendered text is one element, even with a separator
    assert _one([{"append": "title", "value": "!"}], {"title": "Hi"})["title"] == "Hi!"  # elsewhere: concatenation


def test_split_join_take_dedupe_follow_p10() -> None:
    got = _one(
        [{"split": "tags", "separator": "|"}, {"split": "tags", "separator": ","}, {"dedupe": "tags"}],
        {"tags": "a, b|b ,c|"},
        frozenset(),
    )
    assert got["tags"] == ("a", "b", "c")  # split of a list splits each element
    assert _one([{"join": "images", "separator": ""}], {"images": ("a", "b")})["images"] == "ab"  # a text
    assert _one([{"take": "images", "count": "0"}], {"images": ("a", "b")})["images"] == ()
    assert (
        _one([{"join": "title"}, {"dedupe": "title"}, {"take": "title", "count": "1"}], {"title": "a,a"})["title"]
        == "a,a"
    )


def test_truncate_cuts_each_element_on_its_own() -> None:
    got = _one([{"truncate": "images", "length": "7"}], {"images": ("Lux Mocassino", "short", "Veryverylong")})
    assert got["images"] == ("Lux", "short", "Veryver")  # P13


def test_map_default_replaces_each_unmatched_element_and_applies_to_no_elements() -> None:
    action = {"map": "images", "values": {"a": "A", "": "none"}, "default": "?"}
    assert _one([action], {"images": ("a", "b")})["images"] == ("A", "?")
    assert _one([action], {"images": ()})["images"] == "none"  # P11: "" (no elements) is the text ""
