"""The real catalogs' Google exports synced to the Merchant API stand-in (SPEC 10 C9-C10, #53).

Each catalog is the test copy in tests/fixtures/realfeeds, run through the Google spec its catalog test
runs (test_catalog_google.py, test_presets.py) with `sync: {to: google-merchant}` added. What the
merchant needs: every item the google-xml file holds is on the channel exactly once, under the id the file
gives it, each attribute in the form the Merchant API products v1 reference gives it (worked out here
from the file's text, not from FireFeed's client), and the stand-in, which refuses what Google's front end
refuses for its form (tests/standins/merchant_schema.py), refuses nothing. One stand-in serves the module.
"""

from __future__ import annotations

import csv
import json
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from lxml import etree

from firefeed.config import reset_settings
from firefeed.secrets.crypto import generate_key
from tests.integration.conftest import cli
from tests.integration.file_servers import company_with
from tests.standins.merchant_api import MerchantStandIn, running
from tests.standins.meta_graph import MetaGraphStandIn

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REALFEEDS = ROOT / "tests" / "fixtures" / "realfeeds"
G = "http://base.google.com/ns/1.0"
IMAGE_RULES: list[dict[str, Any]] = [
    {"name": "main image", "then": [{"set": "image_link", "value": "{images[0]}"}]},
    {
        "name": "other images",
        "then": [{"remove": "images", "when": {"field": "_", "op": "eq", "value": "{image_link}"}}],
    },
]


@pytest.fixture(scope="module")
def merchant() -> Iterator[MerchantStandIn]:
    with running() as standin:
        yield standin


@pytest.fixture()
def google(run_env: Path, merchant: MerchantStandIn, monkeypatch: pytest.MonkeyPatch) -> Iterator[MerchantStandIn]:
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", merchant.url)
    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("FIREFEED_SYNC_MAX_S", "30")
    reset_settings()
    yield merchant
    reset_settings()


# -- the reference's form, worked out from the file's text ------------------------------------------------


def _price(text: str) -> dict[str, str]:
    amount, currency = text.split()
    return {"amountMicros": str(int(Decimal(amount) * 1_000_000)), "currencyCode": currency}


def _enum(text: str) -> str:
    return text.strip().upper().replace(" ", "_")


def _measure(text: str) -> dict[str, Any]:
    value, unit = text.split()
    return {"value": float(value), "unit": unit}


def _shipping(text: str) -> dict[str, Any]:
    country, region, service, price = text.split(":")
    named = {"country": country, "region": region, "service": service}
    return {"price": _price(price), **{k: v for k, v in named.items() if v}}


#: google-xml element -> (productAttributes field, repeated, the reference's form of one value)
REFERENCE: dict[str, tuple[str, bool, Any]] = {
    "title": ("title", False, str.strip),
    "description": ("description", False, str.strip),
    "link": ("link", False, str.strip),
    "image_link": ("imageLink", False, str.strip),
    "additional_image_link": ("additionalImageLinks", True, str.strip),
    "price": ("price", False, _price),
    "sale_price": ("salePrice", False, _price),
    "availability": ("availability", False, _enum),
    "condition": ("condition", False, _enum),
    "brand": ("brand", False, str.strip),
    "gtin": ("gtins", True, str.strip),
    "mpn": ("mpn", False, str.strip),
    "identifier_exists": ("identifierExists", False, lambda t: {"yes": True, "no": False}[t.strip()]),
    "item_group_id": ("itemGroupId", False, str.strip),
    "product_type": ("productTypes", True, str.strip),
    "color": ("color", False, str.strip),
    "size": ("size", False, str.strip),
    "google_product_category": ("googleProductCategory", False, str.strip),
    "shipping": ("shipping", True, _shipping),
    "shipping_weight": ("shippingWeight", False, _measure),
    "shipping_length": ("shippingLength", False, _measure),
    "shipping_width": ("shippingWidth", False, _measure),
    "shipping_height": ("shippingHeight", False, _measure),
    "product_weight": ("productWeight", False, _measure),
    "product_length": ("productLength", False, _measure),
    "product_width": ("productWidth", False, _measure),
    "product_height": ("productHeight", False, _measure),
    **{f"custom_label_{i}": (f"customLabel{i}", False, str.strip) for i in range(5)},
}


def _file_items(path: Path) -> list[dict[str, list[str]]]:
    """The google-xml file's items in order: element name -> its texts."""
    out = []
    for item in etree.parse(str(path)).getroot().iter("item"):
        values: dict[str, list[str]] = {}
        for child in item:
            assert etree.QName(child).namespace == G, child.tag
            values.setdefault(etree.QName(child).localname, []).append(child.text or "")
        out.append(values)
    return out


