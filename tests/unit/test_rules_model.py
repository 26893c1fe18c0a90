"""Parsing rules: every shape the spec allows, and every mistake named by its path."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.rules.model import (
    AllOf,
    AnyOf,
    Exclude,
    Leaf,
    MapValues,
    Math,
    Not,
    RegexReplace,
    Set,
    Truncate,
    parse_condition,
    parse_rules,
)


def rules(raw: Any) -> list:
    return parse_rules(raw, key_field="id")


def error(raw: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        rules(raw)
    return info.value


def test_the_spec_example_parses_with_yaml_text_scalars() -> None:
    parsed = rules(
        [
            {
                "name": "out of stock",
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock"}],
            },
            {
                "name": "drop tests",
                "when": {
                    "any": [{"field": "title", "op": "contains", "value": "test"}, {"field": "price", "op": "empty"}]
                },
                "then": [{"exclude": "true"}],
            },
            {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
            {
                "name": "brand in title",
                "when": {"not": {"field": "title", "op": "starts_with", "value": "{brand}"}},
                "then": [{"set": "title", "value": "{brand} {title}"}],
            },
        ]
    )
    assert [r.name for r in parsed] == ["out of stock", "drop tests", "vat", "brand in title"]
    assert parsed[0].when == Leaf("quantity", "lte", number=Decimal("0"))
    assert isinstance(parsed[1].when, AnyOf) and parsed[1].then == (Exclude(),)
    assert parsed[2].then == (Math("price", "multiply", Decimal("1.22"), 2),)
    assert isinstance(parsed[3].when, Not)
    assert isinstance(parsed[3].then[0], Set) and parsed[3].then[0].value.fields == ("brand", "title")


def test_json_scalars_are_accepted_like_their_text() -> None:
    parsed = rules(
        [
            {
                "enabled": True,
                "when": {"field": "q", "op": "gt", "value": 1.5},
                "then": [{"truncate": "t", "length": 30}, {"math": "p", "op": "add", "value": 2, "round": 0}],
            }
        ]
    )
    assert parsed[0].when == Leaf("q", "gt", number=Decimal("1.5"))
    assert parsed[0].then == (Truncate("t", 30), Math("p", "add", Decimal("2"), 0))


def test_default_names_count_every_rule_disabled_ones_included() -> None:
    parsed = rules([{"then": []}, {"enabled": "no", "then": []}, {"then": []}])
    assert [(r.index, r.name, r.enabled) for r in parsed] == [
        (1, "rule 1", True),
        (2, "rule 2", False),
        (3, "rule 3", True),
    ]


@pytest.mark.parametrize("spelling", ["false", "no", "off", "0", "False", False, 0])
def test_enabled_accepts_the_usual_spellings_of_false(spelling: Any) -> None:
    assert rules([{"enabled": spelling}])[0].enabled is False


def test_number_op_values_read_like_field_numbers() -> None:
    assert parse_condition({"field": "p", "op": "gte", "value": "EUR 1.299,00"}, "w") == Leaf(
        "p", "gte", number=Decimal("1.299")
    )
    assert parse_condition({"field": "p", "op": "lt", "value": "-3,5"}, "w").number == Decimal("-3.5")


def test_groups_nest() -> None:
    cond = parse_condition({"all": [{"any": []}, {"not": {"field": "a", "op": "empty"}}]}, "w")
    assert cond == AllOf((AnyOf(()), Not(Leaf("a", "empty"))))


def test_map_keeps_its_pairs_and_default_template() -> None:
    action = rules([{"then": [{"map": "c", "values": {"": "none", "r": "{x}"}, "default": "other"}]}])[0].then[0]
    assert isinstance(action, MapValues)
    assert [k for k, _ in action.values] == ["", "r"] and action.default is not None


def test_regex_replace_with_keeps_only_groups_and_double_backslash_special() -> None:
    action = rules([{"then": [{"regex_replace": "f", "pattern": "(a)(b)", "with": "\\2-\\1 \\\\ \\x &"}]}])[0].then[0]
    assert isinstance(action, RegexReplace)
    assert action.with_ == (2, "-", 1, " \\ \\x &")


def test_exclude_false_is_no_action() -> None:
    assert rules([{"then": [{"exclude": "false"}]}])[0].then == ()


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"rules": 1}, "rules", "list of rules"),
        ([{"then": [], "colour": 1}], "rules[0].colour", "unknown key"),
        ([{"name": "a"}, {"name": "a"}], "rules[1].name", "duplicate rule name"),
        ([{"name": "rule 2"}, {}], "rules[1].name", "duplicate rule name"),
        ([{"name": ""}], "rules[0].name", "empty"),
        ([{"enabled": "maybe"}], "rules[0].enabled", "true or false"),
        ([{"when": {"field": "a", "op": "like", "value": "x"}}], "rules[0].when.op", "unknown op"),
        ([{"when": {"field": "a", "op": "eq"}}], "rules[0].when.value", "required"),
        ([{"when": {"op": "eq", "value": "x"}}], "rules[0].when.field", "required"),
        ([{"when": {"field": "a", "op": "eq", "value": "x", "extra": 1}}], "rules[0].when.extra", "unknown key"),
        ([{"when": {"field": "a", "op": "eq", "value": ["x"]}}], "rules[0].when.value", "text"),
        ([{"when": {"field": "a", "op": "eq", "value": "{b"}}], "rules[0].when.value", "lone '{'"),
        ([{"when": {"field": "a", "op": "eq", "value": "b}"}}], "rules[0].when.value", "lone '}'"),
        ([{"when": {"field": "a", "op": "in", "value": "x"}}], "rules[0].when.value", "list"),
        ([{"when": {"field": "a", "op": "gt", "value": "abc"}}], "rules[0].when.value", "number"),
        ([{"when": {"field": "a", "op": "gt", "value": True}}], "rules[0].when.value", "number"),
        ([{"when": {"field": "a", "op": "length_gt", "value": "-1"}}], "rules[0].when.value", "whole number"),
        # 2**30 at most: a larger one validated, then failed the run with "integer out of range"
        ([{"when": {"field": "a", "op": "length_gt", "value": "1073741825"}}], "rules[0].when.value", "<= 1073741824"),
        ([{"when": {"field": "a", "op": "count_gt", "value": "99999999999"}}], "rules[0].when.value", "<= 1073741824"),
        ([{"then": [{"truncate": "a", "length": 10**12}]}], "rules[0].then[0].length", "<= 1073741824"),
        ([{"then": [{"take": "a", "count": "1073741825"}]}], "rules[0].then[0].count", "<= 1073741824"),
        # more digits than Python reads at once (4,300): a spec error like any other too large number
        ([{"when": {"field": "a", "op": "length_gt", "value": "9" * 5000}}], "rules[0].when.value", "<= 1073741824"),
        ([{"when": {"field": "a", "op": "count_gt", "value": "9" * 5000}}], "rules[0].when.value", "<= 1073741824"),
        ([{"then": [{"take": "a", "count": "9" * 5000}]}], "rules[0].then[0].count", "<= 1073741824"),
        ([{"then": [{"math": "a", "op": "add", "value": "1", "round": "9" * 5000}]}], "rules[0].then[0].round", "<="),
        (
            [{"when": {"field": "a", "op": "matches", "value": "a{" + "9" * 5000 + "}"}}],
            "rules[0].when.value",
            "repeat",
        ),
        (
            [{"when": {"field": "a", "op": "matches", "value": "a{\u0661}"}}],
            "rules[0].when.value",
            "must start a repeat",
        ),
        ([{"when": {"field": "a", "op": "matches", "value": "(a"}}], "rules[0].when.value", "regular expression"),
        ([{"when": {"field": "a", "op": "matches", "value": "(?<=a)b"}}], "rules[0].when.value", "(?:...)"),
        ([{"when": {"field": "a", "op": "empty", "value": "x"}}], "rules[0].when.value", "no value"),
        (
            [{"when": {"field": "a", "op": "eq", "value": "x", "case_sensitive": "sure"}}],
            "rules[0].when.case_sensitive",
            "true or false",
        ),
        ([{"when": {"all": {"field": "a", "op": "empty"}}}], "rules[0].when.all", "list of conditions"),
        ([{"when": {"all": [{"field": "a", "op": "empty"}, 3]}}], "rules[0].when.all[1]", "condition"),
        ([{"when": {"any": [], "not": {}}}], "rules[0].when.not", "unknown key"),
        ([{"then": "exclude"}], "rules[0].then", "list of actions"),
        ([{"then": [{"colour": "x"}]}], "rules[0].then[0]", "must name one action"),
        ([{"then": [{"set": "a", "copy": "b"}]}], "rules[0].then[0]", "two actions"),
        ([{"then": [{"set": "a"}]}], "rules[0].then[0].value", "required"),
        ([{"then": [{"set": "a", "value": "x", "to": "y"}]}], "rules[0].then[0].to", "unknown key"),
        ([{"then": [{"set": "", "value": "x"}]}], "rules[0].then[0].set", "field name"),
        ([{"then": [{"set": "id", "value": "x"}]}], "rules[0].then[0].set", "key field"),
        ([{"else": [{"copy": "id", "from": "x"}]}], "rules[0].else[0].copy", "key field"),
        ([{"then": [{"set": "a", "value": "{"}]}], "rules[0].then[0].value", "lone '{'"),
        ([{"then": [{"replace": "a", "find": "", "with": "x"}]}], "rules[0].then[0].find", "empty"),
        ([{"then": [{"regex_replace": "a", "pattern": "a**"}]}], "rules[0].then[0].pattern", "nothing to repeat"),
        ([{"then": [{"regex_replace": "a", "pattern": "(a)", "with": "\\2"}]}], "rules[0].then[0].with", "group 2"),
        ([{"then": [{"truncate": "a", "length": "ten"}]}], "rules[0].then[0].length", "whole number >= 0"),
        ([{"then": [{"truncate": "a", "length": 2.5}]}], "rules[0].then[0].length", "whole number >= 0"),
        ([{"then": [{"math": "a", "op": "power", "value": "2"}]}], "rules[0].then[0].op", "add, subtract"),
        ([{"then": [{"math": "a", "op": "add", "value": "two"}]}], "rules[0].then[0].value", "number"),
        ([{"then": [{"math": "a", "op": "add", "value": "2", "round": "31"}]}], "rules[0].then[0].round", "<= 30"),
        ([{"then": [{"map": "a", "values": ["x"]}]}], "rules[0].then[0].values", "mapping"),
        ([{"then": [{"map": "a", "values": {"x": "{y"}}]}], "rules[0].then[0].values.x", "lone '{'"),
        ([{"then": [{"exclude": "perhaps"}]}], "rules[0].then[0].exclude", "true or false"),
        ([{"then": []}, {"then": [{"lowercase": "a", "x": 1}]}], "rules[1].then[0].x", "unknown key"),
    ],
)
def test_every_mistake_is_a_spec_error_naming_its_path(raw: Any, path: str, words: str) -> None:
    err = error(raw)
    assert err.path == path
    assert words in err.detail


def test_parse_condition_names_the_callers_path() -> None:
    with pytest.raises(SpecError) as info:
        parse_condition({"field": "a", "op": "nope", "value": "x"}, "exports[0].where")
    assert info.value.path == "exports[0].where.op"
