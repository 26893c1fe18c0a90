"""Source presets (#49) read on their own: Shopify's rows of a Handle, WooCommerce's parents, the spec checks."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from firefeed.errors import ParseError, SpecError
from firefeed.pipeline.parse import open_reader
from firefeed.pipeline.parse._lists import literal_elements
from firefeed.spec.loader import parse_spec

SHOPIFY = [
    "Handle",
    "Title",
    "Body (HTML)",
    "Vendor",
    "Tags",
    "Option1 Name",
    "Option1 Value",
    "Option2 Name",
    "Option2 Value",
    "Variant SKU",
    "Variant Price",
    "Variant Compare At Price",
    "Variant Inventory Tracker",
    "Variant Inventory Qty",
    "Variant Inventory Policy",
    "Variant Barcode",
    "Image Src",
    "Image Position",
    "Variant Image",
]


def _csv(tmp: Path, header: list[str], rows: list[dict[str, str]], name: str = "feed.csv") -> Path:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(header)
    w.writerows([[r.get(h, "") for h in header] for r in rows])
    path = tmp / name
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def _items(path: Path, preset: str, fmt: str = "csv", cap: int = 10_000) -> tuple[list[dict[str, Any]], Any]:
    reader = open_reader(path, source="shop", format=fmt, preset=preset, max_value_chars=cap)
    items = []
    for _line, values in reader:
        item: dict[str, Any] = dict(zip(reader.fields, values, strict=False))
        for name in ("images", "additional_image_link"):
            item[name] = list(literal_elements(item.get(name) or "{}"))
        items.append(item)
    return items, reader.stats


def _product(handle: str, **more: str) -> dict[str, str]:
    return {"Handle": handle, "Title": handle.title(), "Vendor": "Acme", "Tags": "a, b", **more}


# -- shopify --------------------------------------------------------------------------------------------


def test_a_variant_row_takes_the_product_rows_fields_where_it_leaves_them_empty(tmp_path: Path) -> None:
    rows = [
        _product(
            "tee",
            **{
                "Option1 Name": "Size",
                "Option1 Value": "S",
                "Variant Price": "10",
                "Image Src": "https://c.example.com/1.jpg",
                "Image Position": "1",
            },
        ),
        {"Handle": "tee", "Option1 Value": "M", "Variant Price": "11", "Tags": "own"},
    ]
    items, _ = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert [i["id"] for i in items] == ["tee:S", "tee:M"]
    m = items[1]
    assert (m["Title"], m["Vendor"], m["Option1 Name"]) == ("Tee", "Acme", "Size")
    assert m["Tags"] == "own"  # its own value stays
    assert (m["title"], m["variant_title"], m["size"], m["item_group_id"]) == ("Tee - M", "M", "M", "tee")
    assert m["Variant Price"] == "11"
    # the variant's image columns are its own: the product's image comes through `images`
    assert m["Image Src"] == ""
    assert m["images"] == ["https://c.example.com/1.jpg"]


def test_image_rows_become_the_images_in_position_order_after_the_product_rows_own(tmp_path: Path) -> None:
    rows = [
        _product(
            "mug",
            **{
                "Option1 Value": "Default Title",
                "Variant Price": "5",
                "Image Src": "https://c.example.com/main.jpg",
                "Image Position": "1",
            },
        ),
        {"Handle": "mug", "Image Src": "https://c.example.com/four.jpg", "Image Position": "4"},
        {"Handle": "mug", "Image Src": "https://c.example.com/two.jpg", "Image Position": "2"},
        {"Handle": "mug", "Image Src": "https://c.example.com/main.jpg", "Image Position": "3"},
        {"Handle": "mug", "Image Src": "https://c.example.com/none.jpg"},
    ]
    items, stats = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert len(items) == 1 and stats.rows == 5
    mug = items[0]
    # "Default Title" is Shopify's name for "no options": the Handle alone is the key, the title unchanged
    assert (mug["id"], mug["title"], mug["variant_title"]) == ("mug", "Mug", "")
    base = "https://c.example.com/"
    assert mug["images"] == [base + "main.jpg", base + "two.jpg", base + "four.jpg", base + "none.jpg"]
    assert mug["image_link"] == base + "main.jpg"
    assert mug["additional_image_link"] == [base + "two.jpg", base + "four.jpg", base + "none.jpg"]


def test_a_variant_image_comes_first_for_its_variant_only(tmp_path: Path) -> None:
    rows = [
        _product(
            "cap",
            **{
                "Option1 Name": "Color",
                "Option1 Value": "Red",
                "Variant Price": "5",
                "Image Src": "https://c.example.com/a.jpg",
                "Variant Image": "https://c.example.com/red.jpg",
            },
        ),
        {"Handle": "cap", "Option1 Value": "Blue", "Variant Price": "5"},
    ]
    items, _ = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert [i["images"] for i in items] == [
        ["https://c.example.com/red.jpg", "https://c.example.com/a.jpg"],
        ["https://c.example.com/a.jpg"],
    ]
    assert [i["color"] for i in items] == ["Red", "Blue"]


def test_a_handle_without_a_variant_row_is_one_item_keyed_by_its_handle(tmp_path: Path) -> None:
    rows = [
        _product("poster", **{"Image Src": "https://c.example.com/p.jpg"}),
        {"Handle": "poster", "Image Src": "https://c.example.com/q.jpg", "Image Position": "2"},
        _product("pin", **{"Option1 Value": "Default Title", "Variant Price": "2"}),
    ]
    items, stats = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert [(i["id"], i["title"], i["price"], len(i["images"])) for i in items] == [
        ("poster", "Poster", "", 2),
        ("pin", "Pin", "2", 0),
    ]
    assert stats.warnings == ["products without a variant row yielded as one item"]


def test_a_repeated_sku_in_one_product_keeps_both_variants_under_numbered_keys(tmp_path: Path) -> None:
    rows = [
        _product("sock", **{"Option1 Value": "S", "Variant SKU": "SK-1", "Variant Price": "3"}),
        {"Handle": "sock", "Option1 Value": "M", "Variant SKU": "SK-1", "Variant Price": "3"},
        {"Handle": "sock", "Option1 Value": "L", "Variant SKU": "SK-1", "Variant Price": "3"},
        {"Handle": "sock", "Option1 Value": "XL", "Variant Price": "3"},
        _product("shoe", **{"Option1 Value": "40", "Variant SKU": "SK-1", "Variant Price": "9"}),
    ]
    items, stats = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert [i["id"] for i in items] == ["sock:SK-1", "sock:SK-1#2", "sock:SK-1#3", "sock:XL", "shoe:SK-1"]
    assert stats.warnings == ["variants with a repeated SKU or options keyed with #n (2)"]


def test_prices_and_stock_read_as_google_does(tmp_path: Path) -> None:
    rows = [
        _product(
            "a",
            **{
                "Option1 Value": "1",
                "Variant Price": "8",
                "Variant Compare At Price": "10",
                "Variant Inventory Tracker": "shopify",
                "Variant Inventory Qty": "0",
                "Variant Inventory Policy": "deny",
            },
        ),
        {
            "Handle": "a",
            "Option1 Value": "2",
            "Variant Price": "8",
            "Variant Compare At Price": "8",
            "Variant Inventory Tracker": "shopify",
            "Variant Inventory Qty": "0",
            "Variant Inventory Policy": "continue",
        },
        {
            "Handle": "a",
            "Option1 Value": "3",
            "Variant Price": "8",
            "Variant Inventory Tracker": "shopify",
            "Variant Inventory Qty": "4",
        },
        {"Handle": "a", "Option1 Value": "4", "Variant Price": "8", "Variant Inventory Qty": "0"},
    ]
    items, _ = _items(_csv(tmp_path, SHOPIFY, rows), "shopify")
    assert [(i["price"], i["sale_price"], i["availability"]) for i in items] == [
        ("10", "8", "out_of_stock"),  # tracked, none left, not sold beyond stock
        ("8", "", "in_stock"),  # a compare-at price that is no higher is no sale; sold beyond stock
        ("8", "", "in_stock"),
        ("8", "", "in_stock"),  # stock not tracked: Shopify always sells it
    ]


def test_an_item_whose_made_title_is_over_the_value_cap_is_skipped_as_malformed(tmp_path: Path) -> None:
    rows = [
        _product("x" * 8, **{"Title": "T" * 25, "Option1 Value": "V" * 15, "Variant Price": "1"}),
        _product("ok", **{"Option1 Value": "Default Title", "Variant Price": "1"}),
    ]
    items, stats = _items(_csv(tmp_path, SHOPIFY, rows), "shopify", cap=40)
    assert [i["id"] for i in items] == ["ok"]
    assert (stats.malformed, stats.malformed_lines) == (1, [2])
    assert "field 'title' holds more than 40 characters" in stats.warnings[0]


def test_a_file_without_a_handle_column_is_no_shopify_export(tmp_path: Path) -> None:
    path = _csv(tmp_path, ["id", "title"], [{"id": "1", "title": "A"}])
    with pytest.raises(ParseError, match="no Handle column"):
        _items(path, "shopify")


# -- woocommerce ----------------------------------------------------------------------------------------

WOO = [
    "ID",
    "Type",
    "SKU",
    "Name",
    "Published",
    "Description",
    "In stock?",
    "Stock",
    "Sale price",
    "Regular price",
    "Categories",
    "Images",
    "Parent",
    "Attribute 1 name",
    "Attribute 1 value(s)",
    "Attribute 1 global",
    "Weight (kg)",
    "Meta: _custom",
]


def test_a_variation_takes_its_parents_fields_found_by_id_or_sku(tmp_path: Path) -> None:
    rows = [
        {
            "ID": "10",
            "Type": "variable",
            "SKU": "TEE",
            "Name": "Tee",
            "Published": "1",
            "Description": "Soft",
            "Categories": "Shirts",
            "Images": "https://c.example.com/t1.jpg, https://c.example.com/t2.jpg",
            "Weight (kg)": "0.2",
            "Attribute 1 name": "Color",
            "Attribute 1 value(s)": "Red, Blue",
            "Attribute 1 global": "1",
        },
        {
            "ID": "11",
            "Type": "variation",
            "Name": "Tee - Red",
            "Published": "1",
            "In stock?": "1",
            "Regular price": "20",
            "Sale price": "15",
            "Parent": "id:10",
            "Images": "https://c.example.com/red.jpg",
            "Attribute 1 name": "Color",
            "Attribute 1 value(s)": "Red",
            "Attribute 1 global": "1",
            "Meta: _custom": "x",
        },
        {
            "ID": "12",
            "Type": "variation, virtual",
            "Published": "0",
            "In stock?": "0",
            "Regular price": "20",
            "Parent": "TEE",
            "Attribute 1 name": "Color",
            "Attribute 1 value(s)": "Blue",
            "Attribute 1 global": "1",
        },
        {
            "ID": "13",
            "Type": "simple",
            "Name": "Mug",
            "Published": "-1",
            "In stock?": "backorder",
            "Regular price": "7",
        },
    ]
    items, stats = _items(_csv(tmp_path, WOO, rows), "woocommerce")
    tee, red, blue, mug = items
    assert (tee["variations"], tee["type"], tee["item_group_id"]) == ("2", "variable", "")
    assert (red["item_group_id"], red["parent_id"], red["title"], red["description"]) == (
        "10",
        "10",
        "Tee - Red",
        "Soft",
    )
    assert (red["categories"], red["_weight"], red["color"], red["attribute_pa_color"]) == (
        "Shirts",
        "0.2",
        "Red",
        "Red",
    )
    assert (red["price"], red["sale_price"], red["availability"], red["status"]) == ("20", "15", "in_stock", "publish")
    assert red["images"] == [
        "https://c.example.com/red.jpg",
        "https://c.example.com/t1.jpg",
        "https://c.example.com/t2.jpg",
    ]
    assert red["_custom"] == "x"  # `Meta: _custom` is the meta key
    # found by the parent's SKU; no name of its own: the parent's
    assert (blue["item_group_id"], blue["title"], blue["color"]) == ("10", "Tee", "Blue")
    assert (blue["type"], blue["_virtual"], blue["status"], blue["availability"]) == (
        "variation",
        "yes",
        "private",
        "out_of_stock",
    )
    assert (mug["status"], mug["availability"], mug["variations"]) == ("draft", "backorder", "0")
    assert stats.warnings == []


def test_a_variation_whose_parent_is_missing_keeps_its_own_fields(tmp_path: Path) -> None:
    rows = [
        {"ID": "21", "Type": "variation", "Name": "Orphan", "Regular price": "3", "Parent": "id:20"},
        {"ID": "30", "Type": "variable", "Name": "Late parent", "Description": "Later"},
    ]
    # the variation of 30 comes before it: its fields are not known yet when the variation is read
    rows.insert(1, {"ID": "31", "Type": "variation", "Regular price": "4", "Parent": "id:30"})
    items, stats = _items(_csv(tmp_path, WOO, rows), "woocommerce")
    assert [(i["id"], i["item_group_id"], i["title"], i["description"]) for i in items] == [
        ("21", "20", "Orphan", ""),
        ("31", "30", "", ""),
        ("30", "", "Late parent", "Later"),
    ]
    assert items[2]["variations"] == "1"
    assert stats.warnings == ["variations whose parent is not before them in the file keep their own fields only (2)"]


def test_portuguese_headers_read_as_the_english_ones(tmp_path: Path) -> None:
    header = [
        "ID",
        "Tipo",
        "REF",
        "Nome",
        "Publicado",
        "Em estoque?",
        "Preço promocional",
        "Preço",
        "Produto ascendente",
        "Peso (kg)",
    ]
    rows = [
        {"ID": "1", "Tipo": "variable", "REF": "P", "Nome": "Camisa", "Publicado": "1", "Peso (kg)": "1"},
        {
            "ID": "2",
            "Tipo": "variation",
            "Publicado": "1",
            "Em estoque?": "1",
            "Preço promocional": "9",
            "Preço": "10",
            "Produto ascendente": "id:1",
        },
    ]
    items, _ = _items(_csv(tmp_path, header, rows), "woocommerce")
    v = items[1]
    assert (v["title"], v["_weight"], v["price"], v["sale_price"], v["availability"]) == (
        "Camisa",
        "1",
        "10",
        "9",
        "in_stock",
    )
    assert (items[0]["_sku"], v["item_group_id"]) == ("P", "1")


WXR = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:excerpt="http://wordpress.org/export/1.2/excerpt/"
 xmlns:content="http://purl.org/rss/1.0/modules/content/" xmlns:wp="http://wordpress.org/export/1.2/">
<channel><title>Shop</title>
<item><title>Page</title><wp:post_id>1</wp:post_id><wp:post_type>page</wp:post_type></item>
<item><title>Cap</title><link>https://shop.example.com/cap/</link>
 <content:encoded><![CDATA[A cap]]></content:encoded><excerpt:encoded><![CDATA[Short]]></excerpt:encoded>
 <wp:post_id>5</wp:post_id><wp:status>publish</wp:status><wp:post_parent>0</wp:post_parent>
 <wp:post_type>product</wp:post_type>
 <category domain="product_cat" nicename="hats"><![CDATA[Hats]]></category>
 <category domain="product_type" nicename="variable"><![CDATA[variable]]></category>
 <category domain="pa_color" nicename="red"><![CDATA[Red]]></category>
 <category domain="product_tag" nicename="summer"><![CDATA[Summer]]></category>
 <wp:postmeta><wp:meta_key>_price</wp:meta_key><wp:meta_value>5</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>_price</wp:meta_key><wp:meta_value>9</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>_thumbnail_id</wp:meta_key><wp:meta_value>50</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>_product_image_gallery</wp:meta_key><wp:meta_value>51,52</wp:meta_value></wp:postmeta>
</item>
<item><title>Cap - Red</title><wp:post_id>6</wp:post_id><wp:post_parent>5</wp:post_parent>
 <wp:post_type>product_variation</wp:post_type><wp:status>publish</wp:status>
 <wp:postmeta><wp:meta_key>_sku</wp:meta_key><wp:meta_value>CAP-R</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>_regular_price</wp:meta_key><wp:meta_value>5</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>_stock_status</wp:meta_key><wp:meta_value>onbackorder</wp:meta_value></wp:postmeta>
 <wp:postmeta><wp:meta_key>attribute_pa_color</wp:meta_key><wp:meta_value>red</wp:meta_value></wp:postmeta>
</item>
<item><title>cap.jpg</title><wp:post_id>50</wp:post_id><wp:post_type>attachment</wp:post_type>
 <wp:attachment_url>https://shop.example.com/cap.jpg</wp:attachment_url></item>
<item><title>cap2.jpg</title><wp:post_id>52</wp:post_id><wp:post_type>attachment</wp:post_type>
 <wp:attachment_url>https://shop.example.com/cap2.jpg</wp:attachment_url></item>
</channel></rss>
"""


