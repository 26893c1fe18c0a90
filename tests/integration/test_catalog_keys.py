"""SPEC 9, keys and variants: `key_from` fills the key field from a template before MERGE (P15)."""

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


def _write_spec(tmp: Path, spec: dict[str, Any]) -> Path:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _run(spec: Path) -> dict[str, Any]:
    code, report = run_json(spec)
    assert code == 0, report
    return report


def _shopify_rows() -> list[dict[str, str]]:
    with JEWELRY.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_shopify_variants_sharing_a_handle_are_each_kept_with_their_own_key(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(JEWELRY, tmp_path / "jewelery.csv")
    spec = {
        "company": "catalog",
        "project": "jewelry_keys",
        "key": "id",
        "sources": [{"name": "shopify", "url": "jewelery.csv", "key_from": "{Handle}-{Option1 Value}"}],
        "rules": [
            # Shopify's extra image rows carry no option: they are not variants
            {"name": "image rows", "when": {"field": "Option1 Value", "op": "empty"}, "then": [{"exclude": True}]},
            {"name": "group", "then": [{"copy": "item_group_id", "from": "Handle"}]},
        ],
        "exports": [
            {
                "name": "variants",
                "format": "csv",
                "path": "variants.csv",
                "fields": {"id": "id", "item_group_id": "item_group_id", "price": "Variant Price"},
            }
        ],
    }
    report = _run(_write_spec(tmp_path, spec))

    rows = _shopify_rows()
    first: dict[str, dict[str, str]] = {}
    for row in rows:
        first.setdefault(f"{row['Handle']}-{row['Option1 Value']}".strip(), row)
    variants = [(k, r["Handle"], r["Variant Price"]) for k, r in first.items() if r["Option1 Value"].strip()]
    header, body = read_csv(run_env / "catalog" / "jewelry_keys" / "variants.csv")
    assert header == ["id", "item_group_id", "price"]
    assert [tuple(r) for r in body] == variants
    # both leather-anchor variants, each with its own price, in one group
    assert ["leather-anchor-Gold", "leather-anchor", "69.99"] in body
    assert ["leather-anchor-Silver", "leather-anchor", "55"] in body
    (source,) = report["sources"]
    assert source["skipped"]["duplicate_key"] == len(rows) - len(first)
    assert source["skipped"]["empty_key"] == 0


def test_a_key_from_is_trimmed_overwrites_the_key_column_and_a_blank_one_is_an_empty_key(
    run_env: Path, tmp_path: Path
) -> None:
    write_csv(
        tmp_path / "main.csv",
        ["id", "sku", "size"],
        [["x1", " A ", "M"], ["x2", "", ""], ["x3", "A", "M"], ["x4", "B", ""], ["x5", "", " "]],
    )
    spec = {
        "company": "catalog",
        "project": "keys_trim",
        "sources": [{"name": "main", "url": "main.csv", "key_from": " {sku}{size} {missing}"}],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv", "fields": {"id": "id", "sku": "sku"}}],
    }
    report = _run(_write_spec(tmp_path, spec))
    _, body = read_csv(run_env / "catalog" / "keys_trim" / "all.csv")
    # " A M " -> "A M" (trimmed); "AM" is another key; "B" alone; the blank ones are skipped
    assert body == [["A M", " A "], ["AM", "A"], ["B", "B"]]
    (source,) = report["sources"]
    assert source["skipped"] == {"empty_key": 2, "duplicate_key": 0, "malformed": 0}


def test_a_later_source_with_key_from_enriches_the_items_its_rendered_key_names(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title"], [["shirt-S", "Shirt S"], ["shirt-M", "Shirt M"]])
    write_csv(tmp_path / "stock.csv", ["parent", "size", "qty"], [["shirt", "M", "4"], ["shirt", "M", "9"]])
    spec = {
        "company": "catalog",
        "project": "keys_enrich",
        "sources": [
            {"name": "main", "url": "main.csv"},
            {"name": "stock", "url": "stock.csv", "key_from": "{parent}-{size}"},
        ],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv"}],
    }
    report = _run(_write_spec(tmp_path, spec))
    header, body = read_csv(run_env / "catalog" / "keys_enrich" / "all.csv")
    assert header == ["id", "title", "parent", "size", "qty"]
    assert body == [["shirt-S", "Shirt S", "", "", ""], ["shirt-M", "Shirt M", "shirt", "M", "4"]]
    assert report["sources"][1]["skipped"]["duplicate_key"] == 1


def test_the_preview_samples_items_by_their_rendered_key(run_env: Path, tmp_path: Path) -> None:
    import json

    from tests.integration.conftest import cli

    shutil.copy(JEWELRY, tmp_path / "jewelery.csv")
    spec = {
        "company": "catalog",
        "project": "keys_preview",
        "sources": [{"name": "shopify", "url": "jewelery.csv", "key_from": "{Handle}-{Option1 Value}"}],
        "exports": [{"name": "all", "format": "csv", "path": "all.csv"}],
    }
    path = _write_spec(tmp_path, spec)
    code, out = cli("preview", str(path), "--items", "4", "--json")
    assert code == 0, out
    assert [i["key"] for i in json.loads(out)["items"]] == [
        "chain-bracelet-Blue",
        "chain-bracelet-Black",
        "leather-anchor-Gold",
        "leather-anchor-Silver",
    ]
    code, out = cli("preview", str(path), "--item", "leather-anchor-Silver", "--json")
    assert code == 0, out
    assert [i["key"] for i in json.loads(out)["items"]] == ["leather-anchor-Silver"]


def test_a_key_from_reads_a_list_fields_elements_in_merge_and_in_the_preview(run_env: Path, tmp_path: Path) -> None:
    """`{images[0]}` is the first element, `{images}` the elements joined with "," (P9), in both places."""
    import json

    from tests.integration.conftest import cli

    write_csv(
        tmp_path / "main.csv",
        ["sku", "images", "title"],
        [["A", "a1.jpg, a2.jpg", "x"], ["B", "b1.jpg", "y"], ["C", "", "z"]],
    )
    spec = {
        "company": "catalog",
        "project": "list_keys",
        "sources": [{"name": "main", "url": "main.csv", "lists": {"images": ","}, "key_from": "{sku}-{images[0]}"}],
        "rules": [{"name": "all", "then": [{"set": "all", "value": "{images}"}]}],
        "exports": [{"name": "e", "format": "csv", "path": "e.csv", "fields": {"id": "id", "all": "all"}}],
    }
    path = _write_spec(tmp_path, spec)
    _run(path)
    _header, body = read_csv(run_env / "catalog" / "list_keys" / "e.csv")
    assert body == [["A-a1.jpg", "a1.jpg,a2.jpg"], ["B-b1.jpg", "b1.jpg"], ["C-", ""]]
    code, out = cli("preview", str(path), "--item", "A-a1.jpg", "--json")
    assert code == 0, out
    assert [i["key"] for i in json.loads(out)["items"]] == ["A-a1.jpg"]
