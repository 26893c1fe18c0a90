"""The reference evaluator does what SPEC sections 3 and 8 say, example by example."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.rules._text import simple_lower, simple_upper
from firefeed.rules.model import parse_condition, parse_rules
from firefeed.rules.reference import apply_rules, matches


def run(items: list[dict[str, str]], raw: Any) -> Any:
    return apply_rules(items, parse_rules(raw, key_field="id"))


def one(action: dict[str, Any], value: str, field: str = "f") -> str:
    return run([{"id": "1", field: value}], [{"then": [action]}]).items[0][field]


def test_truncate_drops_the_cut_word_as_in_the_spec() -> None:
    assert one({"truncate": "f", "length": 30}, "Lux Mocassino in pelle con cuciture") == "Lux Mocassino in pelle con"


@pytest.mark.parametrize(
    ("value", "n", "want"),
    [
        ("short", 5, "short"),
        ("short  ", 7, "short  "),  # N characters or fewer: unchanged, even trailing white space
        ("abcdef", 3, "abc"),  # one long word: a hard cut
        ("ab cd", 3, "ab"),
        ("abc d", 3, "abc"),  # the next character is white space: the word is whole
        ("a  bc", 4, "a"),
        ("ab\u00a0cd ef", 4, "ab"),
        ("abc", 0, ""),
    ],
)
def test_truncate_edges(value: str, n: int, want: str) -> None:
    assert one({"truncate": "f", "length": n}, value) == want


def test_capitalize_starts_words_after_white_space_only() -> None:
    assert one({"capitalize": "f"}, "l'uomo x-men") == "L'uomo X-men"
    assert one({"capitalize": "f"}, "ǆemal ßtraße İSTANBUL ΣΟΦΟΣ\u2003éTÉ") == "Ǆemal ßtraße İstanbul Σοφοσ\u2003Été"


def test_case_mapping_is_the_simple_one_to_one_mapping() -> None:
    assert simple_upper("ß") == "ß"
    assert simple_lower("İ") == "i"
    assert simple_lower("ΟΔΟΣ") == "οδοσ"  # no final sigma
    assert simple_upper("ǅ") == "Ǆ" and simple_lower("ǅ") == "ǆ"
    assert simple_upper("ᾳ") == "ᾼ"
    assert one({"uppercase": "f"}, "straße") == "STRAßE"


def test_trim_strips_and_folds_unicode_white_space() -> None:
    assert one({"trim": "f"}, "\u3000 a \t\n b\u00a0") == "a b"


@pytest.mark.parametrize(
    ("value", "op", "x", "places", "want"),
    [
        ("19,99 EUR", "multiply", "2", 2, "39.98 EUR"),
        ("0.125", "add", "0", 2, "0.13"),
        ("-0.125", "add", "0", 2, "-0.13"),
        ("-0.001", "add", "0", 2, "0.00"),  # no negative zero
        ("2.5", "add", "0", 0, "3"),  # round 0: no decimal point
        ("1.299,00", "multiply", "1", 2, "1.30,00"),  # reads 1.299; only that number is replaced
        ("a 10 b 20", "subtract", "0.5", 1, "a 9.5 b 20"),
        ("10", "divide", "3", 4, "3.3333"),
        ("10", "divide", "0", 2, "10"),  # divide by zero: unchanged
        ("no number", "add", "1", 2, "no number"),
        ("-1", "multiply", "0", 2, "0.00"),
    ],
)
def test_math(value: str, op: str, x: str, places: int, want: str) -> None:
    assert one({"math": "f", "op": op, "value": x, "round": places}, value) == want


def test_map_empty_key_matches_missing_and_empty_values() -> None:
    raw = [{"then": [{"map": "c", "values": {"": "none", "red": "R"}}]}]
    out = run([{"id": "1"}, {"id": "2", "c": ""}, {"id": "3", "c": "red"}, {"id": "4", "c": "Red"}], raw)
    assert [i["c"] for i in out.items] == ["none", "none", "R", "Red"]


def test_map_default_is_a_template() -> None:
    raw = [{"then": [{"map": "c", "values": {"a": "A"}, "default": "{c}?"}]}]
    assert [i["c"] for i in run([{"id": "1", "c": "a"}, {"id": "2", "c": "b"}], raw).items] == ["A", "b?"]


def test_exclude_hides_the_item_from_later_rules_and_counts_it() -> None:
    raw = [
        {"name": "drop", "when": {"field": "t", "op": "contains", "value": "TEST"}, "then": [{"exclude": "true"}]},
        {"name": "all", "then": [{"append": "t", "value": "!"}]},
    ]
    out = run([{"id": "1", "t": "a test"}, {"id": "2", "t": "b"}], raw)
    assert out.items == [{"id": "2", "t": "b!"}]
    assert out.matched == {"drop": 1, "all": 1}
    assert out.excluded == 1


def test_else_runs_for_items_that_do_not_match_and_when_is_read_once() -> None:
    raw = [
        {
            "when": {"field": "t", "op": "eq", "value": "a"},
            "then": [{"set": "t", "value": "b"}],
            "else": [{"set": "t", "value": "a"}],
        }
    ]
    out = run([{"id": "1", "t": "A"}, {"id": "2", "t": "x"}], raw)
    assert [i["t"] for i in out.items] == ["b", "a"]
    assert out.matched == {"rule 1": 1}


def test_disabled_rules_keep_the_numbering_and_do_nothing() -> None:
    raw = [{"enabled": "false", "then": [{"set": "t", "value": "x"}]}, {"then": [{"set": "u", "value": "{t}"}]}]
    out = run([{"id": "1", "t": "a"}], raw)
    assert out.items == [{"id": "1", "t": "a", "u": "a"}]
    assert out.matched == {"rule 2": 1}


def test_templates_read_current_values_and_missing_fields_as_empty() -> None:
    raw = [{"then": [{"set": "t", "value": "{brand} {t} {{x}}"}, {"prepend": "t", "value": "[{nope}]"}]}]
    assert run([{"id": "1", "t": "shoe", "brand": "Lux"}], raw).items[0]["t"] == "[]Lux shoe {x}"


@pytest.mark.parametrize(
    ("cond", "item", "want"),
    [
        ({"field": "t", "op": "eq", "value": "STRASSE"}, {"t": "strasse"}, True),
        ({"field": "t", "op": "eq", "value": "STRASSE"}, {"t": "straße"}, False),
        ({"field": "t", "op": "eq", "value": "i"}, {"t": "İ"}, True),
        ({"field": "t", "op": "eq", "value": "ΟΔΟΣ"}, {"t": "οδος"}, False),  # ς is not σ
        ({"field": "t", "op": "eq", "value": "A", "case_sensitive": "true"}, {"t": "a"}, False),
        ({"field": "t", "op": "contains", "value": "{b}"}, {"t": "xYz", "b": "y"}, True),
        ({"field": "t", "op": "contains", "value": ""}, {"t": ""}, True),
        ({"field": "t", "op": "ends_with", "value": "Z"}, {"t": "xyz"}, True),
        ({"field": "t", "op": "in", "value": ["A", "b"]}, {"t": "a"}, True),
        ({"field": "t", "op": "not_in", "value": ["A", "b"]}, {}, True),
        ({"field": "t", "op": "matches", "value": "^A.c$"}, {"t": "a\nc"}, True),
        ({"field": "t", "op": "matches", "value": "c$"}, {"t": "abc\n"}, False),
        ({"field": "t", "op": "matches", "value": "\\d"}, {"t": "٣"}, False),  # \d is ASCII digits
        ({"field": "t", "op": "empty"}, {"t": " \u00a0\u3000"}, True),
        ({"field": "t", "op": "empty"}, {}, True),
        ({"field": "t", "op": "not_empty"}, {"t": "\u200b"}, True),  # a zero-width space is not white space
        ({"field": "q", "op": "lte", "value": "0"}, {"q": "0 pcs"}, True),
        ({"field": "q", "op": "gt", "value": "1,5"}, {"q": "EUR 1.6"}, True),
        ({"field": "q", "op": "lt", "value": "0"}, {"q": "none"}, False),
        ({"field": "q", "op": "gte", "value": "-1"}, {"q": "a--1"}, True),
        ({"field": "t", "op": "length_gt", "value": "2"}, {"t": "ßßß"}, True),
        ({"field": "t", "op": "length_lt", "value": "1"}, {}, True),
    ],
)
def test_condition_ops(cond: dict[str, Any], item: dict[str, str], want: bool) -> None:
    assert matches(parse_condition(cond, "when"), item) is want


def test_regex_replace_groups_and_literal_backslash() -> None:
    action = {"regex_replace": "f", "pattern": "([0-9]+),([0-9]+)", "with": "\\1.\\2 \\\\ &"}
    assert one(action, "1,5 and 2,25") == "1.5 \\ & and 2.25 \\ &"


def test_replace_is_literal_and_case_sensitive() -> None:
    assert one({"replace": "f", "find": ".*", "with": "-"}, "a.*b.*A") == "a-b-A"
