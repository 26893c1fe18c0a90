"""The SQL route and the reference evaluator agree on random items and random rule lists.

Items mix ASCII, digits, separators, Unicode white space and the characters
whose case mapping is special (ß, İ, Σ/σ/ς, ǅ); rule lists are drawn from the
whole language. Regular expressions come from a pool inside the subset where
Python and Postgres agree on what a match covers (see firefeed.rules._regex).
"""

from __future__ import annotations

import csv
import itertools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree
from psycopg2 import sql
from psycopg2.extras import execute_values
from sqlalchemy import Engine

from firefeed.dataplane.run_tables import RunTables
from firefeed.db.engine import raw_connection
from firefeed.export import write_export
from firefeed.export.google_xml import element_names
from firefeed.pipeline.lookups import build_lookup_table
from firefeed.pipeline.rule_passes import RulesResult, run_rules
from firefeed.rules._text import NUMBER_MAX_CHARS
from firefeed.rules.groups import JOIN_MAX_CHARS
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import parse_rules
from firefeed.rules.reference import apply_rules
from firefeed.schema.identifiers import KEY, ORD, SRC, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from firefeed.spec.model import ExportSpec, LookupSpec
from tests.properties import sql_route

pytestmark = pytest.mark.integration

COMPANY = "rulesdiff"
KEY_FIELD = "id"


# -- test helpers (also used by test_rules_sql) --------------------------------
def load_items(
    engine: Engine,
    service: SchemaService,
    company: str,
    table: str,
    fields: Sequence[str],
    items: Sequence[Mapping[str, Any]],
    lists: ListFields = NO_LISTS,
    *,
    spread: bool = False,
) -> None:
    """A source table like MERGE leaves it: ord, trimmed key, source, one column per field
    (text, or text[] for a list field, whose values are tuples; a text there is staged as MERGE
    writes a source's text in a list field, an array from 0).

    `spread`: one item per heap page (a padding column no pass copies), so that a run cut into
    parts by pages cuts even a few items.
    """
    service.create_company_schema(company)
    service.create_project_table(company, table)
    if spread:
        target = ident(company_schema(company), table)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("ALTER TABLE {} SET (fillfactor = 10)").format(target))
            cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN _ff_pad text DEFAULT repeat('p', 900)").format(target))
    service.add_columns(company, table, [column_for_field(f) for f in fields if f not in lists])
    if lists:
        _add_list_columns(engine, company, table, [column_for_field(f) for f in fields if f in lists])
    columns = [ORD, KEY, SRC, *(column_for_field(f) for f in fields)]

    def value(item: Mapping[str, Any], f: str) -> Any:
        v = item.get(f, () if f in lists else "")
        if f not in lists:
            return v
        if isinstance(v, str):  # cast by the column from its literal: a text is an array from 0
            return '[0:0]={"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"}' if v else "{}"
        return list(v)

    rows = [
        (i + 1, item.get(KEY_FIELD, "").strip(), 0, *(value(item, f) for f in fields)) for i, item in enumerate(items)
    ]
    if not rows:
        return
    with raw_connection(engine) as conn, conn.cursor() as cur:
        statement = sql.SQL("INSERT INTO {} ({}) VALUES %s").format(
            ident(company_schema(company), table), sql.SQL(", ").join(ident(c) for c in columns)
        )
        execute_values(cur, statement.as_string(conn), rows, page_size=1000)


def _add_list_columns(engine: Engine, company: str, table: str, columns: Sequence[str]) -> None:
    """text[] columns, as MERGE makes them for list fields (it creates its table with CREATE TABLE AS)."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        for c in columns:
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} text[] NOT NULL DEFAULT '{{}}'").format(
                    ident(company_schema(company), table), ident(c)
                )
            )


def read_items(
    engine: Engine, company: str, table: str, fields: Sequence[str], lists: ListFields = NO_LISTS
) -> list[dict[str, Any]]:
    """The table's items in physical order (which must be _ff_ord order); a list field's value is the
    reference's: a tuple of elements for a list, a str for a text (an array from 0), () for none."""
    columns = [ORD, *(column_for_field(f) for f in fields)]
    picked: list[sql.Composable] = [ident(c) for c in columns]
    for f in fields:
        if f in lists:
            picked.append(sql.SQL("coalesce(array_lower({}, 1) = 0, false)").format(ident(column_for_field(f))))
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(picked), ident(company_schema(company), table))
        )
        rows = cur.fetchall()
    ords = [r[0] for r in rows]
    assert ords == sorted(ords), "rows are not in _ff_ord order"
    out = []
    for r in rows:
        texts = iter(r[len(columns) :])
        item: dict[str, Any] = {}
        for f, v in zip(fields, r[1 : len(columns)], strict=True):
            if f in lists:
                text = next(texts)
                v = v[0] if text else tuple(v)
            item[f] = v
        out.append(item)
    return out


LOOKUP_KEY = "code"