def test_a_wxr_gives_products_and_variations_with_meta_by_key_and_terms_by_taxonomy(tmp_path: Path) -> None:
    path = tmp_path / "export.xml"
    path.write_text(WXR, encoding="utf-8")
    items, stats = _items(path, "woocommerce", fmt="xml")
    cap, red = items
    assert (cap["id"], cap["type"], cap["categories"], cap["tags"], cap["pa_color"]) == (
        "5",
        "variable",
        "Hats",
        "Summer",
        "Red",
    )
    assert (cap["description"], cap["short_description"], cap["variations"]) == ("A cap", "Short", "1")
    assert cap["_price"] == "5"  # the first pair of a key
    # attachment 51 is not in the file: left out; the attachments themselves are no items
    assert cap["images"] == ["https://shop.example.com/cap.jpg", "https://shop.example.com/cap2.jpg"]
    assert (red["id"], red["type"], red["item_group_id"], red["_sku"], red["color"]) == (
        "6",
        "variation",
        "5",
        "CAP-R",
        "red",
    )
    assert (red["description"], red["categories"], red["link"]) == ("A cap", "Hats", "https://shop.example.com/cap/")
    assert (red["price"], red["availability"], red["images"][0]) == (
        "5",
        "backorder",
        "https://shop.example.com/cap.jpg",
    )
    assert stats.warnings == ["page posts skipped (not products)"]


