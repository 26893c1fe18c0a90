"""Compiled rules grow linearly with the spec, and a spec past the SQL cap is a spec error naming the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from psycopg2 import sql

from firefeed.config import reset_settings
from firefeed.errors import SpecError
from firefeed.rules._plan import plan_passes
from firefeed.rules.limits import check_sql_size, plan_bytes, spec_fields, statement_bytes
from firefeed.rules.model import MAX_CONDITION_DEPTH, parse_rules
from firefeed.rules.sqlgen import pass_insert
from firefeed.schema.identifiers import ident
from firefeed.spec.loader import parse_spec

FIELDS = ["id", "title", "price", "a", "b", "c"]


def when(i: int) -> dict[str, str]:
    return {"field": "title", "op": "eq", "value": f"v{i}"}


def appends(n: int) -> list[dict[str, Any]]:
    """The issue's rules: each appends to the same field when its own condition holds."""
    return [{"when": when(i), "then": [{"append": "price", "value": "a"}]} for i in range(1, n + 1)]


SHAPES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "conditional appends": appends,
    "appends in both branches": lambda n: [
        {"when": when(i), "then": [{"append": "price", "value": "a"}], "else": [{"append": "price", "value": "b"}]}
        for i in range(n)
    ],
    "copies feeding one template, in one rule": lambda n: [
        {"then": [{"set": "b", "value": "{a}"}, {"set": "c", "value": "{a}"}, {"set": "a", "value": "{b}{c}"}] * n}
    ],
    "maps reading their own field": lambda n: [
        {"when": when(i), "then": [{"map": "a", "values": {"p": "{a}q", "r": "{a}s"}, "default": "{a}"}]}
        for i in range(n)
    ],
    "copy then append the copy": lambda n: [
        {"when": when(i), "then": [{"copy": "c", "from": "a"}, {"append": "a", "value": "{c}"}]} for i in range(n)
    ],
    "one long chain of appends": lambda n: [{"then": [{"append": "a", "value": "x"}] * (5 * n)}],
}


def compiled(
    raw: list[dict[str, Any]], fields: list[str] = FIELDS, lists: frozenset[str] = frozenset()
) -> tuple[int, int]:
    """(bytes of SQL, bound values) over every pass of the rules."""
    plans = plan_passes(parse_rules(raw, key_field="id", declared_lists=lists), fields)
    statements = [pass_insert(p, ident("s", "src"), ident("s", "dst")) for p in plans]
    return sum(statement_bytes(s) for s in statements), sum(len(s.params) for s in statements)


def assert_no_doubling() -> None:
    """Twelve of the issue's rules compile small: the tests that compile hundreds can do so safely
    (before the fix, twelve took 200 kB and two hundred would have taken all memory)."""
    size, _ = compiled(appends(12))
    assert size < 34_000


@pytest.mark.parametrize("shape", SHAPES)
def test_compiled_sql_grows_linearly_with_the_number_of_rules(shape: str) -> None:
    # Growing n step by step: a doubling shape fails at a dozen rules, long before it would take gigabytes.
    for n in (4, 8, 12, 16, 50, 200):
        size, params = compiled(SHAPES[shape](n))
        assert size < 2_000 * n + 10_000, f"{n} rules: {size} bytes"
        assert params < 20 * n + 100, f"{n} rules: {params} values"


#: shapes on list fields (SPEC 9): `a` declared, `b` a list because a rule splits it
LIST_SHAPES: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "the last element, again and again": lambda n: [{"then": [{"set": "a", "value": "{a[-1]}-"}] * n}],
    "per-element actions in one chain": lambda n: [
        {"then": [{"uppercase": "a"}, {"replace": "a", "find": "x", "with": "y"}, {"take": "a", "count": "3"}] * n}
    ],
    "removes and dedupes": lambda n: [
        {"then": [{"remove": "a", "when": {"field": "_", "op": "eq", "value": "{a[0]}"}}, {"dedupe": "a"}] * n}
    ],
    "appends to an undeclared list": lambda n: [
        {"then": [{"split": "b", "separator": ","}, *[{"append": "b", "value": "{b[-1]}x"}] * n]}
    ],
    "maps on no elements": lambda n: [{"then": [{"map": "a", "values": {"": "{a}e"}, "default": "{a[0]}"}] * n}],
}


@pytest.mark.parametrize("shape", LIST_SHAPES)
def test_compiled_sql_on_lists_grows_linearly_with_the_number_of_actions(shape: str) -> None:
    for n in (4, 8, 12, 16, 50):
        size, _ = compiled(LIST_SHAPES[shape](n), lists=frozenset({"a"}))
        assert size < 4_000 * n + 10_000, f"{n} actions: {size} bytes"


def test_two_hundred_conditional_appends_compile_to_under_a_megabyte_in_all() -> None:
    assert_no_doubling()
    size, params = compiled(appends(200))
    assert size < 1024**2
    assert params < 2_000


