"""The channel-grade checks of SPEC 10 C2 (#49): each condition on real Postgres, then the findings of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection
from firefeed.export import channel_checks as cc
from firefeed.export._copy import render
from firefeed.export.select import Piece
from tests.integration.conftest import run_json, write_csv


def _judge(engine: Engine, condition: Piece) -> Any:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(render(Piece(sql.SQL("SELECT ")) + condition, cur))
        return cur.fetchone()[0]


def _v(value: str) -> Piece:
    # typed text, as an export's output values are (an untyped literal's cast would be read at parse time)
    return Piece(sql.SQL("%s::text"), (value,))


@pytest.mark.parametrize(
    ("gtin", "bad"),
    [
        ("96385074", False),  # GTIN-8
        ("96385075", True),
        ("036000291452", False),  # GTIN-12 (UPC-A)
        ("036000291453", True),
        ("4006381333931", False),  # GTIN-13 (EAN-13)
        ("4006381333932", True),
        ("10012345678902", False),  # GTIN-14
        ("10012345678903", True),
        ("00000000000000", False),
        ("400638133393", True),  # 12 digits, check digit wrong for that length
        ("40063813339", True),  # 11 digits
        ("400638133393a", True),
        ("4006381333931 ", True),
        ("", False),  # no gtin: the identifier check's business
    ],
)
def test_the_gtin_check_reads_the_gs1_check_digit_of_each_length(engine: Engine, gtin: str, bad: bool) -> None:
    assert _judge(engine, cc.bad_gtin(_v(gtin))) is bad
    assert cc.gtin_is_valid(gtin) is (not bad and gtin != "")


@pytest.mark.parametrize(
    ("url", "bad"),
    [
        ("https://shop.example.com/p/1", False),
        ("HTTPS://Shop.Example.COM:8443/p?x=1", False),
        ("https://cdn.shop.de./a.jpg", False),
        ("https://93.184.216.34/a.jpg", False),
        ("https://[2a00:1450:4001:82b::200e]/a.jpg", False),
        ("https://[2002:5db8:d822::1]/a.jpg", False),  # 6to4 of a public IPv4 address
        ("https://user:pw@shop.example.com/", False),
        ("https://shop.example.com?x=1", False),
        ("https://shop.example.com#top", False),
        ("https://shop.example.de/p", False),
        ("https://localhost/p", True),
        ("https://shop.LOCAL/p", True),
        ("https://shop.local?x=1", True),
        ("https://0x7f.0.0.0xa/p", True),
        ("https://LOCALHOST:8080/p", True),
        ("http://intranet/p", True),
        ("http://shop.local/p", True),
        ("http://db.internal./p", True),
        ("https://shop.test/p", True),
        ("https://a.invalid", True),
        ("https://shop.example/p", True),
        ("https://127.0.0.1/p", True),
        ("https://10.1.2.3:80/p", True),
        ("https://192.168.0.10/p", True),
        ("https://169.254.169.254/latest", True),
        ("https://100.64.0.1/p", True),
        ("https://127.1/p", True),  # a non-standard notation of an address
        ("https://0x7f.0.0.1/p", True),
        ("https://2130706433/p", True),
        ("https://[::1]/p", True),
        ("https://[fe80::1]/p", True),
        ("https://[fc00::5]/p", True),
        ("https://[::ffff:7f00:1]/p", True),  # v4-mapped loopback
        ("https://[2002:c0a8:101::1]/p", True),  # 6to4 of 192.168.1.1
        ("https://[::ffff:1.2.3.4]/p", True),  # a dotted IPv6 form: not parsed, counted unreachable
        ("https://[zz::1]/p", True),
        ("https://user@localhost/p", True),
        ("not a url", False),  # the `url` check's business
        ("", False),
    ],
)
def test_the_public_url_check_flags_exactly_the_hosts_a_channel_cannot_reach(
    engine: Engine, url: str, bad: bool
) -> None:
    assert _judge(engine, cc.private_url(_v(url))) is bad


@pytest.mark.parametrize(
    ("links", "bad"),
    [
        ("https://a.example.com/1.jpg,https://b.example.com/2.jpg", False),
        ("https://a.example.com/1.jpg, https://localhost/2.jpg", True),
        ("https://10.0.0.1/1.jpg,https://b.example.com/2.jpg", True),
        ("https://a.example.com/1.jpg", False),
        ("", False),
    ],
)
def test_each_additional_image_link_of_a_joined_list_is_checked(engine: Engine, links: str, bad: bool) -> None:
    assert _judge(engine, cc.private_url(_v(links), listed=True)) is bad


@pytest.mark.parametrize(
    ("price", "bad"),
    [("0 EUR", True), ("0.00 EUR", True), ("0,0 EUR", True), ("-5.00 EUR", True), ("0.01 EUR", False),
     ("10 EUR", False), ("100.00 EUR", False), ("", False)],
)  # fmt: skip
def test_the_price_value_check_flags_zero_and_negative_prices(engine: Engine, price: str, bad: bool) -> None:
    assert _judge(engine, cc.bad_price_value(_v(price))) is bad


@pytest.mark.parametrize(
    ("sale", "price", "bad"),
    [
        ("8.00 EUR", "10.00 EUR", False),
        ("9,99 EUR", "10 EUR", False),
        ("10.00 EUR", "10 EUR", True),  # not lower
        ("12 EUR", "10.00 EUR", True),
        ("8.00 USD", "10.00 EUR", True),  # another currency
        ("", "10.00 EUR", False),
        ("8 EUR", "", False),
        ("cheap", "10.00 EUR", False),  # not a price at all: nothing to compare
    ],
)
def test_the_sale_price_check_wants_a_lower_price_in_the_same_currency(
    engine: Engine, sale: str, price: str, bad: bool
) -> None:
    assert _judge(engine, cc.bad_sale_price(_v(sale), _v(price))) is bad


@pytest.mark.parametrize(
    ("text", "bad"),
    [("A <b>bold</b> shirt", True), ("Line<br/>break", True), ("Tom &amp; Jerry", True), ("It&#39;s", True),
     ("&#x27;", True), ("Tom & Jerry", False), ("3 < 5 > 2", False), ("a<5", False), ("Plain", False)],
)  # fmt: skip
def test_the_html_check_flags_tags_and_entities_only(engine: Engine, text: str, bad: bool) -> None:
    assert _judge(engine, cc.has_html(_v(text))) is bad


@pytest.mark.parametrize(
    ("value", "allowed", "bad"),
    [("new", cc.CONDITIONS, False), ("Refurbished", cc.CONDITIONS, False), ("mint", cc.CONDITIONS, True),
     ("UNISEX", cc.GENDERS, False), ("boys", cc.GENDERS, True), ("Kids", cc.AGE_GROUPS, False),
     ("teen", cc.AGE_GROUPS, True), ("", cc.AGE_GROUPS, False)],
)  # fmt: skip
def test_the_value_check_takes_the_channel_values_in_any_case(
    engine: Engine, value: str, allowed: tuple[str, ...], bad: bool
) -> None:
    assert _judge(engine, cc.bad_value(_v(value), allowed)) is bad


HEADER = [
    "id", "title", "description", "link", "image_link", "gallery", "availability", "price", "sale_price", "gtin",
    "mpn", "identifier_exists", "condition", "gender", "age_group", "group", "color", "size",
]  # fmt: skip


def _item(n: int, **changes: str) -> list[str]:
    row = {
        "id": f"G{n}",
        "title": f"Item {n}",
        "description": f"A good item number {n}",
        "link": f"https://shop.example.com/p/{n}",
        "image_link": f"https://cdn.example.com/{n}.jpg",
        "gallery": f"https://cdn.example.com/{n}b.jpg,https://cdn.example.com/{n}c.jpg",
        "availability": "in stock",
        "price": "10.00 EUR",
        "sale_price": "",
        "gtin": "4006381333931",
        "mpn": "",
        "identifier_exists": "",
        "condition": "new",
        "gender": "unisex",
        "age_group": "adult",
        "group": f"grp{n}",
        "color": "red",
        "size": "M",
    }
    row.update(changes)
    return [row[h] for h in HEADER]


def _findings(report: dict[str, Any], export: str) -> list[tuple[str, str, str, int, list[str]]]:
    entry = next(e for e in report["exports"] if e["name"] == export)
    return sorted(
        (f["check"], f["attribute"], f["severity"], f["count"], f["samples"]) for f in entry["diagnostics"]["findings"]
    )


def _run(tmp: Path, project: str, rows: list[list[str]], lists: bool) -> dict[str, Any]:
    write_csv(tmp / "main.csv", HEADER, rows)
    source: dict[str, Any] = {"name": "main", "url": "main.csv"}
    if lists:
        source["lists"] = {"gallery": ","}
    fields = {h: h for h in HEADER if h not in ("gallery", "group")}
    fields.update({"additional_image_link": "gallery", "item_group_id": "group"})
    exports = [
        # every check once: far over the 5% a run publishes by default (C3), and that is not what this reads
        {"name": "google", "format": "google-xml", "path": "g.xml", "fields": fields, "max_invalid": "100%"},
        {
            "name": "meta",
            "format": "csv",
            "path": "m.csv",
            "channel": "meta",
            "fields": {**fields, "brand": "title"},
            "max_invalid": "100%",
        },
    ]
    spec = {"company": "acme", "project": project, "sources": [source], "exports": exports}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report["error"]
    return report


def _one_violation_each() -> list[list[str]]:
    return [
        _item(1),
        _item(2, gtin="4006381333932"),
        _item(3, gtin="", mpn=""),
        _item(4, gtin="", mpn="", identifier_exists="no"),  # says it has none: no warning
        _item(5, gtin="", mpn="X-5"),
        _item(6, price="0.00 EUR"),
        _item(7, sale_price="12.00 EUR"),
        _item(8, sale_price="8.00 USD"),
        _item(9, sale_price="8.00 EUR"),  # a real sale
        _item(10, link="http://localhost:8080/p/10"),
        _item(11, image_link="https://10.0.0.7/11.jpg"),
        _item(12, gallery="https://cdn.example.com/12b.jpg,https://cdn.shop.internal/12c.jpg"),
        _item(13, title="A <b>bold</b> item"),
        _item(14, description="Tom &amp; Jerry"),
        _item(15, condition="mint"),
        _item(16, gender="Boys"),
        _item(17, age_group="teen"),
        _item(18, group="shirt", color="red", size="M"),
        _item(19, group="shirt", color="red", size="L"),
        _item(20, group="shirt", color="red", size="M"),  # the same variant as G18
        _item(21, condition="USED", gender="MALE", age_group="Kids"),  # any case
        _item(22, gtin="96385074", sale_price="9.99 EUR"),  # GTIN-8, a real sale
        _item(23, gtin="036000291452", mpn="M3"),  # GTIN-12
        _item(24, gtin="10012345678902", title="Tom & Jerry"),  # GTIN-14, an ampersand that is no entity
    ]


@pytest.mark.parametrize("lists", [True, False], ids=["gallery-list", "gallery-comma-text"])
def test_a_feed_with_one_violation_of_each_channel_grade_check_gets_exactly_those_findings(
    run_env: Path, tmp_path: Path, lists: bool
) -> None:
    report = _run(tmp_path, f"c2_{int(lists)}", _one_violation_each(), lists)
    common = [
        ("gtin", "gtin", "error", 1, ["G2"]),
        ("price_value", "price", "error", 1, ["G6"]),
        ("sale_price", "sale_price", "error", 2, ["G7", "G8"]),
        ("url_public", "link", "error", 1, ["G10"]),
        ("url_public", "image_link", "error", 1, ["G11"]),
        ("url_public", "additional_image_link", "error", 1, ["G12"]),
        ("html", "title", "warning", 1, ["G13"]),
        ("html", "description", "warning", 1, ["G14"]),
        ("value", "condition", "error", 1, ["G15"]),
        ("value", "gender", "error", 1, ["G16"]),
        ("value", "age_group", "error", 1, ["G17"]),
        ("variants", "item_group_id", "warning", 1, ["G20"]),
    ]
    assert _findings(report, "google") == sorted([*common, ("identifier", "gtin", "warning", 1, ["G3"])])
    # Meta has no identifier_exists: no identifier check there; the rest alike
    assert _findings(report, "meta") == sorted(common)
    # C3's share: the items with at least one error (G2, G6-G8, G10-G12, G15-G17), not the findings' sum
    google = next(e for e in report["exports"] if e["name"] == "google")["diagnostics"]
    assert (google["items"], google["invalid"], google["max_invalid"]["status"]) == (24, 10, "ok")


def _variants(report: dict[str, Any]) -> tuple[int, list[str]] | None:
    found = [f for f in _findings(report, "google") if f[0] == "variants"]
    return (found[0][3], found[0][4]) if found else None


def test_a_refresh_judges_again_only_the_groups_it_touched_and_agrees_with_a_fresh_project(
    run_env: Path, tmp_path: Path
) -> None:
    """`variants` carries an unchanged item's bit over and judges the touched groups again (#49).

    Each refresh of one project is compared with a fresh project of the same items (every group judged).
    """
    same = {"group": "shirt", "color": "red", "size": "M"}
    base = [
        _item(1, **same),
        _item(2, **same),  # repeats G1
        _item(3, **same),  # repeats G1
        _item(4, group="shirt", color="red", size="L"),
        _item(5, group="hat", color="blue", size="S"),
        _item(6, group="hat", color="blue", size="S"),  # repeats G5
    ]
    steps = [
        ("the same items", base),
        (
            "G2 changed to size L: it now repeats G4",
            [base[0], _item(2, group="shirt", color="red", size="L"), *base[2:]],
        ),
        ("G1 removed: G2 first of its values", base[1:]),
        ("G5 removed: G6 alone", [*base[:4], base[5]]),
        ("G7 added as a copy of G4", [*base, _item(7, group="shirt", color="red", size="L")]),
        (
            "G3 made a hat: G5 and G6 now repeat it",
            [*base[:2], _item(3, group="hat", color="blue", size="S"), *base[3:]],
        ),
    ]
    expected = {
        "the same items": (3, ["G2", "G3", "G6"]),
        "G2 changed to size L: it now repeats G4": (3, ["G3", "G4", "G6"]),
        "G1 removed: G2 first of its values": (2, ["G3", "G6"]),
        "G5 removed: G6 alone": (2, ["G2", "G3"]),
        "G7 added as a copy of G4": (4, ["G2", "G3", "G6", "G7"]),
        "G3 made a hat: G5 and G6 now repeat it": (3, ["G2", "G5", "G6"]),
    }
    _run(tmp_path, "variants_refresh", base, lists=True)
    for n, (what, rows) in enumerate(steps):
        refreshed = _variants(_run(tmp_path, "variants_refresh", rows, lists=True))
        fresh = _variants(_run(tmp_path, f"variants_fresh_{n}", rows, lists=True))
        assert refreshed == fresh == expected[what], what
