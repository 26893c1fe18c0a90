"""Source presets (#49) on the real catalogs: the docs' example specs, and a plain Google spec per catalog."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import run_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REALFEEDS = ROOT / "tests" / "fixtures" / "realfeeds"
JEWELRY = REALFEEDS / "shopify-jewelry" / "jewelery.csv"
WOO_PTBR = REALFEEDS / "woo-ptbr" / "sample_products.txt"
WOO_WXR = REALFEEDS / "woo-wxr" / "sample_products.xml"
G = "{http://base.google.com/ns/1.0}"


def _run(tmp: Path, spec: dict[str, Any]) -> dict[str, Any]:
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    return report


def _example(tmp: Path, name: str, feed: Path, project: str) -> dict[str, Any]:
    """The docs' example spec `name`, its source pointing at a copy of `feed`, under its own project name."""
    spec = yaml.safe_load((ROOT / "docs" / "examples" / name).read_text(encoding="utf-8"))
    shutil.copy(feed, tmp / spec["sources"][0]["url"])
    spec["project"] = project
    return spec


def _findings(report: dict[str, Any], export: str = "google") -> list[tuple[str, str, str, int]]:
    entry = next(e for e in report["exports"] if e["name"] == export)
    return sorted((f["check"], f["attribute"], f["severity"], f["count"]) for f in entry["diagnostics"]["findings"])


def _feed(run_env: Path, company: str, project: str) -> list[dict[str, Any]]:
    """The google-xml file's items: attribute -> text, or the texts of a repeated attribute."""
    root = ET.parse(run_env / company / project / "google.xml").getroot()
    items = []
    for item in root.iter("item"):
        values: dict[str, Any] = {}
        for el in item:
            name = el.tag.removeprefix(G)
            if name in values:
                values[name] = [*([values[name]] if isinstance(values[name], str) else values[name]), el.text or ""]
            else:
                values[name] = el.text or ""
        items.append(values)
    return items


# -- the docs' example specs ---------------------------------------------------------------------------


def test_the_shopify_example_spec_gives_a_google_feed_without_a_finding(run_env: Path, tmp_path: Path) -> None:
    spec = _example(tmp_path, "shopify-google.yaml", JEWELRY, "ex_shopify")
    assert len(spec["rules"]) <= 5
    report = _run(tmp_path, spec)
    diagnostics = report["exports"][0]["diagnostics"]
    assert (diagnostics["items"], diagnostics["errors"], diagnostics["warnings"]) == (23, 0, 0)
    assert _findings(report) == []
    # 41 rows: 23 variants of 20 products; the 18 image-only rows are images, not items
    assert report["sources"][0]["rows"] == 23
    items = {i["id"]: i for i in _feed(run_env, "shop", "ex_shopify")}
    assert list(items)[:5] == [
        "chain-bracelet:Blue",
        "chain-bracelet:Black",
        "leather-anchor:Gold",
        "leather-anchor:Silver",
        "bangle-bracelet",
    ]
    assert len(items) == 23
    black = items["chain-bracelet:Black"]
    # the second variant's row holds no title, description or vendor: the product row's
    assert black["title"] == "7 Shakra Bracelet - Black"
    assert black["description"] == "7 chakra bracelet, in blue or black."
    assert (black["brand"], black["product_type"], black["item_group_id"]) == (
        "Company 123",
        "Bracelet",
        "chain-bracelet",
    )
    # its own Variant Image first, then the product's images in Image Position order
    assert black["image_link"] == "https://burst.shopifycdn.com/photos/7-chakra-bracelet_925x.jpg"
    assert black["additional_image_link"] == "https://burst.shopifycdn.com/photos/navy-blue-chakra-bracelet_925x.jpg"
    # a compare-at price above the price: the price is the compare-at, the sale price Shopify's price
    assert (black["price"], black["sale_price"], black["color"]) == ("44.99 USD", "42.99 USD", "Black")
    # a product of one "Default Title" variant is keyed by its Handle; its 3 image rows are its images
    origami = items["origami-crane-necklace"]
    assert origami["title"] == "Origami Crane Necklace"
    assert "sale_price" not in origami
    assert origami["image_link"].endswith("/origami-crane-necklace-gold_925x.jpg")
    assert [u.rsplit("/", 1)[1] for u in origami["additional_image_link"]] == [
        "silver-origami-necklace_925x.jpg",
        "origami-crane-necklace_925x.jpg",
        "womens-green-turtleneck_925x.jpg",
    ]
    # the marked-up descriptions were made plain by the example's rule
    assert items["gemstone:Blue"]["description"].startswith("Gemstone pendant, housed in sterling silver")


