"""Each op and action through the SQL route gives what the reference gives, on hand-picked edge values."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.run_tables import RunTables
from firefeed.db.engine import raw_connection
from firefeed.pipeline.rule_passes import run_rules
from firefeed.rules._text import capitalize, simple_lower, simple_upper
from firefeed.rules.executor import plan_passes, prepare_pass, run_pass_chunk
from firefeed.rules.model import parse_condition, parse_rules
from firefeed.rules.reference import matches
from firefeed.rules.sqlgen import condition_sql
from firefeed.schema.identifiers import column_for_field, ident
from firefeed.schema.service import SchemaService
from firefeed.textutil import WHITESPACE
from tests.integration.test_rules_differential import COMPANY, KEY_FIELD, assert_same, load_items, read_items

pytestmark = pytest.mark.integration

HOSTILE = ['we"ird; DROP TABLE x; --', "select", "Ünï cödé ✓", "x" * 200, "_ff_ord", "a.b"]
FIELDS = [KEY_FIELD, "t", "p", *HOSTILE]
EDGE = [
    "",
    " ",
    "\u00a0\u3000",
    "a",
    "A",
    "l'uomo x-men",
    "ǅemal ßtraße İSTANBUL ΟΔΟΣ",
    "Lux Mocassino in pelle con cuciture",
    "19,99 EUR",
    "1.299,00",
    "-0.125",
    "0.125",
    "-0.001",
    "x 10 y 20",
    "a\nb\tc",
    "  lead and trail  ",
    "%_\\'\"",
    "٣ ²",
    "ǆ\u2003x-MEN",
    "00 0 .0",
]


def items() -> list[dict[str, str]]:
    out = []
    for i, value in enumerate(EDGE):
        item = {KEY_FIELD: str(i), "t": value, "p": EDGE[(i + 7) % len(EDGE)]}
        for j, name in enumerate(HOSTILE):
            item[name] = EDGE[(i + j + 3) % len(EDGE)]
        out.append(item)
    return out


CONDITIONS: list[dict[str, Any]] = [
    {"field": f, "op": op, "value": v, **extra}
    for f in ("t", HOSTILE[0], "missing")
    for op, v, extra in [
        ("eq", "a", {}),
        ("eq", "ǆemal ßtraße istanbul οδοσ", {}),
        ("ne", "{p}", {}),
        ("contains", "E", {}),
        ("not_contains", "-", {"case_sensitive": "true"}),
        ("starts_with", "l'", {}),
        ("ends_with", "EUR", {}),
        ("ends_with", "{p}", {}),
        ("in", ["a", "", " "], {}),
        ("not_in", ["A"], {"case_sensitive": True}),
        ("matches", "^\\s*$", {}),
        ("matches", "[0-9]+[.,][0-9]", {}),
        ("matches", "İ|ǅ", {}),
        ("matches", "X-M", {"case_sensitive": "yes"}),
        ("empty", None, {}),
        ("not_empty", None, {}),
        ("gt", "0", {}),
        ("gte", "19.99", {}),
        ("lt", "-0,1", {}),
        ("lte", "1.299", {}),
        ("length_gt", "5", {}),
        ("length_lt", "2", {}),
        # more bytes than characters: the byte count alone would decide these wrongly
        ("length_gt", "26", {}),  # "ǅemal ßtraße İSTANBUL ΟΔΟΣ": 26 characters, 34 bytes
        ("length_lt", "27", {}),
        ("length_gt", "10", {}),  # "Ünï cödé ✓": 10 characters, 16 bytes
    ]
]

ACTIONS: list[dict[str, Any]] = [
    {"set": "t", "value": "{p} & {t} {{lit}}"},
    {"copy": "t", "from": HOSTILE[3]},
    {"copy": "t", "from": "missing"},
    {"append": "t", "value": " {select}"},
    {"prepend": HOSTILE[0], "value": "»"},
    {"replace": "t", "find": " ", "with": "\\&%"},
    {"regex_replace": "t", "pattern": "([0-9]+),([0-9]+)", "with": "\\2.\\1\\\\&"},
    {"regex_replace": "t", "pattern": "\\s+", "with": "_"},
    {"lowercase": "t"},
    {"uppercase": "t"},
    {"capitalize": "t"},
    {"capitalize": HOSTILE[2]},
    {"trim": "t"},
    {"truncate": "t", "length": 30},
    {"truncate": "t", "length": 3},
    {"truncate": "t", "length": 0},
    {"truncate": "t", "length": 26},  # "ǅemal ßtraße İSTANBUL ΟΔΟΣ" stays whole: 26 characters in 34 bytes
    {"math": "t", "op": "multiply", "value": "2"},
    {"math": "t", "op": "add", "value": "0", "round": "2"},
    {"math": "t", "op": "subtract", "value": "0.005", "round": "0"},
    {"math": "t", "op": "divide", "value": "3", "round": "5"},
    {"math": "t", "op": "divide", "value": "0"},
    {"math": "t", "op": "divide", "value": "-7", "round": "30"},
    {"map": "t", "values": {"": "empty", "a": "{p}"}},
    {"map": "t", "values": {"a": "A"}, "default": "<{t}>"},
    {"map": "t", "values": {str(i): f"v{i}" for i in range(20)} | {"a": "big"}},
    {"set": "brand new", "value": "{t}|{p}"},
    {"exclude": "true"},
]


@pytest.mark.parametrize("cond", CONDITIONS, ids=lambda c: f"{c['op']}:{c['field'][:8]}")
def test_each_condition_op_agrees_with_the_reference(engine: Engine, cond: dict[str, Any]) -> None:
    raw = {k: v for k, v in cond.items() if v is not None}
    assert_same(engine, items(), FIELDS, [{"name": "c", "when": raw, "then": [{"set": "hit", "value": "y"}]}])


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: next(iter(a)))
def test_each_action_agrees_with_the_reference(engine: Engine, action: dict[str, Any]) -> None:
    assert_same(engine, items(), FIELDS, [{"then": [action]}])
    assert_same(
        engine,
        items(),
        FIELDS,
        [{"when": {"field": "p", "op": "not_empty"}, "then": [action], "else": [{"set": "t", "value": "else {t}"}]}],
    )


def test_long_action_chains_in_one_rule_agree(engine: Engine) -> None:
    chain = [
        {"truncate": "t", "length": 12},
        {"math": "t", "op": "multiply", "value": "3"},
        {"truncate": "t", "length": 6},
        {"capitalize": "t"},
        {"set": "u", "value": "{t}{t}"},
        {"truncate": "u", "length": 5},
        {"math": "u", "op": "divide", "value": "7", "round": 3},
    ]
    assert_same(
        engine,
        items(),
        FIELDS,
        [{"when": {"field": "t", "op": "length_gt", "value": "3"}, "then": chain, "else": list(reversed(chain))}],
    )


def test_rules_see_what_earlier_rules_left_and_excluded_items_are_gone(engine: Engine) -> None:
    raw = [
        {"name": "tag", "then": [{"set": "tag", "value": "{t}"}]},
        {"name": "upper tag", "when": {"field": "tag", "op": "contains", "value": "a"}, "then": [{"uppercase": "tag"}]},
        {
            "name": "drop",
            "when": {"field": "tag", "op": "matches", "value": "X-MEN", "case_sensitive": "true"},
            "then": [{"exclude": True}],
            "else": [{"append": "tag", "value": "."}],
        },
        {"name": "after", "when": {"field": "tag", "op": "ends_with", "value": "."}, "then": [{"trim": "tag"}]},
        {
            "name": "drop all but",
            "when": {"field": "p", "op": "empty"},
            "then": [{"set": "x", "value": "1"}],
            "else": [{"exclude": "yes"}],
        },
        {
            "name": "both",
            "when": {"field": "t", "op": "eq", "value": "a"},
            "then": [{"exclude": True}],
            "else": [{"exclude": True}],
        },
    ]
    for n in range(3, len(raw) + 1):
        assert_same(engine, items(), FIELDS, raw[:n])


def test_condition_sql_reads_a_missing_field_as_empty_and_binds_every_value(engine: Engine) -> None:
    cond = parse_condition(
        {"all": [{"field": "t", "op": "eq", "value": "it's {u}"}, {"field": "gone", "op": "empty"}]}, "where"
    )
    params: list[Any] = []
    text = condition_sql(cond, lambda f: sql.SQL("''::text") if f == "gone" else sql.Literal(f"it's {f}"), params)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT ") + text, params)
        assert cur.fetchone()[0] is False  # "it's t" vs "it's it's u"
        assert "it's" not in text.as_string(conn)  # literal parts are bound, not inlined
    assert matches(cond, {"t": "it's ", "u": ""})


def test_no_enabled_rule_keeps_the_source_table(engine: Engine) -> None:
    service = SchemaService(engine)
    load_items(engine, service, COMPANY, "items_norules", FIELDS, items())
    try:
        rules = parse_rules([{"enabled": "false", "then": [{"exclude": True}]}], key_field=KEY_FIELD)
        result = run_rules(
            engine,
            service,
            company=COMPANY,
            run_id=str(uuid.uuid4()),
            source_table="items_norules",
            fields=FIELDS,
            rules=rules,
        )
        assert (result.table, result.passes, result.rows_in, result.rows_out) == ("items_norules", 0, 20, 20)
    finally:
        service.drop_table(COMPANY, "items_norules")


def test_passes_drop_the_previous_pass_table_but_never_the_source(engine: Engine) -> None:
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    load_items(engine, service, COMPANY, "items_passes", FIELDS, items())
    raw = [
        {"then": [{"set": "a", "value": "1"}]},
        {"when": {"field": "t", "op": "empty"}, "then": [{"exclude": 1}]},
        {"when": {"field": "p", "op": "empty"}, "then": [{"exclude": 1}]},
        {"then": [{"trim": "t"}]},
    ]
    try:
        result = run_rules(
            engine,
            service,
            company=COMPANY,
            run_id=run_id,
            source_table="items_passes",
            fields=FIELDS,
            rules=parse_rules(raw, key_field=KEY_FIELD),
        )
        assert result.passes == 3
        left = [
            t
            for _, t in RunTables(service).list_rules_tmp(COMPANY)
            if t.startswith(f"rules_tmp_{run_id.replace('-', '')}")
        ]
        assert left == [result.table]
        assert service.table_exists(COMPANY, "items_passes")
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, "items_passes")


def test_a_pass_run_in_chunks_gives_the_batch_result(engine: Engine) -> None:
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    load_items(engine, service, COMPANY, "items_chunks", FIELDS, items())
    raw = [
        {"name": "drop", "when": {"field": "t", "op": "length_lt", "value": "3"}, "then": [{"exclude": 1}]},
        {"name": "cap", "when": {"field": "p", "op": "not_empty"}, "then": [{"capitalize": "t"}]},
        {"name": "all", "then": [{"set": "n", "value": "{t}!"}]},
    ]
    rules = parse_rules(raw, key_field=KEY_FIELD)
    try:
        [plan] = plan_passes(rules, FIELDS)
        dst = prepare_pass(service, company=COMPANY, run_id=run_id, plan=plan)
        totals: dict[str, int] = {}
        rows_in = rows_out = 0
        for lo, hi in [(None, 5), (6, 12), (13, None)]:
            with raw_connection(engine) as conn:
                counts = run_pass_chunk(conn, plan, "items_chunks", dst, lo, hi, company=COMPANY)
            rows_in += counts.rows_in
            rows_out += counts.rows_out
            for name, n in counts.matched.items():
                totals[name] = totals.get(name, 0) + n
        chunked = read_items(engine, COMPANY, dst, list(plan.fields_out))
        service.drop_table(COMPANY, dst)
        batch = run_rules(
            engine, service, company=COMPANY, run_id=run_id, source_table="items_chunks", fields=FIELDS, rules=rules
        )
        assert chunked == read_items(engine, COMPANY, batch.table, batch.fields)
        assert (rows_in, rows_out, totals) == (batch.rows_in, batch.rows_out, batch.matched)
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, "items_chunks")


def test_python_case_mapping_is_postgres_lower_upper_over_all_of_unicode(engine: Engine) -> None:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT s, lower(s), upper(s) FROM (SELECT string_agg(chr(c), '' ORDER BY c) AS s "
            "FROM generate_series(1, 1114111) c WHERE c NOT BETWEEN 55296 AND 57343) x"
        )
        text, lower, upper = cur.fetchone()
    assert simple_lower(text) == lower
    assert simple_upper(text) == upper


def test_capitalize_agrees_with_postgres_on_every_cased_bmp_character(engine: Engine) -> None:
    chars = [
        chr(c)
        for c in range(0x20, 0x10000)
        if not 0xD800 <= c <= 0xDFFF and (chr(c).lower() != chr(c) or chr(c).upper() != chr(c))
    ]
    words = [f"{a}{b}{a}-{b} {b}'{a}" for a, b in zip(chars, reversed(chars), strict=True)]
    service = SchemaService(engine)
    load_items(
        engine,
        service,
        COMPANY,
        "items_cap",
        [KEY_FIELD, "t"],
        [{KEY_FIELD: str(i), "t": w} for i, w in enumerate(words)],
    )
    run_id = str(uuid.uuid4())
    try:
        rules = parse_rules([{"then": [{"capitalize": "t"}]}], key_field=KEY_FIELD)
        result = run_rules(
            engine,
            service,
            company=COMPANY,
            run_id=run_id,
            source_table="items_cap",
            fields=[KEY_FIELD, "t"],
            rules=rules,
        )
        got = [r["t"] for r in read_items(engine, COMPANY, result.table, result.fields)]
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, "items_cap")
    assert got == [capitalize(w) for w in words]


def test_hostile_field_names_become_quoted_columns(engine: Engine) -> None:
    assert column_for_field(HOSTILE[3]) != HOSTILE[3]  # 200 characters: a shortened column
    assert ident(column_for_field(HOSTILE[0]))  # usable; the quotes are doubled by psycopg2


# -- fast paths (empty test, trim guard, shared number texts, overlay math, literal patterns) --
WS_EDGE = [
    "",
    " ",
    "  ",
    *WHITESPACE,
    "\u00a0\u3000",
    "\u0085x",
    "x\u0085",
    " lead",
    "trail ",
    "\u3000lead",
    "trail\u00a0",
    "in  ner",
    "in\u2003ner",
    "a b c",
    "a\tb",
    "5 and 5",
    "x 5 and 5",
    "-5 apples",
    "a-5",
    "--5",
    "1,5 kg",
    "x 1,5 y 1,5",
    "5.5.5",
    "1.299,00",
    "99,999 EUR",
    "no number",
    "abc5",
    "5abc",
    "0",
    "-0.004",
    "Shoes > İzmir ß",
    "ǅ4",
]


def ws_items() -> list[dict[str, str]]:
    n = len(WS_EDGE)
    return [{KEY_FIELD: str(i), "t": v, "p": WS_EDGE[(i * 5 + 3) % n]} for i, v in enumerate(WS_EDGE)]


@pytest.mark.parametrize("op", ["empty", "not_empty"])
def test_empty_fast_path_on_every_white_space(engine: Engine, op: str) -> None:
    rules = [
        {"when": {"field": "t", "op": op}, "then": [{"set": "hit", "value": "y"}]},
        {"when": {"not": {"field": "p", "op": op}}, "then": [{"set": "hit2", "value": "y"}]},
    ]
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], rules)


def test_trim_guard_agrees_with_the_reference(engine: Engine) -> None:
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], [{"then": [{"trim": "t"}, {"trim": "p"}]}])
    chain = [{"set": "t", "value": "{t} {p}"}, {"trim": "t"}, {"truncate": "t", "length": 4}, {"trim": "t"}]
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], [{"then": chain}])


@pytest.mark.parametrize("op,value,places", [("multiply", "1.22", "2"), ("subtract", "10", "0"), ("divide", "3", "4")])
def test_math_with_a_shared_number_agrees(engine: Engine, op: str, value: str, places: str) -> None:
    math = {"math": "t", "op": op, "value": value, "round": places}
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], [{"then": [math]}])  # number text as a column
    when = {"field": "p", "op": "not_empty"}
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], [{"when": when, "then": [math]}])  # inline

    # several readers of the same value, and of the value after math rewrote it
    def num(f: str, o: str, v: str) -> dict[str, str]:
        return {"field": f, "op": o, "value": v}

    rules = [
        {"name": "a", "when": {"all": [num("t", "gt", "1"), num("t", "lt", "6")]},
         "then": [{"set": "a", "value": "y"}]},
        {"name": "b", "then": [math, {"append": "t", "value": " !"}, {"math": "p", "op": op, "value": value}]},
        {"name": "c", "when": {"field": "t", "op": "gte", "value": "5"}, "then": [{"set": "c", "value": "y"}]},
        {"name": "d", "when": {"field": "t", "op": "lte", "value": "0"}, "then": [{"set": "c", "value": "n"}],
         "else": [math]},
        {"name": "e", "when": {"field": "p", "op": "gt", "value": "0"}, "then": [{"set": "e", "value": "{t}"}]},
        {"name": "f", "when": {"any": [num("t", "lt", "-1"), num("e", "gt", "1")]},
         "then": [{"exclude": True}]},
        {"name": "g", "when": {"field": "t", "op": "gt", "value": "2"}, "then": [math], "else": [math, math]},
    ]  # fmt: skip
    for n in range(2, len(rules) + 1):
        assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], rules[:n])


@pytest.mark.parametrize(
    "leaf",
    [
        {"op": "matches", "value": "Shoes"},
        {"op": "matches", "value": "shoes", "case_sensitive": True},
        {"op": "matches", "value": "İZMİR ß"},
        {"op": "matches", "value": "5 and"},
        {"op": "matches", "value": "a\\-5"},
        {"op": "starts_with", "value": "ǆ"},
        {"op": "starts_with", "value": "x 5 and 5 and more"},
        {"op": "starts_with", "value": "\u3000L", "case_sensitive": True},
        {"op": "ends_with", "value": "Ner"},
        {"op": "ends_with", "value": "ß"},
        {"op": "ends_with", "value": "\u0085"},
        {"op": "ends_with", "value": "4", "case_sensitive": True},
        {"op": "ends_with", "value": ""},
        {"op": "starts_with", "value": ""},
    ],
    ids=lambda c: f"{c['op']}:{c['value']}",
)
def test_literal_patterns_and_ends_agree(engine: Engine, leaf: dict[str, Any]) -> None:
    rules = [{"when": {"field": "t", **leaf}, "then": [{"set": "hit", "value": "y"}]}]
    assert_same(engine, ws_items(), [KEY_FIELD, "t", "p"], rules)
