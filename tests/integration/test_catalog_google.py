"""Two real catalogs through a Google spec: the findings a careful reader of Google's product data
specification expects on them (#49, SPEC 10 C2).

Each spec maps what the file holds the way a merchant would (the catalogs are the test copies in
tests/fixtures/realfeeds); each expected finding is worked out from the file here, by hand, not
read back from the product. Both files hold an error on most of their items, so their exports
allow any share of invalid items (`max_invalid: 100%`): these tests are about the findings, the
threshold has its own tests.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from lxml import etree

from firefeed.export.channel_checks import gtin_is_valid
from tests.integration.conftest import run_json

pytestmark = pytest.mark.integration

REALFEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "realfeeds"
#: the two rules that put the first image in image_link and only the others in additional_image_link
IMAGE_RULES: list[dict[str, Any]] = [
    {"name": "main image", "then": [{"set": "image_link", "value": "{images[0]}"}]},
    {
        "name": "other images",
        "then": [{"remove": "images", "when": {"field": "_", "op": "eq", "value": "{image_link}"}}],
    },
]


def _run(tmp: Path, spec: dict[str, Any]) -> dict[str, Any]:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    return report


def _findings(report: dict[str, Any]) -> list[tuple[str, str, str, int, list[str]]]:
    (export,) = report["exports"]
    found = export["diagnostics"]["findings"]
    return sorted((f["check"], f["attribute"], f["severity"], f["count"], f["samples"]) for f in found)


def _items(path: Path) -> dict[str, dict[str, list[str]]]:
    """The feed's items by id: each attribute's values, in order."""
    out: dict[str, dict[str, list[str]]] = {}
    for item in etree.parse(str(path)).getroot().iter("item"):
        values: dict[str, list[str]] = {}
        for child in item:
            values.setdefault(etree.QName(child).localname, []).append(child.text or "")
        out[values["id"][0]] = values
    return out


# -- PrestaShop: the import sample of PrestaShop's docs ----------------------------------------------


def test_prestashops_sample_has_a_wrong_gtin_local_images_and_html_descriptions(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(REALFEEDS / "prestashop" / "products_import.csv", tmp_path / "presta.csv")
    with (tmp_path / "presta.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter=";"))
    images = "Image URLs (x,y,z...)"
    spec = {
        "company": "catalog",
        "project": "presta_google",
        "key": "Product ID",
        "sources": [{"name": "presta", "url": "presta.csv", "lists": {images: ","}}],
        "rules": [
            {"name": "images", "then": [{"copy": "images", "from": images}]},
            *IMAGE_RULES,
            {
                "name": "availability",
                "when": {"field": "Quantity", "op": "gt", "value": "0"},
                "then": [{"set": "availability", "value": "in_stock"}],
                "else": [{"set": "availability", "value": "out_of_stock"}],
            },
        ],
        "exports": [
            {
                "name": "google",
                "format": "google-xml",
                "path": "google.xml",
                "max_invalid": "100%",
                "fields": {
                    "id": "Product ID",
                    "title": "Name *",
                    "description": "Description",
                    # the file has the page's slug, not its address: the shop's host is the merchant's to add
                    "link": "https://shop.example.com/{Product ID}-{URL rewritten}.html",
                    "image_link": "image_link",
                    "additional_image_link": "images",
                    "availability": "availability",
                    # prices without tax are what Google wants for a US shop; the file's discounts
                    # ended in 2018, so there is no sale_price to write
                    "price": "{Price tax excluded} USD",
                    "condition": "Condition",
                    "brand": "Manufacturer",
                    "gtin": "EAN13",
                    "mpn": "MPN",
                    "product_type": "Categories (x,y,z...)",
                },
            }
        ],
    }
    report = _run(tmp_path, spec)

    # What the file holds, read here: one EAN-13 on every item, whose check digit is wrong (the
    # digits 123456789012 sum to 1+6+3+12+5+18+7+24+9+0+1+6 = 92 with GS1's weights: 8, not 3)
    ids = [r["Product ID"] for r in rows]
    assert ids == ["1", "2", "3", "4", "5", "6", "7"]
    assert {r["EAN13"] for r in rows} == {"1234567890123"} and not gtin_is_valid("1234567890123")
    assert gtin_is_valid("1234567890128")
    # eight images, all on http://localhost: the first of each item, and product 1's second
    urls = {r["Product ID"]: r[images].split(",") for r in rows}
    assert sum(len(u) for u in urls.values()) == 8
    assert all(u.startswith("http://localhost/") for us in urls.values() for u in us)
    assert [k for k, us in urls.items() if len(us) > 1] == ["1"]
    # every description is marked up; the titles are plain; the conditions are Google's own values
    assert {r["Description"] for r in rows} == {"<p>New design.</p>"}
    assert not any("<" in r["Name *"] or "&" in r["Name *"] for r in rows)
    assert {r["Condition"] for r in rows} == {"new", "used", "refurbished"}

    first5 = ids[:5]
    assert _findings(report) == sorted(
        [
            ("gtin", "gtin", "error", 7, first5),
            ("url_public", "image_link", "error", 7, first5),
            ("url_public", "additional_image_link", "error", 1, ["1"]),
            ("html", "description", "warning", 7, first5),
        ]
    )
    (export,) = report["exports"]
    assert export["rows"] == 7

    # the file carries what the findings are about: the main image once, the others apart
    items = _items(run_env / "catalog" / "presta_google" / "google.xml")
    assert {k: v["image_link"] for k, v in items.items()} == {k: us[:1] for k, us in urls.items()}
    assert {k: v.get("additional_image_link", []) for k, v in items.items()} == {k: us[1:] for k, us in urls.items()}
    assert items["1"]["link"] == ["https://shop.example.com/1-iPod-Nano.html"]
    assert {k: v["price"] for k, v in items.items()} == {
        r["Product ID"]: [r["Price tax excluded"] + " USD"] for r in rows
    }


# -- DummyJSON: a demo shop API's products ----------------------------------------------------------


def test_dummyjsons_products_have_barcodes_that_are_mostly_no_gtin(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(REALFEEDS / "dummyjson" / "products.json", tmp_path / "products.json")
    products = json.loads((tmp_path / "products.json").read_text(encoding="utf-8"))
    spec = {
        "company": "catalog",
        "project": "dummyjson_google",
        "sources": [{"name": "dj", "url": "products.json", "lists": {"images": ",", "tags": ","}}],
        "rules": [
            *IMAGE_RULES,
            {
                "name": "availability",
                "when": {"field": "stock", "op": "gt", "value": "0"},
                "then": [{"set": "availability", "value": "in_stock"}],
                "else": [{"set": "availability", "value": "out_of_stock"}],
            },
        ],
        "exports": [
            {
                "name": "google",
                "format": "google-xml",
                "path": "google.xml",
                "max_invalid": "100%",
                "fields": {
                    "id": "id",
                    "title": "title",
                    "description": "description",
                    "link": "https://dummyjson.com/products/{id}",
                    "image_link": "image_link",
                    "additional_image_link": "images",
                    "availability": "availability",
                    "price": "{price} USD",
                    # a shop's API says nothing of condition: these are new products
                    "condition": {"value": "new"},
                    "brand": "brand",
                    # the product's barcode is what a merchant sends as its GTIN
                    "gtin": "meta.barcode",
                    "product_type": "category",
                },
            }
        ],
    }
    report = _run(tmp_path, spec)

    # What the file holds, read here. The barcodes are 13 digits each, but only 2 of 20 end in the
    # check digit GS1's weights give (random digits would get 1 in 10 right): the rest are no GTIN.
    barcodes = {str(p["id"]): p["meta"]["barcode"] for p in products}
    assert len(barcodes) == 20 and all(len(b) == 13 and b.isdigit() for b in barcodes.values())
    wrong = [k for k, b in barcodes.items() if not gtin_is_valid(b)]
    assert [k for k in barcodes if k not in wrong] == ["2", "9"]
    # no markup: product 9's "Dolce & Gabbana" is a bare ampersand, which is text, not an entity
    assert not any("<" in p["description"] or "&" in p["title"] for p in products)
    assert [str(p["id"]) for p in products if "&" in p["description"]] == ["9"]
    # every image is on dummyjson's public CDN; every product has one; all are in stock
    assert all(u.startswith("https://cdn.dummyjson.com/") for p in products for u in p["images"])
    assert all(p["images"] and p["stock"] > 0 for p in products)
    # the groceries have no brand, which Google does not require (no finding for it)
    assert [str(p["id"]) for p in products if not p.get("brand")] == ["16", "17", "18", "19", "20"]

    assert _findings(report) == [("gtin", "gtin", "error", 18, wrong[:5])]
    assert wrong[:5] == ["1", "3", "4", "5", "6"]

    items = _items(run_env / "catalog" / "dummyjson_google" / "google.xml")
    assert list(items) == list(barcodes)
    assert {v["gtin"][0] for v in items.values()} == set(barcodes.values())
    assert items["11"]["price"] == ["1899.99 USD"] and items["1"]["condition"] == ["new"]
    # the first image alone in image_link; products with three images have two more
    assert {k: len(v.get("additional_image_link", [])) for k, v in items.items()} == {
        str(p["id"]): len(p["images"]) - 1 for p in products
    }
