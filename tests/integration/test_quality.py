"""Channel diagnostics of exports (#9): exact findings per check, none for a clean feed, and `fail_on`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from tests.integration.conftest import cli, run_json, write_csv

HEADER = ["id", "sku", "title", "description", "link", "image_link", "availability", "price"]


def _clean(n: int) -> list[str]:
    return [
        f"G{n}",
        f"S{n}",
        f"Item {n}",
        f"A good item number {n}",
        f"https://shop.example.com/p/{n}",
        f"HTTP://cdn.example.com/{n}.jpg",
        "in stock" if n % 2 else "in_stock",
        f"{n}.50 EUR",
    ]


def _item(n: int, **changes: str) -> list[str]:
    row = dict(zip(HEADER, _clean(n), strict=True))
    row.update(changes)
    return [row[h] for h in HEADER]


def _spec(tmp: Path, project: str, rows: list[list[str]], exports: list[dict[str, Any]]) -> Path:
    write_csv(tmp / "main.csv", HEADER, rows)
    spec = {"company": "acme", "project": project, "sources": [{"name": "main", "url": "main.csv"}], "exports": exports}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    return path


def _findings(report: dict[str, Any], export: str) -> list[tuple[str, str, str, int, list[str]]]:
    entry = next(e for e in report["exports"] if e["name"] == export)
    return sorted(
        (f["check"], f["attribute"], f["severity"], f["count"], f["samples"]) for f in entry["diagnostics"]["findings"]
    )


# Channel id = sku (so ids can repeat), everything else as itself.
_GOOGLE_FIELDS = {h: ("sku" if h == "id" else h) for h in HEADER if h != "sku"}


def _one_violation_each() -> list[list[str]]:
    return [
        _item(1),
        _item(2, title="   "),  # only spaces: as good as empty
        _item(3, sku="S" * 51),
        _item(4, title="t" * 151),
        _item(5, description="d" * 5001),
        _item(6, price="12,50"),
        _item(7, availability="maybe"),
        _item(8, link="shop.example.com/p/8"),
        _item(9, image_link="https://cdn.example.com/a b.jpg"),
        _item(10, sku="S1"),
        _item(11, price="3.00 XYZ", title="€" * 150),  # a foreign code; 150 characters (450 bytes) is not too long
    ]


def test_a_feed_with_one_violation_of_each_google_check_gets_exactly_those_findings(
    run_env: Path, tmp_path: Path
) -> None:
    spec = _spec(
        tmp_path,
        "diag_google",
        _one_violation_each(),
        # C3: 8 of the 11 items have an error; this test reads the findings of a published run.
        [{"name": "google", "format": "google-xml", "path": "g.xml", "fields": _GOOGLE_FIELDS, "max_invalid": "100%"}],
    )
    code, report = run_json(spec)
    assert code == 0, report["error"]
    assert _findings(report, "google") == sorted(
        [
            ("missing", "title", "error", 1, ["S2"]),
            ("too_long", "id", "error", 1, ["S" * 51]),
            ("too_long", "title", "warning", 1, ["S4"]),
            ("too_long", "description", "warning", 1, ["S5"]),
            ("price_format", "price", "error", 2, ["S6", "S11"]),
            ("availability_value", "availability", "error", 1, ["S7"]),
            ("url", "link", "error", 1, ["S8"]),
            ("url", "image_link", "error", 1, ["S9"]),
            ("duplicate_id", "id", "error", 1, ["S1"]),
            # C2: no item has a gtin or an mpn (the export writes neither)
            ("identifier", "gtin", "warning", 11, ["S1", "S2", "S" * 51, "S4", "S5"]),
        ]
    )
    diagnostics = report["exports"][0]["diagnostics"]
    assert (diagnostics["channel"], diagnostics["errors"], diagnostics["warnings"]) == ("google", 7, 3)
    # C3: items 2, 3, 6, 7, 8, 9, 10 (S1 again) and 11 have an error: 8 of 11, accepted up to 100%
    assert (diagnostics["items"], diagnostics["invalid"]) == (11, 8)
    assert diagnostics["max_invalid"] == {"share": 72.73, "max_invalid": 100.0, "status": "ok"}


def test_a_clean_feed_gets_no_findings_and_an_export_without_channel_is_not_checked(
    run_env: Path, tmp_path: Path
) -> None:
    spec = _spec(
        tmp_path,
        "diag_clean",
        [_item(n) for n in range(1, 8)],
        [
            # The sku as mpn: an identifier, which C2 wants of a clean item.
            {"name": "google", "format": "google-xml", "path": "g.xml", "fields": {**_GOOGLE_FIELDS, "mpn": "sku"}},
            {"name": "tsv", "format": "tsv", "path": "g.tsv", "channel": "google"},
            {"name": "plain", "format": "csv", "path": "p.csv"},
        ],
    )
    code, report = run_json(spec)
    assert code == 0, report["error"]
    by_name = {e["name"]: e for e in report["exports"]}
    ok = {"share": 0.0, "max_invalid": 5.0, "status": "ok"}
    assert by_name["google"]["diagnostics"] == {
        "channel": "google",
        "errors": 0,
        "warnings": 0,
        "findings": [],
        "items": 7,
        "invalid": 0,
        "max_invalid": ok,
    }
    # The same items with no gtin or mpn column: only C2's identifier warning, on every item, none invalid.
    identifier = {
        "severity": "warning",
        "check": "identifier",
        "attribute": "gtin",
        "count": 7,
        "samples": ["G1", "G2", "G3", "G4", "G5"],
        "message": "gtin: no gtin, no mpn and identifier_exists not 'no'",
    }
    assert by_name["tsv"]["diagnostics"] == {
        "channel": "google",
        "errors": 0,
        "warnings": 1,
        "findings": [identifier],
        "items": 7,
        "invalid": 0,
        "max_invalid": ok,
    }
    assert by_name["plain"]["diagnostics"] is None


def test_the_meta_channel_has_its_own_id_length_values_and_required_attributes(run_env: Path, tmp_path: Path) -> None:
    rows = [
        _item(1, availability="in stock"),
        _item(2, availability="in_stock"),  # Google's spelling: not one of Meta's values
        _item(3, availability="discontinued", id="M" * 100),  # 100 characters: Meta's limit, not beyond
        _item(4, availability="out of stock", id="M" * 101),
    ]
    # C3: every item lacks condition and brand; this test reads the findings of a published run.
    meta = {"name": "meta", "format": "csv", "path": "m.csv", "channel": "meta", "max_invalid": "100%"}
    spec = _spec(tmp_path, "diag_meta", rows, [meta])
    code, report = run_json(spec)
    assert code == 0, report["error"]
    everyone = ["G1", "G2", "M" * 100, "M" * 101]
    assert _findings(report, "meta") == sorted(
        [
            ("missing", "condition", "error", 4, everyone),
            ("missing", "brand", "error", 4, everyone),
            ("too_long", "id", "error", 1, ["M" * 101]),
            ("availability_value", "availability", "error", 1, ["G2"]),
        ]
    )


def _counter(name: str, **labels: str) -> float:
    from firefeed import metrics

    text = metrics.render(fleet=False)[0].decode()
    return sum(v for n, lab, v in metrics.iter_samples(text) if n == name and lab == labels)


def test_fail_on_error_keeps_the_previous_file_and_fails_the_run_with_the_findings(
    run_env: Path, tmp_path: Path
) -> None:
    exports = [
        {"name": "google", "format": "google-xml", "path": "g.xml", "fail_on": "error"},
        {"name": "plain", "format": "csv", "path": "p.csv"},
    ]
    rows = [_item(n) for n in range(1, 6)]
    spec = _spec(tmp_path, "diag_fail", rows, exports)
    assert run_json(spec)[0] == 0
    folder = run_env / "acme" / "diag_fail"
    before = {name: (folder / name).read_bytes() for name in ("g.xml", "p.csv")}
    rows[2] = _item(3, price="free")
    rows.append(_item(6, title="t" * 200))  # a warning alone would not block `fail_on: error`
    _spec(tmp_path, "diag_fail", rows, exports)
    price = {"channel": "google", "severity": "error", "check": "price_format"}
    before_metrics = (
        _counter("firefeed_export_findings_total", **price),
        _counter("firefeed_export_finding_items_total", **price),
        _counter("firefeed_publish_blocked_runs_total", reason="channel_errors"),
    )
    code, report = run_json(spec)
    assert code == 1
    assert (
        _counter("firefeed_export_findings_total", **price),
        _counter("firefeed_export_finding_items_total", **price),
        _counter("firefeed_publish_blocked_runs_total", reason="channel_errors"),
    ) == (before_metrics[0] + 1, before_metrics[1] + 1, before_metrics[2] + 1)
    assert report["status"] == "FAILED"
    error = report["error"]
    assert (error["step"], error["type"]) == ("EXPORT", "ChannelRejectError")
    # C3: `fail_on: error` is max_invalid 0%: one invalid item of six blocks the export.
    assert error["message"] == (
        "export 'google': 1 of 6 items (16.7%) have errors google rejects, more than fail_on: error allows none "
        "(1 item(s) price: not '<number> <ISO 4217 code>' (e.g. G3)); re-run with --accept-invalid to publish anyway"
    )
    assert _findings(report, "google") == [
        # C2: the export's default columns hold no gtin or mpn
        ("identifier", "gtin", "warning", 6, ["G1", "G2", "G3", "G4", "G5"]),
        ("price_format", "price", "error", 1, ["G3"]),
        ("too_long", "title", "warning", 1, ["G6"]),
    ]
    diagnostics = report["exports"][0]["diagnostics"]
    assert (diagnostics["items"], diagnostics["invalid"]) == (6, 1)
    assert diagnostics["max_invalid"] == {"share": 16.67, "max_invalid": 0.0, "status": "blocked"}
    assert {name: (folder / name).read_bytes() for name in ("g.xml", "p.csv")} == before
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]
    code, out = cli("run", str(spec))
    assert code == 1
    assert "google: 1 error(s), 2 warning(s)" in out


def test_fail_on_warning_blocks_on_a_warning_too(run_env: Path, tmp_path: Path) -> None:
    exports = [{"name": "google", "format": "google-xml", "path": "g.xml", "fail_on": "warning"}]
    spec = _spec(tmp_path, "diag_warn", [_item(1), _item(2, description="d" * 5001)], exports)
    code, report = run_json(spec)
    assert code == 1
    assert report["error"]["type"] == "ChannelRejectError"
    assert "longer than 5000 characters (e.g. G2)" in report["error"]["message"]
    assert not (run_env / "acme" / "diag_warn" / "g.xml").exists()


@pytest.mark.parametrize(
    ("url", "bad"),
    [
        ("https://shop.example.com/p/1", False),
        ("HTTP://shop.example.com/p/1", False),
        ("https://shop.example.com/a b", True),
        ("https://shop.example.com/a\tb", True),
        ("https://shop.example.com/a\nb", True),
        ("https://shop.example.com/a\rb", True),
        ("ftp://shop.example.com/p/1", True),
        ("https:///p/1", True),
        ("", False),  # an empty value is the `missing` check's, not this one's
    ],
)
def test_the_url_check_flags_exactly_the_urls_a_channel_rejects(engine: Engine, url: str, bad: bool) -> None:
    from firefeed.export._copy import render
    from firefeed.export.diagnostics import _bad_url
    from firefeed.export.select import Piece

    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(render(Piece(sql.SQL("SELECT ")) + _bad_url(Piece(sql.SQL("%s"), (url,))), cur))
        assert cur.fetchone()[0] is bad


def test_unchanged_items_keep_their_published_flags_and_the_findings_match_a_fresh_check(
    run_env: Path, tmp_path: Path
) -> None:
    """Later runs check only new and changed items; what they report must be what checking every item gives."""
    # C3: most items have an error; this test reads the findings of published runs.
    google = [
        {"name": "google", "format": "google-xml", "path": "g.xml", "fields": _GOOGLE_FIELDS, "max_invalid": "100%"}
    ]
    first = _one_violation_each()
    spec = _spec(tmp_path, "diag_reuse", first, google)
    assert run_json(spec)[0] == 0

    # Fix two items, break two clean ones, leave the other violations as they were, add a broken item.
    second = [list(r) for r in first]
    second[5] = _item(6)  # price fixed
    second[6] = _item(7)  # availability fixed
    second[0] = _item(1, link="ftp://shop.example.com/p/1")
    second.append(_item(12, price="free"))
    _spec(tmp_path, "diag_reuse", second, google)
    code, report = run_json(spec)
    assert code == 0, report["error"]
    d = report["exports"][0]["diff"]
    assert (d["added"], d["changed"], d["unchanged"]) == (1, 3, 8)

    # The same items checked from scratch, in a project with no published flags.
    (tmp_path / "fresh").mkdir()
    fresh = _spec(tmp_path / "fresh", "diag_reuse_fresh", second, google)
    code, reference = run_json(fresh)
    assert code == 0, reference["error"]
    assert reference["exports"][0]["diff"]["baseline"] is False
    assert _findings(report, "google") == _findings(reference, "google")
    assert ("url", "link", "error", 2, ["S1", "S8"]) in _findings(report, "google")
    assert ("price_format", "price", "error", 2, ["S11", "S12"]) in _findings(report, "google")


def test_flags_are_not_reused_when_the_checks_change(run_env: Path, tmp_path: Path) -> None:
    """An unchanged item seen by other checks (another channel, other columns) is checked again."""
    rows = [_item(1), _item(2, availability="in_stock")]
    spec = _spec(tmp_path, "diag_rechecked", rows, [{"name": "feed", "format": "csv", "path": "f.csv"}])
    assert run_json(spec)[0] == 0  # no channel: no flags at all
    _spec(tmp_path, "diag_rechecked", rows, [{"name": "feed", "format": "csv", "path": "f.csv", "channel": "google"}])
    code, report = run_json(spec)
    assert code == 0, report["error"]
    assert report["exports"][0]["diff"]["unchanged"] == 2
    # C2: the feed has no gtin or mpn, which only checking the unchanged items again finds
    assert _findings(report, "feed") == [("identifier", "gtin", "warning", 2, ["G1", "G2"])]
    # C3: meta wants condition and brand, which no item has; this test reads the findings.
    meta = {"name": "feed", "format": "csv", "path": "f.csv", "channel": "meta", "max_invalid": "100%"}
    _spec(tmp_path, "diag_rechecked", rows, [meta])
    code, report = run_json(spec)
    assert code == 0, report["error"]
    assert report["exports"][0]["diff"]["unchanged"] == 2
    assert ("availability_value", "availability", "error", 1, ["G2"]) in _findings(report, "feed")
