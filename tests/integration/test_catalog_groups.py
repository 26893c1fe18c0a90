"""SPEC 9, variants: `group`, the `aggregate` action and `group_first` (P16-P19), end to end."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import read_csv, run_json, write_csv

pytestmark = pytest.mark.integration

JEWELRY = Path(__file__).resolve().parents[1] / "fixtures" / "realfeeds" / "shopify-jewelry" / "jewelery.csv"


def _run(tmp: Path, spec: dict[str, Any]) -> dict[str, Any]:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    return report


def test_shopify_variants_keep_their_own_keys_and_one_export_keeps_one_item_per_group(
    run_env: Path, tmp_path: Path
) -> None:
    shutil.copy(JEWELRY, tmp_path / "jewelery.csv")
    spec = {
        "company": "catalog",
        "project": "jewelry_groups",
        "group": "item_group_id",
        "sources": [{"name": "shopify", "url": "jewelery.csv", "key_from": "{Handle}-{Option1 Value}"}],
        "rules": [
            {"name": "image rows", "when": {"field": "Option1 Value", "op": "empty"}, "then": [{"exclude": True}]},
            {"name": "group", "then": [{"copy": "item_group_id", "from": "Handle"}]},
            {
                "name": "variant facts",
                "then": [
                    {"aggregate": "variants", "op": "count"},
                    {"aggregate": "from_price", "op": "min", "of": "Variant Price"},
                    {"aggregate": "options", "op": "join", "of": "Option1 Value", "separator": "/"},
                    {"aggregate": "title", "op": "first", "of": "Title"},
                ],
            },
        ],
        "exports": [
            {
                "name": "variants",
                "format": "csv",
                "path": "variants.csv",
                "fields": {"id": "id", "item_group_id": "item_group_id", "price": "Variant Price", "title": "title"},
            },
            {
                "name": "products",
                "format": "csv",
                "path": "products.csv",
                "fields": {"id": "item_group_id", "price": "from {from_price}", "options": "options", "n": "variants"},
                "where": {"group_first": True},
            },
        ],
    }
    _run(tmp_path, spec)

    with JEWELRY.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    first: dict[str, dict[str, str]] = {}
    for row in rows:
        first.setdefault(f"{row['Handle']}-{row['Option1 Value']}".strip(), row)
    variants = [(k, r) for k, r in first.items() if r["Option1 Value"].strip()]
    groups: dict[str, list[dict[str, str]]] = {}
    for _, r in variants:
        groups.setdefault(r["Handle"], []).append(r)

    _, body = read_csv(run_env / "catalog" / "jewelry_groups" / "variants.csv")
    assert [(r[0], r[1], r[2]) for r in body] == [(k, r["Handle"], r["Variant Price"]) for k, r in variants]
    # the group's first title on every variant (Shopify leaves it empty on the later variant rows)
    assert [r[3] for r in body] == [groups[r["Handle"]][0]["Title"] for _, r in variants]

    _, products = read_csv(run_env / "catalog" / "jewelry_groups" / "products.csv")
    expected = []
    for handle, members in groups.items():
        low = min(float(m["Variant Price"]) for m in members)
        places = max(len(m["Variant Price"].partition(".")[2]) for m in members)
        options = "/".join(m["Option1 Value"] for m in members)
        expected.append([handle, f"from {low:.{places}f}", options, str(len(members))])
    assert products == expected
    assert ["leather-anchor", "from 55.00", "Gold/Silver", "2"] in products


def _items(tmp: Path) -> None:
    write_csv(
        tmp / "main.csv",
        ["id", "grp", "price", "size"],
        [
            ["1", "A", "10", "S"],
            ["2", " A ", "7,5", "M"],
            ["3", "", "3", "S"],
            ["4", "B", "x", "L"],
            ["5", "A", "12.25", "XL"],
            ["6", "", "4", "M"],
            ["7", "B", "", "S"],
        ],
    )


def test_an_aggregate_reads_every_live_member_as_the_rule_starts(run_env: Path, tmp_path: Path) -> None:
    _items(tmp_path)
    spec = {
        "company": "catalog",
        "project": "groups_p16",
        "group": "grp",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {"name": "drop xl", "when": {"field": "size", "op": "eq", "value": "XL"}, "then": [{"exclude": True}]},
            {
                "name": "facts",
                "when": {"field": "size", "op": "eq", "value": "S"},
                "then": [
                    {"set": "price", "value": "100"},  # not seen by this rule's own aggregates
                    {"aggregate": "total", "op": "sum", "of": "price"},
                    {"aggregate": "top", "op": "max", "of": "price", "round": "0"},
                    {"aggregate": "sizes", "op": "join", "of": "{size}:{price}"},
                    {"aggregate": "n", "op": "count"},
                    {"aggregate": "last", "op": "last", "of": "size"},
                ],
            },
            {"name": "regroup", "then": [{"set": "grp", "value": "all"}]},
            {"name": "count again", "then": [{"aggregate": "all", "op": "count"}]},
        ],
        "exports": [
            {
                "name": "all",
                "format": "csv",
                "path": "all.csv",
                "fields": {
                    "id": "id",
                    "price": "price",
                    "total": "total",
                    "top": "top",
                    "sizes": "sizes",
                    "n": "n",
                    "last": "last",
                    "all": "all",
                },
            }
        ],
    }
    report = _run(tmp_path, spec)
    _, body = read_csv(run_env / "catalog" / "groups_p16" / "all.csv")
    assert body == [
        # group A without the excluded XL item: 10 and 7,5 (the number ops' reading)
        ["1", "100", "17.5", "10", "S:10,M:7,5", "2", "M", "6"],
        ["2", "7,5", "", "", "", "", "", "6"],
        # a blank group value: a group of one
        ["3", "100", "3", "3", "S:3", "1", "S", "6"],
        # group B: "x" and "" have no number -> ""
        ["4", "x", "", "", "", "", "", "6"],
        ["6", "4", "", "", "", "", "", "6"],
        ["7", "100", "", "", "L:x,S:", "2", "S", "6"],
    ]
    assert report["rules"]["matched"] == {"drop xl": 1, "facts": 3, "regroup": 6, "count again": 6}


def test_group_first_in_an_exports_where_is_decided_after_all_rules_before_where_filters(
    run_env: Path, tmp_path: Path
) -> None:
    _items(tmp_path)
    spec = {
        "company": "catalog",
        "project": "groups_p19",
        "group": "grp",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {"name": "drop first", "when": {"field": "id", "op": "eq", "value": "1"}, "then": [{"exclude": True}]},
            {
                "name": "regroup",
                "when": {"field": "id", "op": "eq", "value": "6"},
                "then": [{"set": "grp", "value": "B"}],
            },
        ],
        "exports": [
            {
                "name": "firsts",
                "format": "csv",
                "path": "firsts.csv",
                "fields": {"id": "id"},
                "where": {"group_first": True},
            },
            {
                "name": "first small",
                "format": "csv",
                "path": "small.csv",
                "fields": {"id": "id"},
                "where": {"all": [{"group_first": True}, {"field": "size", "op": "ne", "value": "S"}]},
            },
            {
                "name": "rest",
                "format": "csv",
                "path": "rest.csv",
                "fields": {"id": "id"},
                "where": {"not": {"group_first": True}},
            },
        ],
    }
    _run(tmp_path, spec)
    out = run_env / "catalog" / "groups_p19"
    # A: 2 (1 was excluded), 5; blank: 3; B: 4, 6 (regrouped), 7
    assert read_csv(out / "firsts.csv")[1] == [["2"], ["3"], ["4"]]
    assert read_csv(out / "small.csv")[1] == [["2"], ["4"]]  # 3 is a first but small
    assert read_csv(out / "rest.csv")[1] == [["5"], ["6"], ["7"]]
