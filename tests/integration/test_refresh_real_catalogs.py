"""Refreshes (SPEC 11, #52) over real catalogs (tests/fixtures/realfeeds, copied from ../shared/realfeeds
with their provenance): a stock change and edits of the catalog file itself, each refreshed as the
project would be and compared with a `--full` run of a twin project and with a fresh project.

The catalogs bring what generated feeds do not: Shopify's CRLF records with bare LF inside quoted HTML
and `12"` in unquoted cells, variant rows keyed by a `key_from` template (and image rows whose keys
repeat), WooCommerce's BOM and doubled quotes in HTML, PrestaShop's `;` delimiter and rows ending in
`;`. Whatever way a refresh takes (delta or full), its files and report must be a full run's.
"""

from __future__ import annotations

import csv
import io
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import published_files, write_csv
from tests.integration.test_incremental import named, ok

pytestmark = pytest.mark.integration

REALFEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "realfeeds"


@dataclass(frozen=True)
class Catalog:
    name: str
    file: Path
    source: dict[str, Any]  # the primary source's settings besides name and url
    key: str  # the spec's key field
    key_of: str  # a template of the key from a row, as `key_from` or the key column gives it
    title: str  # a text field the rules and exports read
    delimiter: str = ","
    encoding: str = "utf-8"
    #: byte edits of the catalog file (old, new): each old occurs in it
    edits: tuple[tuple[bytes, bytes], ...] = ()
    #: the refresh mode each edit takes (full when the catalog's records cannot be patched: see the test)
    edit_modes: tuple[str, ...] = ()


CATALOGS = [
    Catalog(
        "shopify",
        REALFEEDS / "shopify-jewelry" / "jewelery.csv",
        {"key_from": "{Handle}-{Option1 Value}"},
        "id",
        "{Handle}-{Option1 Value}",
        "Title",
        edits=((b"Anchor Bracelet Mens", b'Anchor Bracelet "Mens"'), (b"42.99", b"41.50")),
        edit_modes=("full", "full"),  # keys from a template: PARSE cannot tell a changed record's item
    ),
    Catalog(
        "woo",
        REALFEEDS / "woo-ptbr" / "sample_products.txt",
        {"format": "csv"},
        "ID",
        "{ID}",
        "Nome",
        encoding="utf-8-sig",
        edits=(
            (b"Range date registration", b"Range date registration v2"),
            (b"Lorem ipsum", b'Lorem ""ipsum"", dolor\nnova linha'),  # inside a quoted HTML cell
        ),
        edit_modes=("delta", "delta"),
    ),
    Catalog(
        "prestashop",
        REALFEEDS / "prestashop" / "products_import.csv",
        {"delimiter": ";"},
        "Product ID",
        "{Product ID}",
        "Name *",
        delimiter=";",
        edits=((b"iPod Nano", b"iPod Nano 7G"), (b";iPod shuffle;", b';"iPod; shuffle\n2";')),
        edit_modes=("delta", "delta"),
    ),
]


def catalog_rows(cat: Catalog, path: Path) -> list[dict[str, str]]:
    text = path.read_bytes().decode(cat.encoding)
    return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=cat.delimiter))


def keys_of(cat: Catalog, path: Path) -> list[str]:
    """The items' keys as `key_from` or the key column gives them, first occurrences in file order."""
    keys = [cat.key_of.format_map(_Blank(row)).strip() for row in catalog_rows(cat, path)]
    return list(dict.fromkeys(k for k in keys if k))


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return ""


