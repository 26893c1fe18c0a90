"""SPEC 12 (P34-P37) and the section-9 points a random differential test found wrong (P8, P12, P23), issue #49.

P8, P12 and P23 are checked on both routes (the SQL route's values, and its agreement with the
reference); P34, P35 and P37 keep the product's reading and are pinned here; P36 end to end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lxml import etree
from sqlalchemy import Engine

from firefeed.pipeline.parse import open_reader
from firefeed.rules._plan import PassPlan, plan_passes
from firefeed.rules.model import parse_rules
from firefeed.rules.template import FieldRef, parse_template
from tests.integration.conftest import read_csv, run_json, write_csv
from tests.integration.test_catalog_keys import _run, _write_spec
from tests.integration.test_rules_differential import KEY_FIELD, assert_same, run_both

pytestmark = pytest.mark.integration


# -- P8: a blank text counts 0 ----------------------------------------------------------------------


@pytest.mark.parametrize(("op", "value"), [("count_eq", "0"), ("count_lt", "1"), ("count_gt", "0")])
def test_a_blank_text_in_a_list_field_counts_0_like_empty(engine: Engine, op: str, value: str) -> None:
    items = [
        {KEY_FIELD: "1", "tags": ("a",)},
        {KEY_FIELD: "2", "tags": ()},
        {KEY_FIELD: "3", "tags": ("b",)},
    ]
    rules = [
        # `set` writes a text into the declared list field: white space on item 1, "x" on item 3
        {"when": {"field": KEY_FIELD, "op": "eq", "value": "1"}, "then": [{"set": "tags", "value": " "}]},
        {"when": {"field": KEY_FIELD, "op": "eq", "value": "3"}, "then": [{"set": "tags", "value": "x"}]},
        {"when": {"field": "tags", "op": op, "value": value}, "then": [{"set": "hit", "value": "y"}]},
        {"when": {"field": "tags", "op": "empty"}, "then": [{"set": "empty", "value": "y"}]},
    ]
    kw: dict[str, Any] = {"lists": frozenset({"tags"})}
    _, got, _ = run_both(engine, items, [KEY_FIELD, "tags"], rules, **kw)
    counted_none = [g["hit"] == "y" for g in got] if op != "count_gt" else [g["hit"] != "y" for g in got]
    assert counted_none == [True, True, False]
    assert [g["empty"] for g in got] == ["y", "y", ""]
    assert_same(engine, items, [KEY_FIELD, "tags"], rules, **kw)


# -- P12: `append` of "" adds nothing ---------------------------------------------------------------


def test_appending_an_empty_template_to_a_text_in_a_list_field_leaves_the_text(engine: Engine) -> None:
    items = [{KEY_FIELD: "1", "tags": ("a", "b")}, {KEY_FIELD: "2", "tags": ()}]
    rules = [
        {"then": [{"join": "tags", "separator": "|"}]},  # a text now: "a|b", and "" on item 2
        {"then": [{"append": "tags", "value": "{missing}"}, {"prepend": "tags", "value": "{nothing[3]}"}]},
    ]
    kw: dict[str, Any] = {"lists": frozenset({"tags"})}
    _, got, want = run_both(engine, items, [KEY_FIELD, "tags"], rules, **kw)
    assert [item["tags"] for item in want.items] == ["a|b", ""]  # the reference: texts, as `join` wrote them
    assert [g["tags"] for g in got] == ["a|b", ()]  # the SQL route: a text, and no elements
    assert_same(engine, items, [KEY_FIELD, "tags"], rules, **kw)


def test_appending_an_empty_template_writes_the_text_in_json_as_set_wrote_it(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "tags"], [["1", "a|b"], ["2", "c"]])
    spec = {
        "company": "sec12",
        "project": "append_empty",
        "sources": [{"name": "main", "url": "main.csv", "lists": {"tags": "|"}}],
        "rules": [
            {"name": "as text", "then": [{"join": "tags", "separator": "|"}]},
            {"name": "add", "then": [{"append": "tags", "value": "{missing}"}, {"append": "more", "value": ""}]},
            {
                "name": "add one",
                "when": {"field": "id", "op": "eq", "value": "2"},
                "then": [{"append": "tags", "value": "d"}],
            },
        ],
        "exports": [{"name": "j", "format": "json", "path": "out.json", "fields": {"id": "id", "tags": "tags"}}],
    }
    _run(_write_spec(tmp_path, spec))
    out = json.loads((run_env / "sec12" / "append_empty" / "out.json").read_text(encoding="utf-8"))
    assert out == [{"id": "1", "tags": "a|b"}, {"id": "2", "tags": ["c", "d"]}]


# -- P23: a lookup in a branch that excludes is reported ------------------------------------------------


@pytest.mark.parametrize("split", [False, True])
def test_a_lookup_in_a_branch_that_then_excludes_is_in_the_report(engine: Engine, split: bool) -> None:
    items = [{KEY_FIELD: str(n), "code": code} for n, code in enumerate(["a", "b", "z", "z", " y ", "a"], 1)]
    rules = [
        {
            "name": "drop mapped",
            "when": {"field": KEY_FIELD, "op": "ne", "value": "6"},
            "then": [
                {"lookup": "lk", "match": "code", "set": {"label": "v1"}},
                {"exclude": True},
            ],
            "else": [{"lookup": "lk", "match": "code", "set": {"label": "v1"}}],
        }
    ]
    rows = [{"code": "a", "v1": "A"}, {"code": "b", "v1": "B"}]
    result, got, _ = run_both(engine, items, [KEY_FIELD, "code"], rules, lookups={"lk": rows}, split=split)
    assert [(g[KEY_FIELD], g["label"]) for g in got] == [("6", "A")]
    assert result.lookups == [
        {
            "rule": "drop mapped",
            "action": "then[0]",
            "lookup": "lk",
            "matched": 2,
            "unmatched": 3,
            "unmatched_values": [{"value": "z", "count": 2}, {"value": "y", "count": 1}],
        },
        {
            "rule": "drop mapped",
            "action": "else[0]",
            "lookup": "lk",
            "matched": 1,
            "unmatched": 0,
            "unmatched_values": [],
        },
    ]
    assert result.excluded == 5
    assert_same(engine, items, [KEY_FIELD, "code"], rules, lookups={"lk": rows}, split=split)


def test_the_excluded_branch_reports_the_value_its_earlier_actions_left_in_action_order(engine: Engine) -> None:
    items = [
        {KEY_FIELD: str(n), "code": code, "group": g}
        for n, (code, g) in enumerate([("A", "g1"), ("b", "g1"), ("Q", "g2"), ("a", "g2")], 1)
    ]
    rules = [
        {"name": "keep", "then": [{"set": "seen", "value": "y"}]},
        {
            "name": "mixed",
            "when": {"field": "code", "op": "eq", "value": "a", "case_sensitive": False},
            "then": [{"lookup": "lk", "match": "code", "set": {"label": "v1"}}],
            "else": [
                {"lowercase": "code"},
                {"lookup": "lk", "match": "code", "set": {"label": "v1"}},
                {"exclude": True},
            ],
        },
        {"name": "after", "then": [{"lookup": "lk", "match": "label", "set": {"again": "v1"}}]},
    ]
    rows = [{"code": "a", "v1": "A"}, {"code": "b", "v1": "B"}]
    result, got, _ = run_both(engine, items, [KEY_FIELD, "code", "group"], rules, lookups={"lk": rows})
    assert [g[KEY_FIELD] for g in got] == ["1", "4"]
    assert [(r["rule"], r["action"], r["matched"], r["unmatched"]) for r in result.lookups] == [
        ("mixed", "then[0]", 1, 1),  # "A" has no row: matched exactly
        ("mixed", "else[1]", 1, 1),  # "b" lowercased first has one; "q" has none
        ("after", "then[0]", 0, 2),
    ]
    assert result.lookups[1]["unmatched_values"] == [{"value": "q", "count": 1}]
    assert_same(engine, items, [KEY_FIELD, "code", "group"], rules, lookups={"lk": rows})


@pytest.mark.parametrize("split", [False, True])
def test_a_grouped_rule_reports_the_lookups_of_its_excluding_branch(engine: Engine, split: bool) -> None:
    # `group_first` and an aggregate read the groups of the whole input, also when it is cut in parts
    items = [
        {KEY_FIELD: str(n), "code": code, "group": g}
        for n, (code, g) in enumerate([("x", "g1"), ("b", "g1"), ("y", "g2"), ("a", "g3"), ("a", "g3")], 1)
    ]
    rules = [
        {
            "name": "firsts",
            "when": {"group_first": True},
            "then": [
                {"aggregate": "size", "op": "count"},
                {"set": "code", "value": "{code}{size}"},
                {"lookup": "lk", "match": "code", "set": {"label": "v1"}},
                {"exclude": True},
            ],
        }
    ]
    rows = [{"code": "x2", "v1": "X"}, {"code": "a", "v1": "A"}]
    kw: dict[str, Any] = {"lookups": {"lk": rows}, "group": "group", "split": split}
    result, got, _ = run_both(engine, items, [KEY_FIELD, "code", "group"], rules, **kw)
    assert [g[KEY_FIELD] for g in got] == ["2", "5"]
    (report,) = result.lookups
    assert (report["matched"], report["unmatched"]) == (1, 2)
    assert report["unmatched_values"] == [{"value": "y1", "count": 1}, {"value": "a2", "count": 1}]
    assert_same(engine, items, [KEY_FIELD, "code", "group"], rules, **kw)


def _plans(rules: list[dict[str, Any]], fields: list[str], group: str | None = None) -> list[PassPlan]:
    return plan_passes(parse_rules(rules, key_field=KEY_FIELD, lookups={"lk": "lk"}, group=group), fields)


@pytest.mark.parametrize("split", [False, True])
def test_a_grouped_pass_whose_input_holds_the_group_value_reports_its_excluded_lookups(
    engine: Engine, split: bool
) -> None:
    # The pass before the grouped one writes each item's group value for it (`keyed_input`): the report's
    # SELECT over that input must read that column, not compute a second one of the same name
    items = [
        {KEY_FIELD: str(n), "code": code, "group": g}
        for n, (code, g) in enumerate([("x", "g1"), ("b", "g1"), ("y", "g2"), ("a", "g3"), ("a", "g3")], 1)
    ]
    rules = [
        {"name": "prep", "then": [{"set": "seen", "value": "y"}]},
        {
            "name": "firsts",
            "when": {"group_first": True},
            "then": [
                {"aggregate": "size", "op": "count"},
                {"lookup": "lk", "match": "code", "set": {"label": "v1"}},
                {"exclude": True},
            ],
        },
    ]
    fields = [KEY_FIELD, "code", "group"]
    assert [p.keyed_input for p in _plans(rules, fields, "group")] == [False, True]
    rows = [{"code": "x", "v1": "X"}, {"code": "a", "v1": "A"}]
    kw: dict[str, Any] = {"lookups": {"lk": rows}, "group": "group", "split": split}
    result, got, _ = run_both(engine, items, fields, rules, **kw)
    assert [g[KEY_FIELD] for g in got] == ["2", "5"]
    assert result.lookups == [
        {
            "rule": "firsts",
            "action": "then[1]",
            "lookup": "lk",
            "matched": 2,
            "unmatched": 1,
            "unmatched_values": [{"value": "y", "count": 1}],
        }
    ]
    assert_same(engine, items, fields, rules, **kw)


@pytest.mark.parametrize("rewrites", [True, False], ids=["later-rule-rewrites-the-match", "later-rule-reads-it"])
@pytest.mark.parametrize("split", [False, True])
def test_an_excluded_lookup_sees_the_items_before_the_rules_after_it_and_is_listed_before_them(
    engine: Engine, split: bool, rewrites: bool
) -> None:
    # A rule that only excludes runs as a DELETE, and the rules after it may move into the pass before
    # it: they must not when they rewrite what its excluded lookup matches, and their reports follow its
    items = [{KEY_FIELD: str(n), "code": code} for n, code in enumerate(["a", "b", "z", "a"], 1)]
    after = [{"set": "code", "value": "q"}] if rewrites else []
    rules = [
        {"name": "prep", "then": [{"set": "seen", "value": "y"}]},
        {
            "name": "drop",
            "when": {"field": KEY_FIELD, "op": "ne", "value": "4"},
            "then": [{"lookup": "lk", "match": "code", "set": {"label": "v1"}}, {"exclude": True}],
        },
        {"name": "after", "then": [*after, {"lookup": "lk", "match": "code", "set": {"again": "v1"}}]},
    ]
    fields = [KEY_FIELD, "code"]
    # unless the later rule rewrites `code`, it runs in the first pass and the DELETE pass counts it
    assert [[r.name for r in p.rules] for p in _plans(rules, fields)] == (
        [["prep"], ["drop", "after"]] if rewrites else [["prep", "after"], ["drop"]]
    )
    rows = [{"code": "a", "v1": "A"}, {"code": "b", "v1": "B"}]
    kw: dict[str, Any] = {"lookups": {"lk": rows}, "split": split}
    result, got, _ = run_both(engine, items, fields, rules, **kw)
    assert [(g[KEY_FIELD], g["again"]) for g in got] == [("4", "" if rewrites else "A")]
    assert [(r["rule"], r["matched"], r["unmatched"], r["unmatched_values"]) for r in result.lookups] == [
        ("drop", 2, 1, [{"value": "z", "count": 1}]),
        ("after", 0, 1, [{"value": "q", "count": 1}]) if rewrites else ("after", 1, 0, []),
    ]
    assert_same(engine, items, fields, rules, **kw)


# -- P34: <link> is channel_link, else the first written item's link column ----------------------------


def test_the_channel_link_is_the_first_written_items_link_column(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "link", "url"], [["1", "https://a.example/1", "https://u.example/1"]])
    exports = [
        # `link` among default columns
        {"name": "plain", "format": "google-xml", "path": "plain.xml"},
        # the output name `link` in `fields`, whatever field it reads
        {"name": "named", "format": "google-xml", "path": "named.xml", "fields": {"id": "id", "link": "url"}},
        {"name": "set", "format": "google-xml", "path": "set.xml", "channel_link": "https://shop.example/"},
    ]
    # C3: these items are not Google-complete; the test reads the <channel>'s <link>.
    exports = [{**e, "max_invalid": "100%"} for e in exports]
    spec = {"company": "sec12", "project": "chan", "sources": [{"name": "main", "url": "main.csv"}], "exports": exports}
    _run(_write_spec(tmp_path, spec))
    links = {
        name: etree.fromstring((run_env / "sec12" / "chan" / f"{name}.xml").read_bytes()).findtext("channel/link")
        for name in ("plain", "named", "set")
    }
    assert links == {"plain": "https://a.example/1", "named": "https://u.example/1", "set": "https://shop.example/"}


# -- P35: an index is ASCII digits with an optional sign ---------------------------------------------


def test_an_index_is_signed_ascii_digits_anything_else_is_part_of_the_name() -> None:
    assert parse_template("{a[+1]}", "p").parts == (FieldRef("a", 1),)
    assert parse_template("{a[-2]}", "p").parts == (FieldRef("a", -2),)
    assert parse_template("{a[ 1]}", "p").parts == (FieldRef("a[ 1]"),)
    assert parse_template("{a[1.0]}", "p").parts == (FieldRef("a[1.0]"),)
    assert parse_template("{a[\u0661]}", "p").parts == (FieldRef("a[\u0661]"),)  # an Arabic-Indic digit


# -- P36: a source or lookup with no items changes nothing ----------------------------------------------


@pytest.mark.parametrize("empty", ["[]", "", "header"])
def test_an_empty_enrich_source_and_an_empty_lookup_table_change_nothing(
    run_env: Path, tmp_path: Path, empty: str
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title", "category"], [["1", "Ring", "Rings"], ["2", "Cap", "Hats"]])
    if empty == "header":  # a header only, without the key field
        write_csv(tmp_path / "extra.csv", ["sku", "price"], [])
        write_csv(tmp_path / "table.csv", ["code", "gpc"], [])
        extra, table = {"url": "extra.csv"}, {"url": "table.csv"}
    else:
        (tmp_path / "extra.json").write_text(empty, encoding="utf-8")
        (tmp_path / "table.json").write_text(empty, encoding="utf-8")
        extra, table = {"url": "extra.json", "format": "json"}, {"url": "table.json", "format": "json"}
    spec = {
        "company": "sec12",
        "project": "empty_sources",
        "sources": [{"name": "main", "url": "main.csv"}, {"name": "extra", **extra}],
        "lookups": [{"name": "cats", "key": "shop_category", **table}],
        "rules": [
            {
                "name": "gpc",
                "then": [{"lookup": "cats", "match": "category", "set": {"gpc": "gpc"}, "default": {"gpc": "none"}}],
            }
        ],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv"}],
    }
    report = _run(_write_spec(tmp_path, spec))
    header, body = read_csv(run_env / "sec12" / "empty_sources" / "all.csv")
    assert [dict(zip(header, row, strict=True)) for row in body] == [
        {
            **dict(zip(header, [""] * len(header), strict=True)),
            "id": "1",
            "title": "Ring",
            "category": "Rings",
            "gpc": "none",
        },
        {
            **dict(zip(header, [""] * len(header), strict=True)),
            "id": "2",
            "title": "Cap",
            "category": "Hats",
            "gpc": "none",
        },
    ]
    (entry,) = report["rules"]["lookups"]
    assert (entry["matched"], entry["unmatched"]) == (0, 2)


def test_an_empty_lookup_table_alone_matches_nothing(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "category"], [["1", "Rings"], ["2", ""]])
    (tmp_path / "table.json").write_text("[]", encoding="utf-8")
    spec = {
        "company": "sec12",
        "project": "empty_lookup",
        "sources": [{"name": "main", "url": "main.csv"}],
        "lookups": [{"name": "cats", "key": "shop_category", "url": "table.json", "format": "json"}],
        "rules": [{"name": "gpc", "then": [{"lookup": "cats", "match": "category", "set": {"gpc": "gpc"}}]}],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv"}],
    }
    report = _run(_write_spec(tmp_path, spec))
    assert read_csv(run_env / "sec12" / "empty_lookup" / "all.csv") == (
        ["id", "category", "gpc"],
        [["1", "Rings", ""], ["2", "", ""]],  # no `default`: the field is left as it was (none yet)
    )
    (entry,) = report["rules"]["lookups"]
    assert (entry["matched"], entry["unmatched"]) == (0, 2)
    (table,) = report["lookups"]
    assert (table["name"], table["rows"], table["keys"]) == ("cats", 0, 0)


def test_a_source_with_items_but_no_key_field_still_fails_at_merge(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title"], [["1", "Ring"]])
    write_csv(tmp_path / "extra.csv", ["sku", "price"], [["1", "9"]])
    spec = {
        "company": "sec12",
        "project": "nokey",
        "sources": [{"name": "main", "url": "main.csv"}, {"name": "extra", "url": "extra.csv"}],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv"}],
    }
    code, report = run_json(_write_spec(tmp_path, spec))
    assert code == 1
    assert "source 'extra' has no key field 'id' (its fields: sku, price)" in report["error"]["message"]


# -- P37: a blank line holds nothing but white space -------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "data", "options"),
    [
        ("csv", "id,t\n1,a\n , \n,\n2,b\n", {}),
        ("csv", "id;t\n1;a\n;\n2;b\n", {"delimiter": ";"}),
        ("csv", "id|t\n1|a\n|\n2|b\n", {"delimiter": "|"}),
        ("tsv", "id\tt\n1\ta\n \t\t \n\t\n2\tb\n", {}),
    ],
)
def test_a_line_of_a_non_blank_delimiter_is_a_record_and_white_space_is_blank(
    tmp_path: Path, fmt: str, data: str, options: dict[str, str]
) -> None:
    path = tmp_path / f"feed.{fmt}"
    path.write_text(data, encoding="utf-8")
    reader = open_reader(path, source="main", format=fmt, **options)
    rows = list(reader)
    if fmt == "tsv":  # tabs and spaces only: blank, not counted
        assert rows == [(2, ["1", "a"]), (5, ["2", "b"])]
    elif data.startswith("id,"):  # " , " and "," hold a delimiter that is not white space: records
        assert rows == [(2, ["1", "a"]), (3, [" ", " "]), (4, ["", ""]), (5, ["2", "b"])]
    else:
        assert rows == [(2, ["1", "a"]), (3, ["", ""]), (4, ["2", "b"])]
    assert reader.stats.rows == len(rows)