def _stage_lookups(
    engine: Engine,
    service: SchemaService,
    lookups: Mapping[str, Sequence[Mapping[str, str]]],
    rules: Any,
    group: str | None,
    lists: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """Each lookup's rows staged as PARSE leaves a file and keyed as MERGE's lookup step does: name -> table."""
    tables: dict[str, str] = {}
    for name, rows in lookups.items():
        tag = uuid.uuid4().hex[:12]
        staging, table = f"stg_lk{tag}", f"lkp_t{tag}"
        fields = list(dict.fromkeys(f for row in rows for f in row)) or [LOOKUP_KEY]
        service.create_company_schema(COMPANY)
        service.create_staging_table(COMPANY, staging, [column_for_field(f) for f in fields])
        with raw_connection(engine) as conn, conn.cursor() as cur:
            columns = [ORD, "_ff_line", *(column_for_field(f) for f in fields)]
            if rows:
                statement = sql.SQL("INSERT INTO {} ({}) VALUES %s").format(
                    ident(company_schema(COMPANY), staging), sql.SQL(", ").join(ident(c) for c in columns)
                )
                values = [(i + 1, i + 2, *(row.get(f, "") for f in fields)) for i, row in enumerate(rows)]
                execute_values(cur, statement.as_string(conn), values)
        tables[name] = table
        wanted: list[str] = []
        for rule in parse_rules(rules, key_field=KEY_FIELD, declared_lists=lists, lookups=tables, group=group):
            for a in (*rule.then, *rule.else_):
                if isinstance(a, LookupSet) and a.lookup == name:
                    wanted.extend(c for c in a.columns if c not in wanted)
        spec = LookupSpec(name=name, url=f"{name}.csv", key=LOOKUP_KEY)
        build_lookup_table(
            engine,
            service,
            company=COMPANY,
            lookup=spec,
            staging=staging,
            table=table,
            fields=fields,
            wanted=wanted,
        )
        service.drop_table(COMPANY, staging)
    return tables


def run_both(
    engine: Engine,
    items: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    raw_rules: Any,
    *,
    split: bool = False,
    lists: frozenset[str] = frozenset(),
    exports: Callable[[RulesResult, ListFields], Any] | None = None,
    lookups: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    group: str | None = None,
) -> tuple[RulesResult, list[dict[str, Any]], Any]:
    """Run `raw_rules` through SQL and through the reference; returns (sql result, sql items, reference).

    `lists`: the fields a source declares as lists; with those the rules make lists, their
    values are tuples on both routes (MERGE makes a source's text in such a field one element).
    `exports(result, lists)` runs while the SQL route's result table still exists.
    `lookups`: lookup tables' rows as their files hold them (key column `code`); `group`: the group field.
    """
    service = SchemaService(engine)
    tables = _stage_lookups(engine, service, lookups or {}, raw_rules, group, lists)
    rules = parse_rules(raw_rules, key_field=KEY_FIELD, declared_lists=lists, lookups=tables, group=group)
    project_lists = rules[0].lists if rules else NO_LISTS
    table = f"items_t{uuid.uuid4().hex[:12]}"
    run_id = str(uuid.uuid4())
    load_items(engine, service, COMPANY, table, fields, items, project_lists, spread=split)
    try:
        result = run_rules(
            engine,
            service,
            company=COMPANY,
            run_id=run_id,
            source_table=table,
            fields=fields,
            rules=rules,
            rows=len(items),
            split_min_rows=1 if split else None,
        )
        got = read_items(engine, COMPANY, result.table, result.fields, project_lists)
        if exports is not None:
            exports(result, project_lists)
    finally:
        RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, table)
        for lookup in tables.values():
            service.drop_table(COMPANY, lookup)
    keys = dict.fromkeys(tables, LOOKUP_KEY)
    return result, got, apply_rules(items, rules, lookups=lookups, lookup_keys=keys)


def assert_same(
    engine: Engine,
    items: Sequence[Mapping[str, Any]],
    fields: Sequence[str],
    raw_rules: Any,
    *,
    split: bool = False,
    lists: frozenset[str] = frozenset(),
    lookups: Mapping[str, Sequence[Mapping[str, str]]] | None = None,
    group: str | None = None,
) -> None:
    result, got, want = run_both(
        engine, items, fields, raw_rules, split=split, lists=lists, lookups=lookups, group=group
    )
    assert set(itertools.chain.from_iterable(want.items)) <= set(result.fields)
    names = {name: name for name in lookups or {}}
    project_lists = parse_rules(raw_rules, key_field=KEY_FIELD, declared_lists=lists, lookups=names, group=group)
    listed = project_lists[0].lists if project_lists else NO_LISTS
    expected = [{f: _none(item.get(f, ""), f in listed) for f in result.fields} for item in want.items]
    assert [{f: _none(v, f in listed) for f, v in item.items()} for item in got] == expected
    assert result.matched == want.matched
    assert result.excluded == want.excluded
    assert result.rows_in == len(items)
    assert result.rows_out == len(want.items)
    assert result.lookups == want.lookups


def _none(value: Any, listed: bool) -> Any:
    """A list field's "" and () are the same value: no elements (P1)."""
    return () if listed and value in ("", ()) else value


# -- strategies ----------------------------------------------------------------
ALPHABET = "aAbBxX019.,- \u00a0\u2003\tßİΣσςéÉǅǆſsS'\""
FIELDS = ["title", "price", "brand", 'we"ird; name']
NEW_FIELDS = ["new1", "new2"]
ALL_FIELDS = FIELDS + NEW_FIELDS

texts = st.text(ALPHABET, max_size=8)
WORDS = ["ab", "Xß", "1,5", "é", "'x", "", "x-MEN", "İΣ", "19,99", "-0.125", "ǅa"]
SPACES = [" ", "  ", "\u00a0", "\t ", "\u2003"]
phrases = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from(SPACES)), min_size=1, max_size=4).map(
    lambda parts: "".join(w + s for w, s in parts)
)
values = st.one_of(texts, phrases, st.sampled_from(["", " ", "a", "A", "1,5", "-0.125", "10", "ß", "İ", "Σa"]))
field_names = st.sampled_from(ALL_FIELDS)
templates = st.one_of(
    values.map(lambda v: v.replace("{", "{{").replace("}", "}}")),
    st.builds(lambda f, t: f"{{{f}}}{t}", field_names, st.sampled_from(["", " x", "-"])),
    st.just("{title} {brand}"),
)
numbers = st.sampled_from(["0", "1", "-1", "0.5", "1,22", "3", "7", "0.125", "10"])
MATCH_PATTERNS = [
    "a",
    "^a",
    "b$",
    "[0-9]+",
    "\\s",
    "^\\s*$",
    "ß|ss",
    "[à-ý]",
    "x{2}",
    "\\.",
    "(a|b)x?",
    "[^a-z ]",
    "σ",
    "İ",
    "ǅ|[ǆſ]",
    "i",
    "ǆ",
    "\\d[.,]\\d",
    "\\w+\\s\\w",
]
REPLACE_PATTERNS = [
    ("[0-9]+", "#"),
    ("\\s+", "_"),
    ("([0-9]+)[.,]([0-9]+)", "\\2.\\1"),
    ("^ +", ""),
    (" +$", ""),
    ("ß", "ss"),
    ("[aA]", "\\\\&"),
    ("(x)", "[\\1]"),
    ("é|e", "E"),
    ("\\.", ","),
    ("X*", "-"),
]