def _expected(values: dict[str, list[str]]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    attributes: dict[str, Any] = {}
    custom: list[dict[str, str]] = []
    for name, texts in values.items():
        if name == "id":
            continue
        known = REFERENCE.get(name)
        if known is None:
            custom.extend({"name": name, "value": t} for t in texts)
            continue
        field, repeated, form = known
        if repeated:
            attributes[field] = [form(t) for t in texts]
        else:
            assert len(texts) == 1, (name, texts)
            attributes[field] = form(texts[0])
    return attributes, custom


def _sync(spec: dict[str, Any], account: str) -> dict[str, Any]:
    spec["exports"][0]["sync"] = {
        "to": "google-merchant",
        "account": account,
        "data_source": "7654321",
        "content_language": "en",
        "feed_label": "US",
        "credentials": "${secret:GSA}",
    }
    return spec


def _run_synced(standin: MerchantStandIn, tmp: Path, spec: dict[str, Any]) -> tuple[dict[str, Any], Path]:
    """Run `spec` synced to an account of its own on the module's stand-in."""
    spec["company"] = company_with(GSA=standin.service_account_json())
    spec["project"] = f"{spec['project']}_{uuid.uuid4().hex[:8]}"
    account = str(uuid.uuid4().int % 10**12)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(_sync(spec, account), allow_unicode=True, sort_keys=False), encoding="utf-8")
    code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    assert code == 0 and report["status"] == "SUCCEEDED", report
    return report, tmp / "exports" / spec["company"] / spec["project"] / spec["exports"][0]["path"]


def _check_on_the_channel(
    standin: MerchantStandIn, report: dict[str, Any], file: Path, not_sent: dict[str, str] | None = None
) -> tuple[list[dict[str, list[str]]], dict[str, dict[str, Any]]]:
    """Every item of the file is on the stand-in once, under its id, in the reference's form, and the stand-in
    refused nothing; but the items of `not_sent` (key -> attribute), which FireFeed cannot put in Google's form:
    each is a sync error naming the attribute, and an error finding of the export on it."""
    not_sent = not_sent or {}
    items = _file_items(file)
    ids = [v["id"][0] for v in items]
    (export,) = report["exports"]
    sync = export["sync"]
    assert (sync["inserted"], sync["failed"], sync["pending"]) == (len(items) - len(not_sent), len(not_sent), 0), sync
    assert {e["key"]: (e["code"], e["message"].split(":")[0]) for e in sync["errors"]} == {
        k: ("not_sent", attribute) for k, attribute in not_sent.items()
    }
    for key, attribute in not_sent.items():
        found = export["diagnostics"]["findings"]
        assert any(f["attribute"] == attribute and f["severity"] == "error" and key in f["samples"] for f in found)
    account = yaml.safe_load((file.parents[3] / "spec.yaml").read_text())["exports"][0]["sync"]["account"]
    held = standin.products(account)
    sent = [k for k in ids if k not in not_sent]
    assert sorted(held) == sorted(sent)
    mine = [r for r in standin.requests if r.path.startswith(f"/products/v1/accounts/{account}/")]
    assert Counter(r.offer_id for r in mine if r.method == "POST") == Counter(sent)
    assert [r for r in mine if r.status != 200] == []
    for values in items:
        if values["id"][0] in not_sent:
            continue
        product = held[values["id"][0]]
        attributes, custom = _expected(values)
        assert product["productAttributes"] == attributes, values["id"]
        assert product.get("customAttributes", []) == custom, values["id"]
        assert (product["contentLanguage"], product["feedLabel"]) == ("en", "US")
    return items, held


# -- the catalogs ------------------------------------------------------------------------------------------


def test_prestashops_sample_reaches_the_merchant_api_as_its_google_file_says(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    shutil.copy(REALFEEDS / "prestashop" / "products_import.csv", tmp_path / "presta.csv")
    images = "Image URLs (x,y,z...)"
    spec = {
        "project": "presta_sync",
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
                    "link": "https://shop.example.com/{Product ID}-{URL rewritten}.html",
                    "image_link": "image_link",
                    "additional_image_link": "images",
                    "availability": "availability",
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
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert len(items) == 7
    # the prices with cents travel as whole micros; the HTML description as the file's text
    assert held["1"]["productAttributes"]["description"] == "<p>New design.</p>"
    assert {p["productAttributes"]["condition"] for p in held.values()} == {"NEW", "USED", "REFURBISHED"}


def test_dummyjsons_products_reach_the_merchant_api_as_the_google_file_says(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    shutil.copy(REALFEEDS / "dummyjson" / "products.json", tmp_path / "products.json")
    spec = {
        "project": "dummyjson_sync",
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
                    "condition": {"value": "new"},
                    "brand": "brand",
                    "gtin": "meta.barcode",
                    "product_type": "category",
                    # what a merchant adds from the API's other fields (its weights and sizes have no unit:
                    # the shop's are kilograms and centimetres), and a flat shipping rate
                    "product_weight": "{weight} kg",
                    "product_length": "{dimensions.depth} cm",
                    "product_width": "{dimensions.width} cm",
                    "product_height": "{dimensions.height} cm",
                    "shipping": {"value": "US:::4.99 USD"},
                    "custom_label_0": "availabilityStatus",
                },
            }
        ],
    }
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert len(items) == 20
    assert held["11"]["productAttributes"]["price"] == {"amountMicros": "1899990000", "currencyCode": "USD"}