# -- the spec -------------------------------------------------------------------------------------------


def _spec(source: dict[str, Any]) -> dict[str, Any]:
    return {"company": "acme", "project": "p", "sources": [{"name": "shop", **source}]}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            {"url": "products.json", "preset": "shopify"},
            "source 'shop': preset shopify reads a Shopify product export (csv), not json",
        ),
        ({"url": "feed.xml", "preset": "shopify"}, "not xml"),
        (
            {"url": "p.csv", "format": "tsv", "preset": "woocommerce"},
            "preset woocommerce reads a WooCommerce export (xml or csv), not tsv",
        ),
        (
            {"url": "https://shop.example.com/export", "preset": "woocommerce"},
            "needs the file's format: set format (csv or xml)",
        ),
        ({"url": "p.csv", "preset": "shopify", "lists": {"images": "|"}}, "'images' is a list the preset makes itself"),
    ],
)
def test_a_preset_on_a_format_it_does_not_read_is_a_spec_error_naming_the_source(
    source: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(_spec(source))
    assert "sources[0]" in str(info.value)
    assert message in str(info.value)


def test_a_preset_declares_its_list_fields_beside_the_sources_own() -> None:
    spec = parse_spec(_spec({"url": "p.csv", "preset": "shopify", "lists": {"Tags": ","}}))
    assert spec.sources[0].lists == {"Tags": ",", "images": ", ", "additional_image_link": ", "}
    assert {"images", "additional_image_link", "Tags"} <= spec.list_fields.declared
    # read back from its own dump, the same spec
    again = parse_spec(spec.model_dump(mode="json", exclude_unset=True))
    assert again.sources[0].lists == spec.sources[0].lists