@st.composite
def leaves(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(field_names)
    op = draw(
        st.sampled_from(
            [
                "eq",
                "ne",
                "contains",
                "not_contains",
                "starts_with",
                "ends_with",
                "in",
                "not_in",
                "matches",
                "empty",
                "not_empty",
                "gt",
                "gte",
                "lt",
                "lte",
                "length_gt",
                "length_lt",
            ]
        )
    )
    leaf: dict[str, Any] = {"field": name, "op": op}
    if op in ("in", "not_in"):
        leaf["value"] = draw(st.lists(values, max_size=3))
    elif op == "matches":
        leaf["value"] = draw(st.sampled_from(MATCH_PATTERNS))
    elif op in ("gt", "gte", "lt", "lte"):
        leaf["value"] = draw(numbers)
    elif op in ("length_gt", "length_lt"):
        leaf["value"] = str(draw(st.integers(0, 6)))
    elif op not in ("empty", "not_empty"):
        leaf["value"] = draw(templates)
    if op == "matches" and draw(st.integers(0, 2)) == 0:
        leaf["ignore_case"] = draw(st.sampled_from([True, "true"]))  # Postgres' ~* (SPEC 8.20)
    elif draw(st.booleans()):
        leaf["case_sensitive"] = draw(st.sampled_from(["true", "false", True]))
    return leaf


conditions = st.recursive(
    leaves(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"all": xs}, st.lists(inner, max_size=3)),
        st.builds(lambda xs: {"any": xs}, st.lists(inner, max_size=3)),
        st.builds(lambda x: {"not": x}, inner),
    ),
    max_leaves=4,
)


LOOKUP_COLUMNS = ["v1", "v2", "absent"]


@st.composite
def lookup_actions(
    draw: st.DrawFn, names: st.SearchStrategy[str] = field_names, texts: st.SearchStrategy[str] = templates
) -> dict[str, Any]:
    """A lookup on `lk`: some targets from its columns (one it lacks too), maybe defaults."""
    targets = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    out: dict[str, Any] = {"lookup": "lk", "match": draw(names)}
    sets = {t: draw(st.sampled_from(LOOKUP_COLUMNS)) for t in targets if draw(st.integers(0, 3))}
    defaults = {t: draw(texts) for t in targets if t not in sets or draw(st.booleans())}
    if sets:
        out["set"] = sets
    if defaults:
        out["default"] = defaults
    return out


GROUP_FIELD = "grp"


@st.composite
def aggregate_actions(
    draw: st.DrawFn, names: st.SearchStrategy[str] = field_names, targets: Sequence[str] = (*ALL_FIELDS, GROUP_FIELD)
) -> dict[str, Any]:
    op = draw(st.sampled_from(["count", "min", "max", "sum", "first", "last", "join"]))
    out: dict[str, Any] = {"aggregate": draw(st.sampled_from(list(targets))), "op": op}
    if op != "count":
        # P17: a field name, or a template (one with a brace: one without names a field)
        out["of"] = draw(st.one_of(names, st.builds(lambda t, f: t + "{" + f + "}", templates, names)))
    if op == "join" and draw(st.booleans()):
        out["separator"] = draw(st.sampled_from(["", "|", ", "]))
    if op in ("min", "max", "sum") and draw(st.booleans()):
        out["round"] = str(draw(st.integers(0, 3)))
    return out


group_conditions = st.one_of(
    conditions,
    st.builds(lambda b: {"group_first": b}, st.sampled_from(["true", "false"])),
    st.builds(lambda c: {"not": {"group_first": "true"}} if c is None else {"all": [c, {"group_first": "true"}]},
              st.one_of(st.none(), conditions)),
)  # fmt: skip


@st.composite
def actions(draw: st.DrawFn, lookups: bool = False, groups: bool = False) -> dict[str, Any]:
    if lookups and draw(st.integers(0, 2)) == 0:
        return draw(lookup_actions())
    if groups and draw(st.integers(0, 2)) == 0:
        return draw(aggregate_actions())
    target = draw(field_names)
    kind = draw(
        st.sampled_from(
            [
                "set",
                "copy",
                "append",
                "prepend",
                "replace",
                "regex_replace",
                "lowercase",
                "uppercase",
                "capitalize",
                "trim",
                "truncate",
                "math",
                "map",
                "exclude",
            ]
        )
    )
    if kind in ("set", "append", "prepend"):
        return {kind: target, "value": draw(templates)}
    if kind == "copy":
        return {"copy": target, "from": draw(field_names)}
    if kind == "replace":
        return {"replace": target, "find": draw(st.sampled_from(["a", " ", ",", "ß", "1"])), "with": draw(values)}
    if kind == "regex_replace":
        pattern, repl = draw(st.sampled_from(REPLACE_PATTERNS))
        action = {"regex_replace": target, "pattern": pattern, "with": repl}
        if draw(st.booleans()):
            action["ignore_case"] = True  # regexp_replace's 'i' flag
        return action
    if kind == "truncate":
        return {"truncate": target, "length": draw(st.integers(0, 12))}
    if kind == "math":
        return {
            "math": target,
            "op": draw(st.sampled_from(["add", "subtract", "multiply", "divide"])),
            "value": draw(numbers),
            "round": str(draw(st.integers(0, 3))),
        }
    if kind == "map":
        mapping = draw(st.dictionaries(values, templates, max_size=3))
        out: dict[str, Any] = {"map": target, "values": mapping}
        if draw(st.booleans()):
            out["default"] = draw(templates)
        return out
    if kind == "exclude":
        return {"exclude": "true"}
    return {kind: target}


@st.composite
def rule_lists(draw: st.DrawFn, lookups: bool = False, groups: bool = False) -> list[dict[str, Any]]:
    rules = []
    for _ in range(draw(st.integers(1, 6))):
        rule: dict[str, Any] = {"then": draw(st.lists(actions(lookups, groups), max_size=3))}
        if draw(st.integers(0, 4)):
            rule["when"] = draw(group_conditions if groups else conditions)
        if draw(st.integers(0, 3)) == 0:
            rule["else"] = draw(st.lists(actions(lookups, groups), max_size=2))
        if draw(st.integers(0, 6)) == 0:
            rule["enabled"] = "false"
        rules.append(rule)
    return rules


item_lists = st.lists(
    st.fixed_dictionaries({f: values for f in FIELDS}),
    max_size=6,
).map(lambda xs: [{KEY_FIELD: str(i), **x} for i, x in enumerate(xs)])