def _example(tmp: Path, name: str, feed: Path) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((ROOT / "docs" / "examples" / name).read_text(encoding="utf-8"))
    shutil.copy(feed, tmp / spec["sources"][0]["url"])
    return spec


def test_the_shopify_example_spec_reaches_the_merchant_api_as_its_google_file_says(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    spec = _example(tmp_path, "shopify-google.yaml", REALFEEDS / "shopify-jewelry" / "jewelery.csv")
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert len(items) == 23
    black = held["chain-bracelet:Black"]["productAttributes"]
    assert (black["price"], black["salePrice"]) == (
        {"amountMicros": "44990000", "currencyCode": "USD"},
        {"amountMicros": "42990000", "currencyCode": "USD"},
    )
    assert black["identifierExists"] is False and black["itemGroupId"] == "chain-bracelet"


def test_the_woocommerce_example_spec_reaches_the_merchant_api_as_its_google_file_says(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    spec = _example(tmp_path, "woocommerce-google.yaml", REALFEEDS / "woo-ptbr" / "sample_products.txt")
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert [v["id"][0] for v in items] == ["66", "68", "70", "72", "73", "74"]
    v = held["73"]["productAttributes"]
    assert (v["price"]["amountMicros"], v["salePrice"]["amountMicros"], v["availability"]) == (
        "900000000",
        "450000000",
        "IN_STOCK",
    )


def test_the_woocommerce_wxr_catalog_reaches_the_merchant_api_as_its_google_file_says(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    shutil.copy(REALFEEDS / "woo-wxr" / "sample_products.xml", tmp_path / "sample_products.xml")
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
        # WooCommerce's default units
        "shipping_weight": "{_weight} kg",
        "shipping_length": "{_length} cm",
        "shipping_width": "{_width} cm",
        "shipping_height": "{_height} cm",
    }
    spec = {
        "project": "wxr_sync",
        "sources": [{"name": "catalog", "url": "sample_products.xml", "preset": "woocommerce"}],
        "exports": [
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%", "fields": fields}
        ],
    }
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert [v["id"][0] for v in items] == ["6", "7", "8", "20"]
    assert len(held["7"]["productAttributes"]["additionalImageLinks"]) == 3


def _plain(project: str, feed: str, source: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "project": project,
        "sources": [{"name": "catalog", "url": feed, **source}],
        "exports": [
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%", "fields": fields}
        ],
    }


def test_the_plain_shopify_spec_sends_the_marked_up_descriptions_as_the_file_holds_them(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    shutil.copy(REALFEEDS / "shopify-jewelry" / "jewelery.csv", tmp_path / "jewelery.csv")
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
        "product_type": "Type",
        # Shopify's weight column is in grams whatever its display unit
        "shipping_weight": "{Variant Grams} g",
        "custom_label_0": "Tags",
    }
    spec = _plain("plain_jewelry_sync", "jewelery.csv", {"preset": "shopify"}, fields)
    report, file = _run_synced(google, tmp_path, spec)
    items, held = _check_on_the_channel(google, report, file)
    assert len(items) == 23
    # the marked-up descriptions travel as the file holds them (the html finding is a warning)
    assert held["gemstone:Blue"]["productAttributes"]["description"].startswith("<p>")
    assert held["chain-bracelet:Blue"]["productAttributes"]["shippingWeight"] == {"value": 0.0, "unit": "g"}
    # the same file again: the real text hashes the same, nothing is sent twice
    account = str(spec["exports"][0]["sync"]["account"])
    before = len(google.requests)
    code, out = cli("run", str(tmp_path / "spec.yaml"), "--json", "--full")
    again = json.loads(out)["exports"][0]["sync"]
    assert code == 0 and (again["inserted"], again["updated"], again["failed"]) == (0, 0, 0), again
    later = google.requests[before:]
    assert [r for r in later if r.method != "GET" and f"/accounts/{account}/" in r.path] == []


def test_the_plain_woocommerce_spec_sends_all_but_the_parents_without_a_price_each_a_finding(
    google: MerchantStandIn, tmp_path: Path
) -> None:
    shutil.copy(REALFEEDS / "woo-ptbr" / "sample_products.txt", tmp_path / "sample_products.txt")
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
    spec = _plain("plain_woo_sync", "sample_products.txt", {"preset": "woocommerce", "format": "csv"}, fields)
    report, file = _run_synced(google, tmp_path, spec)
    # the four variable parents and the grouped product have no price of their own: the file writes
    # " BRL", the export's price_format finding names them, and FireFeed sends them nowhere
    parents = {k: "price" for k in ("65", "67", "69", "71", "75")}
    items, held = _check_on_the_channel(google, report, file, not_sent=parents)
    assert [v["price"] for v in items if v["id"][0] in parents] == [[" BRL"]] * 5
    # no image in the file: Google holds the others without one and says so ("google says")
    assert len(held) == 6 and not any("imageLink" in p["productAttributes"] for p in held.values())


# -- Meta: the Shopify catalog's variants to a catalog's items_batch -----------------------------------------

META_TOKEN = "EAAB-realfeeds-" + uuid.uuid4().hex
META_CATALOG = "5550001"


def test_the_shopify_catalog_reaches_a_meta_catalog_as_its_meta_file_says(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MetaGraphStandIn(token=META_TOKEN, catalog=META_CATALOG) as graph:
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
        monkeypatch.setenv("FIREFEED_META_GRAPH_URL", graph.url)
        monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
        reset_settings()
        spec = _example(tmp_path, "shopify-google.yaml", REALFEEDS / "shopify-jewelry" / "jewelery.csv")
        google = spec["exports"][0]
        # the Google fields as they are: Meta's availability is in words, the preset's Google's underscored
        # form (the client respells it); identifier_exists is Google's alone
        fields = google["fields"]
        spec["exports"] = [
            {
                "name": "meta",
                "format": "csv",
                "path": "meta.csv",
                "channel": "meta",
                "max_invalid": "100%",
                "where": google["where"],
                "fields": fields,
                "sync": {"to": "meta-catalog", "catalog": META_CATALOG, "token": "${secret:META_TOKEN}"},
            }
        ]
        spec["company"] = company_with(META_TOKEN=META_TOKEN)
        spec["project"] = "meta_" + uuid.uuid4().hex[:8]
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
        code, out = cli("run", str(path), "--json")
        report = json.loads(out)
        assert code == 0 and report["status"] == "SUCCEEDED", report
        reset_settings()
    with (run_env / spec["company"] / spec["project"] / "meta.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    sync = report["exports"][0]["sync"]
    # the file writes the preset's "in_stock", which is not Meta's word: the export's check says so for every
    # item (the file needs a rule), while the sync respells it as the Graph takes it ("in stock")
    findings = report["exports"][0]["diagnostics"]["findings"]
    assert [(f["check"], f["count"]) for f in findings] == [("availability_value", len(rows))]
    assert (sync["inserted"], sync["failed"], sync["pending"], sync["errors"]) == (len(rows), 0, 0, []), sync
    # a column the file holds and Meta has no field for is not sent, and the report says so
    assert {r["identifier_exists"] for r in rows} == {"no"}
    assert sync["columns_not_sent"] == ["identifier_exists"]
    assert (
        "sync_columns_not_sent: export 'meta' to meta-catalog: the channel has no field for identifier_exists"
        in report["warnings"]
    )
    for row in rows:
        del row["identifier_exists"]
    assert len(rows) == 23 and sorted(graph.items) == sorted(r["id"] for r in rows)
    assert Counter(rid for method, rid in graph.sent() if method != "DELETE") == Counter(r["id"] for r in rows)
    for row in rows:
        expected = {k: v for k, v in row.items() if v != ""}
        expected["availability"] = expected["availability"].replace("_", " ")
        for name in ("price", "sale_price"):  # "12.34 EUR": a dot and two decimals, as the reference writes it
            if name in expected:
                amount, currency = expected[name].split()
                expected[name] = f"{Decimal(amount):.2f} {currency}"
        if "additional_image_link" in expected:
            expected["additional_image_link"] = expected["additional_image_link"].split(",")
        assert graph.items[row["id"]] == expected, row["id"]
    black = graph.items["chain-bracelet:Black"]
    assert (black["price"], black["sale_price"], black["availability"]) == ("44.99 USD", "42.99 USD", "in stock")