def rendered(node: sql.Composable) -> str:
    """The statement's text, walked recursively as psycopg2 and firefeed.db.engine do."""
    if isinstance(node, sql.Composed):
        return "".join(rendered(part) for part in node.seq)
    if isinstance(node, sql.Identifier):
        return ".".join('"' + s.replace('"', '""') + '"' for s in node.strings)
    assert isinstance(node, sql.SQL)
    return node.string


def test_a_chain_of_a_thousand_appends_compiles_without_exhausting_the_stack() -> None:
    plans = plan_passes(parse_rules([{"then": [{"append": "a", "value": "x"}] * 1000}], key_field="id"), FIELDS)
    statements = [pass_insert(p, ident("s", "src"), ident("s", "dst")) for p in plans]
    assert sum(len(rendered(s.sql)) for s in statements) < 200_000
    assert sum(len(p.levels) for p in plans) > 1  # the chain is cut into steps of bounded depth


def test_the_common_rules_keep_their_levels() -> None:
    # bench/bench_rules.yaml's shape: set then conditional set of one field stays in one level.
    raw = [
        {"when": when(1), "then": [{"set": "a", "value": "premium"}], "else": [{"set": "a", "value": "mid"}]},
        {"when": when(2), "then": [{"set": "a", "value": "budget"}]},
        {"when": when(3), "then": [{"set": "b", "value": "no_gtin"}]},
        {"when": when(4), "then": [{"prepend": "b", "value": "g0 "}]},
    ]
    plans = plan_passes(parse_rules(raw, key_field="id"), FIELDS)
    assert [len(level) for level in plans[0].levels] == [4]


def test_the_rule_that_crosses_the_cap_is_named_by_its_path() -> None:
    assert_no_doubling()
    raw = [{"name": "off", "enabled": False, "then": [{"set": "a", "value": "x"}]}, *appends(60)]
    rules = parse_rules(raw, key_field="id")
    limit = 12_000
    with pytest.raises(SpecError) as info:
        check_sql_size(rules, FIELDS, limit)
    err = info.value
    index = int(err.path.removeprefix("rules[").removesuffix("]"))
    assert f"rule {rules[index].name!r}" in err.message and "rules_max_sql_bytes" in err.message
    enabled = [r for r in rules if r.enabled]
    position = enabled.index(rules[index])
    assert plan_bytes(plan_passes(enabled[:position], FIELDS)) <= limit
    assert plan_bytes(plan_passes(enabled[: position + 1], FIELDS)) > limit
    assert check_sql_size(rules[:index], FIELDS, limit)  # the rules before it pass


def test_spec_fields_are_the_key_and_every_field_a_rule_names() -> None:
    rules = parse_rules(
        [{"when": {"field": "brand", "op": "empty"}, "then": [{"set": "title", "value": "{brand} {color}"}]}],
        key_field="sku",
    )
    assert spec_fields(rules, "sku") == ["sku", "brand", "color", "title"]


def spec(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"company": "acme", "project": "p", "sources": [{"name": "main", "url": "main.csv"}], "rules": rules}


def test_a_spec_over_the_cap_is_a_spec_error_when_it_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFEED_RULES_MAX_SQL_BYTES", "20000")
    reset_settings()
    try:
        assert parse_spec(spec(appends(20))).parsed_rules
        with pytest.raises(SpecError) as info:
            parse_spec(spec(appends(200)))
        assert info.value.path.startswith("rules[")
        assert "rules_max_sql_bytes (20000 bytes of SQL" in str(info.value)
    finally:
        monkeypatch.delenv("FIREFEED_RULES_MAX_SQL_BYTES")
        reset_settings()
    assert parse_spec(spec(appends(200))).parsed_rules  # the default cap (4 MiB) takes them


def nested(depth: int) -> dict[str, Any]:
    cond: dict[str, Any] = {"field": "title", "op": "eq", "value": "x"}
    for i in range(depth):
        cond = {"not": cond} if i % 2 else {"any": [cond, {"field": "price", "op": "empty"}]}
    return cond


def test_conditions_nest_at_most_the_documented_depth() -> None:
    ok = parse_rules([{"when": nested(MAX_CONDITION_DEPTH), "then": [{"set": "a", "value": "x"}]}], key_field="id")
    assert compiled([{"when": nested(MAX_CONDITION_DEPTH), "then": [{"set": "a", "value": "x"}]}])[0] < 10_000
    assert ok
    for depth in (MAX_CONDITION_DEPTH + 1, 3_000):
        with pytest.raises(SpecError) as info:
            parse_rules([{"when": nested(depth), "then": [{"set": "a", "value": "x"}]}], key_field="id")
        assert info.value.path.startswith("rules[0].when.")
        assert f"more than {MAX_CONDITION_DEPTH} levels deep" in info.value.message