@sql_route(200)
@given(items=item_lists, raw_rules=rule_lists())
def test_sql_route_matches_the_reference_on_random_rules(
    engine: Engine, items: list[dict[str, str]], raw_rules: list[dict[str, Any]]
) -> None:
    assert_same(engine, items, [KEY_FIELD, *FIELDS], raw_rules)


# Keys drawn from the items' own values (with white space around some), so lookups match now and then.
lookup_rows = st.lists(
    st.fixed_dictionaries({LOOKUP_KEY: values, "v1": values, "v2": values}),
    max_size=6,
)


@sql_route(150)
@given(items=item_lists, raw_rules=rule_lists(lookups=True), rows=lookup_rows, split=st.booleans())
def test_sql_route_matches_the_reference_with_lookup_tables(
    engine: Engine,
    items: list[dict[str, str]],
    raw_rules: list[dict[str, Any]],
    rows: list[dict[str, str]],
    split: bool,
) -> None:
    """Lookups joined in SQL give the reference's items and the same rules.lookups counts (P21-P23)."""
    assert_same(engine, items, [KEY_FIELD, *FIELDS], raw_rules, split=split, lookups={"lk": rows})


# Group values that repeat, blank ones (groups of one) and one only white space apart from another.
grouped_items = st.lists(
    st.fixed_dictionaries(
        {**{f: values for f in FIELDS}, GROUP_FIELD: st.sampled_from(["a", "a", "b", " a", "", " ", "ß"])}
    ),
    max_size=8,
).map(lambda xs: [{KEY_FIELD: str(i), **x} for i, x in enumerate(xs)])


@sql_route(150)
@given(items=grouped_items, raw_rules=rule_lists(lookups=True, groups=True), rows=lookup_rows, split=st.booleans())
def test_sql_route_matches_the_reference_with_groups_and_lookups(
    engine: Engine,
    items: list[dict[str, str]],
    raw_rules: list[dict[str, Any]],
    rows: list[dict[str, str]],
    split: bool,
) -> None:
    """Aggregates and group_first (P16-P19) over random groups, with lookups too, as the reference computes them."""
    fields = [KEY_FIELD, *FIELDS, GROUP_FIELD]
    assert_same(engine, items, fields, raw_rules, split=split, lookups={"lk": rows}, group=GROUP_FIELD)


EXCLUDE_ONLY_TAILS = [
    [{"name": "cheap", "when": {"field": "price", "op": "lt", "value": 5}, "then": [{"exclude": True}]}],
    [
        {
            "name": "keep cheap",
            "when": {"field": "price", "op": "lt", "value": 5},
            "then": [{"set": "brand", "value": "x"}],
            "else": [{"exclude": True}],
        }
    ],
    [
        {"name": "no brand", "when": {"field": "brand", "op": "empty"}, "then": [{"exclude": True}]},
        {"name": "a title", "when": {"field": "title", "op": "contains", "value": "a"}, "then": [{"exclude": True}]},
    ],
    [
        {
            "name": "all",
            "when": {"field": "title", "op": "not_empty"},
            "then": [{"exclude": True}],
            "else": [{"exclude": True}],
        }
    ],
    [{"name": "everything", "then": [{"exclude": True}]}],
]


@pytest.mark.parametrize("tail", EXCLUDE_ONLY_TAILS)
def test_a_pass_that_only_excludes_deletes_in_place_with_the_same_result(
    engine: Engine, tail: list[dict[str, Any]]
) -> None:
    """After a first pass, an excluding rule that changes nothing runs as a DELETE: same items, counts and order."""
    items = [
        {KEY_FIELD: str(i), "title": t, "price": p, "brand": b, 'we"ird; name': ""}
        for i, (t, p, b) in enumerate(
            [("a", "3", "x"), ("b", "7", ""), ("ca", "1,5", "y"), ("", "10", "z"), ("d", "", "w"), ("e", "4.5", "")]
        )
    ]
    head = [{"name": "tag", "then": [{"set": "new1", "value": "{title}!"}]}]
    assert_same(engine, items, [KEY_FIELD, *FIELDS], head + tail)
    result, _, _ = run_both(engine, items, [KEY_FIELD, *FIELDS], head + tail)
    assert result.passes == 1 + len(tail)
    # A rule that also sets a field must copy; the others delete from the first pass table.
    sets = any("set" in a for rule in tail for a in rule.get("then", []))
    assert result.table.endswith("_2" if sets else "_1")


@sql_route(60)
@given(items=item_lists, raw_rules=rule_lists())
def test_rules_split_in_two_halves_match_the_reference(
    engine: Engine, items: list[dict[str, str]], raw_rules: list[dict[str, Any]]
) -> None:
    """A big run cuts the items in two halves run side by side; same items, counts and order as one piece."""
    assert_same(engine, items, [KEY_FIELD, *FIELDS], raw_rules, split=True)


def test_a_split_run_ends_in_a_view_of_its_two_halves(engine: Engine) -> None:
    items = [{KEY_FIELD: str(i), "title": f"t{i}", "price": str(i), "brand": "", 'we"ird; name': ""} for i in range(9)]
    rules = [
        {"name": "tag", "then": [{"set": "new1", "value": "{title}!"}]},
        {"name": "cheap", "when": {"field": "price", "op": "lt", "value": 3}, "then": [{"exclude": True}]},
    ]
    result, got, want = run_both(engine, items, [KEY_FIELD, *FIELDS], rules, split=True)
    assert result.table.endswith("_0")
    assert [g[KEY_FIELD] for g in got] == [str(i) for i in range(3, 9)]
    assert result.matched == want.matched and result.excluded == 3