def test_the_woocommerce_example_spec_gives_a_google_feed_without_an_error(run_env: Path, tmp_path: Path) -> None:
    spec = _example(tmp_path, "woocommerce-google.yaml", WOO_PTBR, "ex_woo")
    assert len(spec["rules"]) <= 5
    report = _run(tmp_path, spec)
    diagnostics = report["exports"][0]["diagnostics"]
    assert (diagnostics["items"], diagnostics["errors"]) == (6, 0)
    # the three variations of product 71 differ only by their dates, which Google has no attribute for
    assert _findings(report) == [("variants", "item_group_id", "warning", 2)]
    assert report["sources"][0]["rows"] == 11
    items = {i["id"]: i for i in _feed(run_env, "loja", "ex_woo")}
    # the variations only: the four parents (their variations listed) and the grouped product are left out
    assert list(items) == ["66", "68", "70", "72", "73", "74"]
    assert [items[k]["item_group_id"] for k in items] == ["65", "67", "69", "71", "71", "71"]
    v = items["73"]
    assert v["title"].startswith('Mixed date registration - {"type":"multiple"')
    # a variation has no description or category of its own: its parent's ("Sem categoria")
    assert v["description"].startswith("Lorem ipsum dolor sit amet")
    assert v["product_type"] == "Sem categoria"
    # "Preço" is the regular price, "Preço promocional" the sale price
    assert (v["price"], v["sale_price"], v["availability"]) == ("900 BRL", "450 BRL", "in_stock")


# -- a plain Google spec per catalog: the findings a reader of Google's product data spec expects -----------


def _plain(project: str, feed: str, preset_source: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "company": "presets",
        "project": project,
        "sources": [{"name": "catalog", "url": feed, "preset": "shopify", **preset_source}],
        "exports": [
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%", "fields": fields}
        ],
    }


def test_the_shopify_jewelry_catalog_lacks_identifiers_and_three_descriptions_hold_html(
    run_env: Path, tmp_path: Path
) -> None:
    shutil.copy(JEWELRY, tmp_path / "jewelery.csv")
    fields = {
        "id": "id",
        "item_group_id": "item_group_id",
        "title": "title",
        "description": "Body (HTML)",
        "link": "https://shop.example.com/products/{Handle}",
        "image_link": "image_link",
        "additional_image_link": "additional_image_link",
        "availability": "availability",
        "price": "{price} USD",
        "brand": "Vendor",
        "condition": {"value": "new"},
        "gtin": "Variant Barcode",
        "mpn": "Google Shopping / MPN",
        "color": "color",
    }
    spec = _plain("plain_jewelry", "jewelery.csv", {"lists": {"Tags": ","}}, fields)
    spec["exports"].append(
        {"name": "json", "format": "json", "path": "items.json", "fields": {"id": "id", "Tags": "Tags"}}
    )
    report = _run(tmp_path, spec)
    # a list the spec declares on a preset source is split from the value the preset yields (inherited here)
    tags = {i["id"]: i["Tags"] for i in json.loads((run_env / "presets" / "plain_jewelry" / "items.json").read_text())}
    assert tags["leather-anchor:Silver"] == ["Anchor", "Gold", "Leather", "Silver"]
    assert tags["chain-bracelet:Black"] == ["Beads"]
    assert _findings(report) == [
        # choker-with-gold-pendant's <ul> and both gemstone variants' <p>
        ("html", "description", "warning", 3),
        # no Variant Barcode, no MPN, no identifier_exists anywhere in the export
        ("identifier", "gtin", "warning", 23),
    ]
    entry = report["exports"][0]["diagnostics"]
    html = next(f for f in entry["findings"] if f["check"] == "html")
    assert sorted(html["samples"]) == ["choker-with-gold-pendant", "gemstone:Blue", "gemstone:Purple"]
    # every variant has its image (image rows folded in), a price and a public link: no error
    assert (entry["items"], entry["errors"]) == (23, 0)