def write_spec(tmp: Path, cat: Catalog, project: str) -> Path:
    title, key = "{" + cat.title + "}", "{" + cat.key + "}"
    spec = {
        "company": "realrefresh",
        "project": project,
        "key": cat.key,
        "sources": [
            {"name": "catalog", "url": cat.file.name, **cat.source},
            {"name": "stock", "url": "stock.csv", "mode": "enrich"},
        ],
        "rules": [
            {"name": "gone", "when": {"field": "stock", "op": "eq", "value": "0"}, "then": [{"exclude": True}]},
            {
                "name": "few",
                "when": {"field": "stock", "op": "eq", "value": "1"},
                "then": [{"set": "label", "value": "last one"}],
            },
            {"name": "named", "when": {"field": cat.title, "op": "empty"}, "then": [{"set": "label", "value": "?"}]},
        ],
        "exports": [
            {
                "name": "feed",
                "path": "feed.csv",
                "format": "csv",
                "fields": {"id": key, "title": title, "stock": "{stock}", "label": "{label}"},
            },
            {"name": "lines", "path": "feed.jsonl", "format": "jsonl", "fields": {"id": key, "title": title}},
            {"name": "whole", "path": "feed.json", "format": "json", "fields": {"id": key, "label": "{label}"}},
        ],
    }
    path = tmp / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def write_stock(tmp: Path, cat: Catalog, keys: list[str], level: Any) -> None:
    write_csv(tmp / "stock.csv", [cat.key, "stock"], [[k, str(level(i))] for i, k in enumerate(keys)])


def files(exports: Path, project: str) -> dict[str, bytes]:
    return published_files(exports / "realrefresh" / project)


@pytest.mark.parametrize("cat", CATALOGS, ids=[c.name for c in CATALOGS])
def test_a_real_catalogs_refreshes_give_a_full_runs_files_and_report(
    run_env: Path, tmp_path: Path, cat: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PARSE keeps a copy of every catalog file, however small, so that an edit may be patched (#52), and each
    # replaced export is kept as the spare the next write takes.
    monkeypatch.setenv("FIREFEED_PARSE_KEEP_COPY_MIN_BYTES", "1")
    monkeypatch.setenv("FIREFEED_EXPORT_SPARE_MIN_BYTES", "1")
    (tmp_path / "feeds").mkdir()
    folder = tmp_path / "feeds"
    shutil.copy(cat.file, folder / cat.file.name)
    keys = keys_of(cat, folder / cat.file.name)
    assert len(keys) >= 5
    write_stock(folder, cat, keys, lambda i: i % 4)
    refreshed, twin = (f"real{cat.name}{uuid.uuid4().hex[:6]}" for _ in range(2))
    specs = {p: write_spec(folder, cat, p) for p in (refreshed, twin)}
    ok(specs[refreshed])
    ok(specs[twin])

    def same_as_full_and_fresh(expect_mode: str | None, *, fresh: bool = False) -> dict[str, Any]:
        report = ok(specs[refreshed])
        if expect_mode is not None:
            assert report["incremental"]["mode"] == expect_mode, report["incremental"]
        assert named(report, refreshed) == named(ok(specs[twin], "--full"), twin)
        assert files(run_env, refreshed) == files(run_env, twin)
        if fresh:
            new = f"real{cat.name}{uuid.uuid4().hex[:6]}"
            ok(write_spec(folder, cat, new))
            assert files(run_env, refreshed) == files(run_env, new)
        return report

    # Nothing changed: the last run's work is reused.
    assert ok(specs[refreshed])["incremental"]["mode"] == "unchanged"

    # The stock of every third item changes (some to 0: they leave the exports): a delta.
    write_stock(folder, cat, keys, lambda i: (i + 1) % 4 if i % 3 == 0 else i % 4)
    same_as_full_and_fresh("delta", fresh=True)

    # The catalog file edited in place, record by record (a value gaining quotes, a delimiter or a newline).
    path = folder / cat.file.name
    modes: list[tuple[str, str]] = []
    for old, new in cat.edits:
        data = path.read_bytes()
        assert old in data, old
        path.write_bytes(data.replace(old, new, 1))
        report = same_as_full_and_fresh(None)
        modes.append((report["incremental"]["mode"], report["incremental"]["reason"]))

    assert [m for m, _ in modes] == list(cat.edit_modes), modes

    # Both changed at once, then back to the first files: every way ends where a full run does.
    write_stock(folder, cat, keys, lambda i: i % 4)
    shutil.copy(cat.file, path)
    same_as_full_and_fresh(None, fresh=True)