# -- lists (SPEC 9) ----------------------------------------------------------------------------
LIST_FIELDS = ["images", "tags"]
LISTED = FIELDS[:3] + LIST_FIELDS
ALL_LISTED = LISTED + NEW_FIELDS
#: elements: never "" (P1), but any other text, white space and separators included
#: a small pool both elements and condition values draw from, so that ANY / NO element differ often
POOL = ["a", "A", "1,5", "x|y", " b ", "ß", "10", "ab"]
elements = st.one_of(st.sampled_from(POOL), st.sampled_from(POOL), texts, phrases).filter(bool)
list_values = st.lists(elements, max_size=4).map(tuple)
#: a list field's value as MERGE leaves it: a list, or the text of a source that does not declare it (P14)
source_values = st.one_of(list_values, list_values, elements)
listed_names = st.sampled_from(ALL_LISTED)
list_templates = st.one_of(
    templates,
    st.builds(lambda f, i: f"{{{f}[{i}]}}", st.sampled_from([*LIST_FIELDS, "title"]), st.integers(-3, 3)),
    st.builds(lambda f: f"{{{f}}}", st.sampled_from(LIST_FIELDS)),
)


@st.composite
def list_leaves(draw: st.DrawFn, name: str | None = None) -> dict[str, Any]:
    """Any leaf of the language, on any field (list fields included), plus the count ops."""
    op = draw(st.sampled_from(["count_gt", "count_lt", "count_eq", "leaf", "leaf", "leaf"]))
    field = name or draw(listed_names)
    if op != "leaf":
        return {"field": field, "op": op, "value": str(draw(st.integers(0, 3)))}
    leaf = draw(leaves())
    leaf["field"] = field
    if leaf["op"] in ("eq", "ne", "contains", "not_contains", "starts_with", "ends_with"):
        leaf["value"] = draw(st.one_of(st.sampled_from(POOL), list_templates))
    elif leaf["op"] in ("in", "not_in"):
        leaf["value"] = draw(st.lists(st.sampled_from(POOL), max_size=3))
    return leaf


list_conditions = st.recursive(
    list_leaves(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"all": xs}, st.lists(inner, max_size=3)),
        st.builds(lambda xs: {"any": xs}, st.lists(inner, max_size=2)),
        st.builds(lambda x: {"not": x}, inner),
    ),
    max_leaves=3,
)
element_conditions = st.recursive(
    list_leaves("_"),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"any": xs}, st.lists(inner, max_size=2)), st.builds(lambda x: {"not": x}, inner)
    ),
    max_leaves=2,
)


@st.composite
def list_actions(draw: st.DrawFn) -> dict[str, Any]:
    """Every action, on any field; split, join, take, dedupe and remove besides."""
    kind = draw(st.sampled_from(["split", "join", "take", "dedupe", "remove", "other", "other", "other"]))
    target = draw(st.sampled_from(ALL_LISTED))
    if kind == "split":
        return {"split": target, "separator": draw(st.sampled_from([",", "|", " ", "a"]))}
    if kind == "join":
        return {"join": target, "separator": draw(st.sampled_from([",", "", " / "]))}
    if kind == "take":
        return {"take": target, "count": str(draw(st.integers(0, 3)))}
    if kind == "dedupe":
        return {"dedupe": target}
    if kind == "remove":
        return {"remove": target, "when": draw(element_conditions)}
    action = draw(actions())
    if "exclude" not in action:
        key = next(k for k in action if k not in ("value", "from", "find", "with", "pattern", "length", "op", "round"))
        key = key if key not in ("values", "default") else "map"
        action[key] = target
        if "from" in action:
            action["from"] = draw(listed_names)
        if "value" in action and key in ("set", "append", "prepend"):
            action["value"] = draw(list_templates)
    return action


@st.composite
def list_rule_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    rules = []
    for _ in range(draw(st.integers(1, 5))):
        rule: dict[str, Any] = {"then": draw(st.lists(list_actions(), max_size=3))}
        if draw(st.integers(0, 4)):
            rule["when"] = draw(list_conditions)
        if draw(st.integers(0, 3)) == 0:
            rule["else"] = draw(st.lists(list_actions(), max_size=2))
        rules.append(rule)
    return rules


listed_items = st.lists(
    st.fixed_dictionaries({**{f: values for f in FIELDS[:3]}, **{f: source_values for f in LIST_FIELDS}}),
    max_size=5,
).map(lambda xs: [{KEY_FIELD: str(i), **x} for i, x in enumerate(xs)])


@sql_route(150)
@given(items=listed_items, raw_rules=list_rule_lists())
def test_sql_route_matches_the_reference_on_random_lists(
    engine: Engine, items: list[dict[str, Any]], raw_rules: list[dict[str, Any]], tmp_path: Path
) -> None:
    """Random list values, conditions on lists and list actions: the same items, elements and counts,
    and the same json and google-xml exports as the reference's items written by hand."""
    assert_same(engine, items, [KEY_FIELD, *LISTED], raw_rules, lists=frozenset(LIST_FIELDS))
    assert_same_exports(engine, items, [KEY_FIELD, *LISTED], raw_rules, tmp_path, lists=frozenset(LIST_FIELDS))


def assert_same_exports(
    engine: Engine, items: Sequence[Mapping[str, Any]], fields: Sequence[str], raw_rules: Any, tmp_path: Path, **kw: Any
) -> None:
    """The json and google-xml exports of the SQL route's items are the reference's items written by hand."""
    written: dict[str, Any] = {}

    def export(result: RulesResult, lists: ListFields) -> None:
        for fmt in ("json", "google-xml"):
            spec = ExportSpec.model_validate({"name": fmt, "format": fmt, "path": f"out.{fmt}"})
            dest = tmp_path / f"out.{fmt}"
            write_export(
                engine, schema=company_schema(COMPANY), table=result.table, fields=result.fields, export=spec,
                dest=dest, lists=lists,
            )  # fmt: skip
            written[fmt] = dest.read_bytes()
        written["fields"] = result.fields

    _result, _got, want = run_both(engine, items, fields, raw_rules, exports=export, **kw)
    fields = written["fields"]
    as_json = [
        {f: (list(v) or "") if isinstance(v, tuple) else v for f, v in _filled(i, fields).items()} for i in want.items
    ]
    assert json.loads(written["json"]) == as_json
    in_xml = [
        [(f, e) for f, v in _filled(i, fields).items() for e in (v if isinstance(v, tuple) else (v,)) if e != ""]
        for i in want.items
    ]
    assert _xml_items(written["google-xml"], fields) == in_xml