def test_the_woocommerce_ptbr_catalog_has_no_images_and_parents_without_prices(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(WOO_PTBR, tmp_path / "sample_products.txt")
    fields = {
        "id": "id",
        "item_group_id": "item_group_id",
        "title": "title",
        "description": "description",
        "link": "https://loja.example.com/?p={id}",
        "image_link": "image_link",
        "availability": "availability",
        "price": "{price} BRL",
        "gtin": "gtin",
    }
    source = {"preset": "woocommerce", "format": "csv"}
    report = _run(tmp_path, _plain("plain_woo_ptbr", "sample_products.txt", source, fields))
    findings = _findings(report)
    assert findings == [
        # every description is a <blockquote> (the variations' are their parents')
        ("html", "description", "warning", 11),
        ("identifier", "gtin", "warning", 11),
        # the export holds no picture at all
        ("missing", "image_link", "error", 11),
        # the four parents and the grouped product are priced by their variations: no price of their own
        ("price_format", "price", "error", 5),
        ("variants", "item_group_id", "warning", 2),
    ]
    entry = report["exports"][0]["diagnostics"]
    price = next(f for f in entry["findings"] if f["check"] == "price_format")
    assert sorted(price["samples"]) == ["65", "67", "69", "71", "75"]


def test_the_woocommerce_wxr_catalog_resolves_attachments_and_keeps_only_products(
    run_env: Path, tmp_path: Path
) -> None:
    shutil.copy(WOO_WXR, tmp_path / "sample_products.xml")
    fields = {
        "id": "id",
        "item_group_id": "item_group_id",
        "title": "title",
        "description": "description",
        "link": "link",
        "image_link": "image_link",
        "additional_image_link": "additional_image_link",
        "availability": "availability",
        "price": "{price} USD",
        "gtin": "gtin",
        "color": "color",
    }
    report = _run(tmp_path, _plain("plain_wxr", "sample_products.xml", {"preset": "woocommerce"}, fields))
    # 3 products and a variation; the 7 attachments are their images, not items
    assert report["sources"][0]["rows"] == 4
    # WooCommerce's sample products carry no GTIN (`_global_unique_id`) and no MPN; every image resolves
    # to a public URL, every price and stock status is there, the descriptions are plain text
    assert _findings(report) == [("identifier", "gtin", "warning", 4)]
    items = {i["id"]: i for i in _feed(run_env, "presets", "plain_wxr")}
    assert list(items) == ["6", "7", "8", "20"]
    uploads = "https://woocommercecore.mystagingwebsite.com/wp-content/uploads/2017/12/"
    # `_thumbnail_id` first, then `_product_image_gallery`, each resolved through its attachment
    assert items["7"]["image_link"] == uploads + "hoodie-2.jpg"
    assert items["7"]["additional_image_link"] == [
        uploads + "hoodie-blue-1.jpg",
        uploads + "hoodie-green-1.jpg",
        uploads + "hoodie-with-logo-2.jpg",
    ]
    assert items["8"]["image_link"] == uploads + "hoodie-with-logo-2.jpg"
    red = items["20"]
    # the variation's own image (the parent's thumbnail too), then the parent's gallery
    assert red["image_link"] == uploads + "vneck-tee-2.jpg"
    assert red["additional_image_link"] == [uploads + "vnech-tee-green-1.jpg", uploads + "vnech-tee-blue-1.jpg"]
    assert (red["item_group_id"], red["title"], red["color"], red["price"]) == (
        "6",
        "V-Neck T-Shirt - Red",
        "red",
        "20 USD",
    )
    # its own `_variation_description`, not the parent's content
    assert red["description"].startswith("Lorem ipsum dolor sit amet")
    assert items["6"]["description"].startswith("Pellentesque habitant morbi")
    # a variable product's price is its first `_price` meta (the lowest of its variations')
    assert (items["6"]["price"], items["7"]["price"], items["8"]["price"]) == ("15 USD", "42 USD", "45 USD")