def _filled(item: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    return {f: item.get(f, "") for f in fields}


def _xml_items(data: bytes, fields: Sequence[str]) -> list[list[tuple[str, str]]]:
    """(field, text) of each element of each item, in order (google-xml drops characters XML cannot hold)."""
    names = dict(zip(element_names(list(fields)), fields, strict=True))
    channel = etree.fromstring(data).find("channel")
    assert channel is not None
    return [[(names[str(e.tag).split("}", 1)[1]], e.text or "") for e in item] for item in channel.iter("item")]


# -- an export's fields: names, templates and literal values (SPEC 8.18, P25-P27, C1) --------------------------
#: literal values, some that would read as a template or a field name if they were not literals
LITERALS = ["new", "{price}", "", "a,b", "title", "ǅ {{x}} }", " US "]


@st.composite
def export_fields(draw: st.DrawFn) -> dict[str, Any]:
    """An export's `fields`: output names (some dotted: sub-attributes) -> a field, a template or {value: TEXT}."""
    fields: dict[str, Any] = {}
    for i in range(draw(st.integers(1, 6))):
        name = draw(st.sampled_from([f"c{i}", f"ship.s{i}", f"size.s{i}"]))
        kind = draw(st.integers(0, 2))
        if kind == 0:
            fields[name] = draw(st.sampled_from([KEY_FIELD, *LISTED, "nothing"]))
        elif kind == 1:
            fields[name] = draw(list_templates.filter(lambda t: "{" in t))
        else:
            fields[name] = {"value": draw(st.sampled_from(LITERALS))}
    return fields


@sql_route(60)
@given(items=listed_items, raw_rules=list_rule_lists(), fields=export_fields())
def test_an_exports_names_templates_and_literal_values_are_the_references(
    engine: Engine, items: list[dict[str, Any]], raw_rules: list[dict[str, Any]], fields: dict[str, Any], tmp_path: Path
) -> None:
    """The json and csv files of an export with `fields` are the reference's columns (export_columns) of the
    reference's items, in `fields` order, dotted names nested; a literal is its text on every item."""
    from firefeed.rules.reference_export import export_columns, nested

    written: dict[str, Path] = {}

    def export(result: RulesResult, lists: ListFields) -> None:
        for fmt in ("json", "csv"):
            spec = ExportSpec.model_validate({"name": fmt, "format": fmt, "path": f"out.{fmt}", "fields": fields})
            dest = written[fmt] = tmp_path / f"out.{fmt}"
            write_export(
                engine, schema=company_schema(COMPANY), table=result.table, fields=result.fields, export=spec,
                dest=dest, lists=lists,
            )  # fmt: skip

    _result, _got, want = run_both(
        engine, items, [KEY_FIELD, *LISTED], raw_rules, exports=export, lists=frozenset(LIST_FIELDS)
    )
    literal_fields = ExportSpec.model_validate({"name": "x", "format": "json", "path": "x", "fields": fields}).fields
    columns = [nested(export_columns(item, literal_fields, ())) for item in want.items]
    as_json = [{k: (list(v) or "") if isinstance(v, tuple) else v for k, v in c.items()} for c in columns]
    assert json.loads(written["json"].read_bytes()) == as_json

    def cell(v: Any) -> str:
        if isinstance(v, dict):  # "" when every sub-value is empty, else joined with ":" (P27)
            return "" if not any(v.values()) else ":".join(v.values())
        return ",".join(v) if isinstance(v, tuple) else v

    with written["csv"].open(newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    assert header == list(nested(dict.fromkeys(fields, "")))
    assert rows == [[cell(v) for v in c.values()] for c in columns]


# -- lists with groups and lookups (SPEC 9: P16 over elements, P22 list matches) -------------------------------
CATALOG_NAMES = [*ALL_LISTED, GROUP_FIELD]
catalog_names = st.sampled_from(CATALOG_NAMES)


@st.composite
def catalog_actions(draw: st.DrawFn) -> dict[str, Any]:
    """List actions, lookups matching on any field (a list's elements too) and aggregates of any field."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(lookup_actions(catalog_names, list_templates))
    if kind == 1:
        names = st.one_of(catalog_names, st.sampled_from(LIST_FIELDS))  # more often over a list's elements
        action = draw(aggregate_actions(names, CATALOG_NAMES))
        if "of" in action and draw(st.integers(0, 3)) == 0:
            action["of"] = draw(list_templates.filter(lambda t: "{" in t))  # `{images[0]}`: one text per member
        return action
    return draw(list_actions())


catalog_conditions = st.one_of(
    list_conditions,
    st.builds(lambda b: {"group_first": b}, st.sampled_from(["true", "false"])),
    st.builds(lambda c: {"all": [c, {"not": {"group_first": "true"}}]}, list_conditions),
)


@st.composite
def catalog_rule_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    rules = []
    for _ in range(draw(st.integers(1, 5))):
        rule: dict[str, Any] = {"then": draw(st.lists(catalog_actions(), max_size=3))}
        if draw(st.integers(0, 4)):
            rule["when"] = draw(catalog_conditions)
        if draw(st.integers(0, 3)) == 0:
            rule["else"] = draw(st.lists(catalog_actions(), max_size=2))
        rules.append(rule)
    return rules


# Group values that repeat, blank ones and white space apart; list elements drawn from the pool lookup keys use.
catalog_items = st.lists(
    st.fixed_dictionaries(
        {
            **{f: values for f in FIELDS[:3]},
            **{f: source_values for f in LIST_FIELDS},
            GROUP_FIELD: st.sampled_from(["a", "a", "b", " a", "", " ", "ß"]),
        }
    ),
    max_size=6,
).map(lambda xs: [{KEY_FIELD: str(i), **x} for i, x in enumerate(xs)])
catalog_lookup_rows = st.lists(
    st.fixed_dictionaries(
        {LOOKUP_KEY: st.one_of(st.sampled_from([*POOL, " a", "", "b"]), values), "v1": values, "v2": values}
    ),
    max_size=6,
)


@sql_route(150)
@given(
    items=catalog_items,
    raw_rules=catalog_rule_lists(),
    rows=catalog_lookup_rows,
    group=st.sampled_from([GROUP_FIELD, GROUP_FIELD, "tags"]),
    split=st.booleans(),
)
def test_sql_route_matches_the_reference_with_lists_groups_and_lookups(
    engine: Engine,
    items: list[dict[str, Any]],
    raw_rules: list[dict[str, Any]],
    rows: list[dict[str, str]],
    group: str,
    split: bool,
    tmp_path: Path,
) -> None:
    """Random lists, groups (by a text or a list field) and lookup tables together: aggregates over a list's
    elements, first/last keeping a list, lookups matching a list's first element with a row, and the same
    json and google-xml exports."""
    fields = [KEY_FIELD, *LISTED, GROUP_FIELD]
    kw: dict[str, Any] = {"lists": frozenset(LIST_FIELDS), "lookups": {"lk": rows}, "group": group}
    assert_same(engine, items, fields, raw_rules, split=split, **kw)
    assert_same_exports(engine, items, fields, raw_rules, tmp_path, **kw)


def test_aggregates_read_list_elements_and_a_list_match_takes_its_first_element_with_a_row(engine: Engine) -> None:
    """P16 and P22 on fixed items, in SQL: the values themselves, not only agreement with the reference."""
    items = [
        {KEY_FIELD: "1", GROUP_FIELD: "A", "images": ("a", "2.5"), "tags": ("x", "b")},
        {KEY_FIELD: "2", GROUP_FIELD: "A", "images": (), "tags": ()},
        {KEY_FIELD: "3", GROUP_FIELD: "A", "images": ("10", "c"), "tags": ("b",)},
        {KEY_FIELD: "4", GROUP_FIELD: "B", "images": ("7",), "tags": ("z", " c ")},
    ]
    rules = [
        {
            "then": [
                {"aggregate": "all", "op": "join", "of": "images", "separator": "|"},
                {"aggregate": "low", "op": "min", "of": "images"},
                {"aggregate": "total", "op": "sum", "of": "images", "round": "1"},
                {"aggregate": "head", "op": "last", "of": "images"},
            ]
        },
        {"then": [{"lookup": "lk", "match": "tags", "set": {"hit": "v1"}}]},
    ]
    rows = [{LOOKUP_KEY: "b", "v1": "from b"}, {LOOKUP_KEY: "c", "v1": "from c"}]
    kw: dict[str, Any] = {"lists": frozenset(LIST_FIELDS), "lookups": {"lk": rows}, "group": GROUP_FIELD}
    fields = [KEY_FIELD, GROUP_FIELD, *LIST_FIELDS]
    result, got, _want = run_both(engine, items, fields, rules, **kw)
    assert [(g["all"], g["low"], g["total"], g["head"]) for g in got] == [
        ("a|2.5|10|c", "2.5", "12.5", ("10", "c")),
        ("a|2.5|10|c", "2.5", "12.5", ("10", "c")),
        ("a|2.5|10|c", "2.5", "12.5", ("10", "c")),
        ("7", "7", "7.0", ("7",)),
    ]
    assert [g["hit"] for g in got] == ["from b", "", "from b", "from c"]
    assert [(r["matched"], r["unmatched_values"]) for r in result.lookups] == [(3, [{"value": "", "count": 1}])]
    assert_same(engine, items, fields, rules, **kw)


def test_a_remove_condition_reads_its_element_even_when_the_project_has_a_list_field_named_underscore(
    engine: Engine,
) -> None:
    """P20: `field: _` in a `remove` condition is the element, a text. A list field that is itself
    called `_` made the SQL route compare a text with a list (a Postgres error that failed the run)."""
    items = [
        {KEY_FIELD: "1", "_": ("x", "y"), "images": ("a", "x", "b")},
        {KEY_FIELD: "2", "_": (), "images": ("x", "c")},
    ]
    rules = [
        {
            "then": [
                {"remove": "images", "when": {"field": "_", "op": "eq", "value": "x"}},
                {"remove": "_", "when": {"any": [{"field": "_", "op": "eq", "value": "y"}]}},
                {"remove": "images", "when": {"field": "_", "op": "length_gt", "value": "1"}},
            ]
        },
        {"then": [{"remove": "title", "when": {"field": "_", "op": "eq", "value": "Hat"}}]},
    ]
    lists = frozenset({"_", "images"})
    fields = [KEY_FIELD, "_", "images", "title"]
    items = [{**item, "title": t} for item, t in zip(items, ("Hat", "Cap"), strict=True)]
    _result, got, _want = run_both(engine, items, fields, rules, lists=lists)
    assert [(g["_"], g["images"], g["title"]) for g in got] == [(("x",), ("a", "b"), ""), ((), ("c",), "Cap")]
    assert_same(engine, items, fields, rules, lists=lists)
    assert_same(engine, items, fields, rules, lists=lists, split=True)


def test_a_number_longer_than_postgres_numeric_holds_is_read_from_its_first_characters(engine: Engine) -> None:
    """One item whose price holds 20,000 decimals (or 140,000 digits) failed the whole run with
    Postgres' "value overflows numeric format". Both routes read a matched number from its first
    16,383 characters (NUMBER_MAX_CHARS), which numeric always holds; an ordinary number is unchanged."""
    long_decimals = "1." + "2" * 20_000 + " EUR"
    long_digits = "9" * 140_000
    items = [
        {KEY_FIELD: "1", "title": "a", "price": long_decimals, "grp": "g"},
        {KEY_FIELD: "2", "title": "b", "price": long_digits, "grp": "g"},
        {KEY_FIELD: "3", "title": "c", "price": "5,5", "grp": "h"},
    ]
    rules = [
        {"when": {"field": "price", "op": "gt", "value": "100"}, "then": [{"set": "title", "value": "big"}]},
        {"then": [{"copy": "p2", "from": "price"}, {"math": "p2", "op": "multiply", "value": "1.5", "round": "2"}]},
        {"then": [{"aggregate": "low", "op": "min", "of": "price"}]},
        {"then": [{"math": "price", "op": "divide", "value": "3", "round": "1"}]},
    ]
    fields = [KEY_FIELD, "title", "price", "grp"]
    _result, got, _want = run_both(engine, items, fields, rules, group="grp")
    by_key = {g[KEY_FIELD]: g for g in got}
    assert [by_key[k]["title"] for k in "123"] == ["a", "big", "c"]
    assert [by_key[k]["p2"] for k in "13"] == ["1.83 EUR", "8.25"]
    assert by_key["3"]["price"] == "1.8"
    assert by_key["1"]["low"] == "1." + "2" * (NUMBER_MAX_CHARS - 2)
    assert_same(engine, items, fields, rules, group="grp")
    assert_same(engine, items, fields, rules, group="grp", split=True)


def test_an_aggregate_join_keeps_the_first_characters_of_a_large_group_on_both_routes(engine: Engine) -> None:
    """Every member holds its group's join, so an unbounded one grows with the square of the group
    (2,000 items of 100 bytes made a 404 MB export): both routes keep its first JOIN_MAX_CHARS."""
    items = [{KEY_FIELD: str(i), "title": f"{i:03d}" + "é" * 47, "grp": "one"} for i in range(300)]
    items.append({KEY_FIELD: "small", "title": "alone", "grp": "other"})
    rules = [{"then": [{"aggregate": "all", "op": "join", "of": "title", "separator": "|"}]}]
    fields = [KEY_FIELD, "title", "grp"]
    _result, got, _want = run_both(engine, items, fields, rules, group="grp")
    joined = "|".join(item["title"] for item in items[:300])
    assert {g["all"] for g in got[:300]} == {joined[:JOIN_MAX_CHARS]}
    assert len(got[0]["all"]) == JOIN_MAX_CHARS < len(joined)
    assert got[300]["all"] == "alone"
    assert_same(engine, items, fields, rules, group="grp")
    assert_same(engine, items, fields, rules, group="grp", split=True)


def test_an_index_past_any_list_renders_empty_on_both_routes(engine: Engine) -> None:
    """P9: any integer is an index. One past Postgres' integer failed the run ("integer out of range")."""
    items = [{KEY_FIELD: "1", "images": ("a", "b"), "title": "t"}]
    rules = [
        {
            "then": [
                {"set": "far", "value": "[{images[99999999999]}][{images[-99999999999]}][{title[5000000000]}]"},
                {"set": "near", "value": "{images[1]}{images[-2]}"},
            ]
        }
    ]
    lists = frozenset({"images"})
    fields = [KEY_FIELD, "images", "title"]
    _result, got, _want = run_both(engine, items, fields, rules, lists=lists)
    assert (got[0]["far"], got[0]["near"]) == ("[][][]", "ba")
    assert_same(engine, items, fields, rules, lists=lists)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("unmatched_kept", [False, True])
def test_a_lookup_counted_after_a_delete_is_read_from_the_counts_when_nothing_kept_is_unmatched(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, split: bool, unmatched_kept: bool
) -> None:
    """A lookup deferred past a DELETE (_hoist) whose kept items all found a row is reported from the
    counts of its pass and of the DELETE, with no scan of the pass tables; an unmatched item that
    stays is still read, value and all. Either way the report is the reference's."""
    import firefeed.pipeline.rule_passes as rule_passes

    scans: list[int] = []
    real = rule_passes.lookup_counts
    monkeypatch.setattr(rule_passes, "lookup_counts", lambda *a, **k: scans.append(1) or real(*a, **k))
    items = [
        {KEY_FIELD: str(i), "title": "t", "price": str(i), "brand": "nowhere" if i in (0, 4) else "acme"}
        for i in range(12)
    ]
    if unmatched_kept:
        items[9]["brand"] = " stray "  # kept (price 9): listed as "stray"
    rules = [
        # a `when`: the pass counts its flags, and with them the lookup's matches
        {
            "name": "title",
            "when": {"field": "title", "op": "eq", "value": "t"},
            "then": [{"set": "title", "value": "x"}],
        },
        {"name": "cheap", "when": {"field": "price", "op": "lt", "value": 5}, "then": [{"exclude": True}]},
        {"name": "map", "then": [{"lookup": "lk", "match": "brand", "set": {"title": "v1"}}]},
    ]
    rows = [{LOOKUP_KEY: "acme", "v1": "Acme"}]
    # Items 0 and 4 ("nowhere") are unmatched but excluded (price < 5): 7 items stay.
    fields = [KEY_FIELD, *FIELDS]
    result, _got, _want = run_both(engine, items, fields, rules, split=split, lookups={"lk": rows})
    (report,) = result.lookups
    stray = [{"value": "stray", "count": 1}] if unmatched_kept else []
    assert (report["matched"], report["unmatched"], report["unmatched_values"]) == (7 - len(stray), len(stray), stray)
    assert_same(engine, items, fields, rules, split=split, lookups={"lk": rows})
    assert bool(scans) is bool(report["unmatched"])


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("known", [True, False])
def test_a_rule_with_a_when_counted_after_a_delete_is_counted_by_subtraction(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, split: bool, known: bool
) -> None:
    """A rule with a `when` moved before an excluding rule (_hoist) is counted among the rows the DELETE
    keeps: its matches in the pass before, less those the DELETE returns, with no scan of the kept rows.
    Without those matches (a chunk job's), the kept rows are read. The counts are the reference's."""
    import firefeed.pipeline.rule_passes as rule_passes

    given: list[Any] = []
    real = rule_passes.run_pass_in_place

    def spy(*args: Any, before: Any = None, **kw: Any) -> Any:
        given.append(before)
        return real(*args, before=before if known else None, **kw)

    monkeypatch.setattr(rule_passes, "run_pass_in_place", spy)
    items = [{KEY_FIELD: str(i), "title": "t", "price": str(i), "brand": "acme" if i % 3 else "o"} for i in range(12)]
    rules = [
        {
            "name": "title",
            "when": {"field": "title", "op": "eq", "value": "t"},
            "then": [{"set": "title", "value": "x"}],
        },
        {"name": "cheap", "when": {"field": "price", "op": "lt", "value": 5}, "then": [{"exclude": True}]},
        {
            "name": "tag",
            "when": {"field": "brand", "op": "eq", "value": "acme"},
            "then": [{"set": "new1", "value": "A"}],
        },
    ]
    fields = [KEY_FIELD, *FIELDS]
    result, _got, _want = run_both(engine, items, fields, rules, split=split)
    # "tag" ran on all 12 items (8 "acme") before the DELETE kept prices 5..11 (5 "acme": not 6, 9)
    assert (result.matched["title"], result.matched["cheap"], result.matched["tag"]) == (12, 5, 5)
    assert len(given) == (2 if split else 1)
    assert all(b is not None and set(b) == {"tag"} for b in given) and sum(b["tag"] for b in given) == 8
    assert_same(engine, items, fields, rules, split=split)
