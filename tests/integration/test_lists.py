"""Lists end to end (SPEC 9): sources declare them, MERGE keeps them, rules change them, exports write elements."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from lxml import etree

from firefeed.export.google_xml import GOOGLE_NS
from tests.integration.conftest import cli, read_csv, run_json, write_csv

pytestmark = pytest.mark.integration

REALFEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "realfeeds"  # copies, with their provenance
G = f"{{{GOOGLE_NS}}}"


def _write_spec(
    tmp: Path, project: str, sources: list[dict[str, Any]], exports: list[dict[str, Any]], **top: Any
) -> Path:
    # C3: these items are not Google-complete; the tests read how lists are written, not what Google accepts.
    exports = [{"max_invalid": "100%", **e} if e["format"] == "google-xml" else e for e in exports]
    spec = {"company": "lists", "project": project, "sources": sources, **top, "exports": exports}
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def _run(spec: Path) -> dict[str, Any]:
    code, report = run_json(spec)
    assert code == 0, report
    return report


def _items(path: Path) -> list[etree._Element]:
    return list(etree.fromstring(path.read_bytes()).iter("item"))


def _texts(item: etree._Element, name: str) -> list[str]:
    return [e.text or "" for e in item.findall(G + name)]


# -- a WooCommerce export: its Images column is one comma list ------------------------------------
WOO_HEADER = ["ID", "Type", "SKU", "Name", "Regular price", "Images"]


def _woo_rows() -> list[list[str]]:
    many = ", ".join(f"https://shop.example/wp-content/uploads/hoodie-{n}.jpg" for n in range(1, 14))
    return [
        ["10", "simple", "HD-1", "Hoodie", "45", many],
        ["11", "simple", "CAP-1", "Cap", "16", "https://shop.example/cap.jpg , https://shop.example/cap-back.jpg"],
        ["12", "simple", "BELT-1", "Belt", "20", "https://shop.example/belt.jpg"],
        ["13", "simple", "MUG-1", "Mug", "9", ""],
    ]


def test_a_woocommerce_image_list_becomes_one_image_link_and_repeated_additional_image_links(
    run_env: Path, tmp_path: Path
) -> None:
    write_csv(tmp_path / "woo.csv", WOO_HEADER, _woo_rows())
    rules = [
        {
            "name": "gallery",
            "then": [
                {"copy": "gallery", "from": "Images"},
                {"remove": "gallery", "when": {"field": "_", "op": "eq", "value": "{Images[0]}"}},
            ],
        }
    ]
    fields = {"id": "ID", "title": "Name", "image_link": "{Images[0]}", "additional_image_link": "gallery"}
    export = {"name": "google", "format": "google-xml", "path": "google.xml", "fields": fields}
    source = {"name": "woo", "url": "woo.csv", "key": "ID", "lists": {"Images": ","}}
    del source["key"]
    report = _run(_write_spec(tmp_path, "woo", [source], [export], key="ID", rules=rules))

    hoodie, cap, belt, mug = _items(run_env / "lists" / "woo" / "google.xml")
    assert _texts(hoodie, "image_link") == ["https://shop.example/wp-content/uploads/hoodie-1.jpg"]
    # 12 more images, Google takes 10 (P28): the first ten, in order
    assert _texts(hoodie, "additional_image_link") == [
        f"https://shop.example/wp-content/uploads/hoodie-{n}.jpg" for n in range(2, 12)
    ]
    assert _texts(cap, "image_link") == ["https://shop.example/cap.jpg"]
    assert _texts(cap, "additional_image_link") == ["https://shop.example/cap-back.jpg"]
    assert _texts(belt, "additional_image_link") == [] and _texts(belt, "image_link") == [
        "https://shop.example/belt.jpg"
    ]
    assert _texts(mug, "image_link") == [] and _texts(mug, "additional_image_link") == []

    (entry,) = report["exports"]
    capped = [f for f in entry["diagnostics"]["findings"] if f["check"] == "additional_image_link_cap"]
    assert [(f["severity"], f["count"], f["dropped"], f["samples"]) for f in capped] == [("warning", 1, 2, ["10"])]


def test_csv_joins_with_the_list_separator_and_json_writes_arrays(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "woo.csv", WOO_HEADER, _woo_rows())
    fields = {"id": "ID", "images": "Images", "first": "{Images[0]}", "last": "{Images[-1]}", "joined": "{Images}"}
    exports = [
        {"name": "csv", "format": "csv", "path": "out.csv", "fields": fields, "list_separator": " | "},
        {"name": "default", "format": "tsv", "path": "out.tsv", "fields": {"id": "ID", "images": "Images"}},
        {"name": "json", "format": "json", "path": "out.json", "fields": {"id": "ID", "images": "Images"}},
        {"name": "jsonl", "format": "jsonl", "path": "out.jsonl", "fields": {"id": "ID", "images": "Images"}},
    ]
    source = {"name": "woo", "url": "woo.csv", "lists": {"Images": ","}}
    _run(_write_spec(tmp_path, "woo_formats", [source], exports, key="ID"))
    out = run_env / "lists" / "woo_formats"

    header, rows = read_csv(out / "out.csv")
    assert header == ["id", "images", "first", "last", "joined"]
    cap = rows[1]
    assert cap == [
        "11",
        "https://shop.example/cap.jpg | https://shop.example/cap-back.jpg",
        "https://shop.example/cap.jpg",
        "https://shop.example/cap-back.jpg",
        "https://shop.example/cap.jpg,https://shop.example/cap-back.jpg",
    ]
    with (out / "out.tsv").open(newline="", encoding="utf-8") as f:
        tsv = list(csv.reader(f, delimiter="\t"))
    assert tsv[2] == ["11", "https://shop.example/cap.jpg,https://shop.example/cap-back.jpg"]

    items = json.loads((out / "out.json").read_text(encoding="utf-8"))
    assert items[1]["images"] == ["https://shop.example/cap.jpg", "https://shop.example/cap-back.jpg"]
    assert items[2]["images"] == ["https://shop.example/belt.jpg"]  # one element is still an array (P2)
    assert items[3]["images"] == ""  # no elements is the empty value (P1)
    lines = [json.loads(line) for line in (out / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [x["images"] for x in lines] == [x["images"] for x in items]


def test_a_text_in_a_list_field_stays_a_text_where_only_json_tells(run_env: Path, tmp_path: Path) -> None:
    """P2, P12, P14, P4: `set`, `join`, a copied text and a source without the list write a text, which
    json writes as a string and csv as the same text; per-element actions, `take` and `dedupe` keep a text
    a text; `append` on a declared field makes it a list, on a field no source declares it concatenates."""
    write_csv(
        tmp_path / "main.csv",
        ["id", "images", "tags", "title"],
        [["1", "a.jpg,b.jpg", "x|y", "Mug"], ["2", "c.jpg", "z", "Cap"], ["3", "", "", "Hat"]],
    )
    write_csv(tmp_path / "extra.csv", ["id", "images"], [["3", "d.jpg"]])
    sources = [
        {"name": "main", "url": "main.csv", "lists": {"images": ",", "tags": "|"}},
        {"name": "extra", "url": "extra.csv", "mode": "enrich"},  # no lists: its images is a text (P14)
    ]
    rules = [
        {"name": "set", "when": {"field": "id", "op": "eq", "value": "1"}, "then": [{"set": "tags", "value": "one"}]},
        {"name": "upper", "then": [{"uppercase": "tags"}, {"take": "tags", "count": "2"}, {"dedupe": "tags"}]},
        {"name": "joined", "then": [{"copy": "joined", "from": "images"}, {"join": "joined", "separator": " / "}]},
        {"name": "words", "then": [{"split": "words", "separator": " "}, {"copy": "words", "from": "title"}]},
        {"name": "grow", "then": [{"append": "words", "value": "-x"}, {"append": "images", "value": "e.jpg"}]},
    ]
    # `words` is a list field only because a rule splits it; the copy writes the title, a text, into it
    fields = {"id": "id", "images": "images", "tags": "tags", "joined": "joined", "words": "words"}
    exports = [
        {"name": "json", "format": "json", "path": "out.json", "fields": fields},
        {"name": "csv", "format": "csv", "path": "out.csv", "fields": fields},
    ]
    _run(_write_spec(tmp_path, "kinds", sources, exports, rules=rules))
    out = run_env / "lists" / "kinds"
    items = json.loads((out / "out.json").read_text(encoding="utf-8"))
    assert items == [
        {"id": "1", "images": ["a.jpg", "b.jpg", "e.jpg"], "tags": "ONE", "joined": "a.jpg / b.jpg", "words": "Mug-x"},
        {"id": "2", "images": ["c.jpg", "e.jpg"], "tags": ["Z"], "joined": "c.jpg", "words": "Cap-x"},
        {"id": "3", "images": ["d.jpg", "e.jpg"], "tags": "", "joined": "d.jpg", "words": "Hat-x"},
    ]
    _, rows = read_csv(out / "out.csv")
    assert rows[0] == ["1", "a.jpg,b.jpg,e.jpg", "ONE", "a.jpg / b.jpg", "Mug-x"]


def test_a_later_sources_list_replaces_the_whole_list_and_an_empty_one_never_does(
    run_env: Path, tmp_path: Path
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "images"], [["1", "a.jpg,b.jpg"], ["2", "c.jpg"], ["3", "d.jpg"]])
    write_csv(tmp_path / "photos.csv", ["id", "images"], [["1", "x.jpg|y.jpg"], ["2", " | "]])
    write_csv(tmp_path / "text.csv", ["id", "images"], [["3", "plain, text"]])
    sources = [
        {"name": "main", "url": "main.csv", "lists": {"images": ","}},
        {"name": "photos", "url": "photos.csv", "lists": {"images": "|"}},
        {"name": "text", "url": "text.csv"},  # not declared here: its value stays a text (P14)
    ]
    export = {"name": "json", "format": "json", "path": "out.json"}
    _run(_write_spec(tmp_path, "merge_lists", sources, [export]))
    items = json.loads((run_env / "lists" / "merge_lists" / "out.json").read_text(encoding="utf-8"))
    assert [i["images"] for i in items] == [["x.jpg", "y.jpg"], ["c.jpg"], "plain, text"]


def test_rules_change_lists_element_by_element(run_env: Path, tmp_path: Path) -> None:
    write_csv(
        tmp_path / "main.csv",
        ["id", "tags", "sizes", "note"],
        [["1", "Gold; ring;gold;  Silver ", "s, m, l", "a/b/c"], ["2", "", "", ""], ["3", "steel", "xl", "x"]],
    )
    rules = [
        {
            "name": "has gold",
            "when": {"field": "tags", "op": "eq", "value": "GOLD"},
            "then": [{"set": "metal", "value": "gold"}],
        },
        {
            "name": "no silver",
            "when": {"field": "tags", "op": "not_contains", "value": "silver"},
            "then": [{"set": "plain", "value": "y"}],
        },
        {
            "name": "many",
            "when": {"field": "tags", "op": "count_gt", "value": "2"},
            "then": [{"set": "many", "value": "y"}],
        },
        {
            "name": "no tags",
            "when": {"field": "tags", "op": "empty"},
            "then": [{"append": "tags", "value": "untagged"}],
        },
        {"name": "tidy", "then": [{"capitalize": "tags"}, {"dedupe": "tags"}, {"take": "tags", "count": "2"}]},
        {
            "name": "sizes",
            "then": [
                {"uppercase": "sizes"},
                {"map": "sizes", "values": {"XL": "Extra large"}, "default": "{sizes[0]}?"},
            ],
        },
        {
            "name": "parts",
            "then": [
                {"split": "note", "separator": "/"},
                {"prepend": "note", "value": "{id}"},
                {"join": "note", "separator": "+"},
            ],
        },
    ]
    source = {"name": "main", "url": "main.csv", "lists": {"tags": ";", "sizes": ","}}
    export = {"name": "json", "format": "json", "path": "out.json"}
    report = _run(_write_spec(tmp_path, "list_rules", [source], [export], rules=rules))
    items = json.loads((run_env / "lists" / "list_rules" / "out.json").read_text(encoding="utf-8"))
    first, empty, steel = items
    assert report["rules"]["matched"]["has gold"] == 1 and report["rules"]["matched"]["no silver"] == 2
    assert first["tags"] == ["Gold", "Ring"] and first["metal"] == "gold" and first["many"] == "y"
    assert first["sizes"] == ["S?", "S?", "S?"]
    # P11: on no elements, map acts on the text "" (and writes a text); append adds an element (P12)
    assert empty["tags"] == ["Untagged"] and empty["sizes"] == "?"
    assert steel["sizes"] == ["Extra large"] and steel["plain"] == "y"
    # split made `note` a list field: prepend added an element to the list, join wrote a text; on the
    # empty note (no elements: not a list, and no source declares `note`) prepend concatenated (P12)
    assert first["note"] == "1+a+b+c" and empty["note"] == "2"


# -- real catalogs ----------------------------------------------------------------------------------
def test_prestashops_comma_separated_image_urls_become_repeated_elements(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(REALFEEDS / "prestashop" / "products_import.csv", tmp_path / "presta.csv")
    images = "Image URLs (x,y,z...)"
    with (tmp_path / "presta.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter=";"))
    expected = {r["Product ID"]: [u.strip() for u in r[images].split(",") if u.strip()] for r in rows}
    assert any(len(v) > 1 for v in expected.values())
    source = {"name": "presta", "url": "presta.csv", "lists": {images: ","}}
    fields = {
        "id": "Product ID",
        "title": "Name *",
        "image_link": "{" + images + "[0]}",
        "additional_image_link": images,
    }
    export = {"name": "google", "format": "google-xml", "path": "g.xml", "fields": fields}
    _run(_write_spec(tmp_path, "presta", [source], [export], key="Product ID"))
    got = {
        _texts(i, "id")[0]: _texts(i, "additional_image_link") for i in _items(run_env / "lists" / "presta" / "g.xml")
    }
    assert got == expected
    firsts = {_texts(i, "id")[0]: _texts(i, "image_link") for i in _items(run_env / "lists" / "presta" / "g.xml")}
    assert firsts == {k: v[:1] for k, v in expected.items()}


def test_dummyjson_arrays_are_lists_and_arrays_of_objects_stay_text(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(REALFEEDS / "dummyjson" / "products.json", tmp_path / "products.json")
    products = json.loads((tmp_path / "products.json").read_text(encoding="utf-8"))
    source = {"name": "dj", "url": "products.json", "lists": {"images": ",", "tags": ",", "reviews": ","}}
    rules = [
        {
            "name": "beauty",
            "when": {"field": "tags", "op": "eq", "value": "beauty"},
            "then": [{"set": "beauty", "value": "y"}],
        }
    ]
    fields = {"id": "id", "images": "images", "tags": "tags", "reviews": "reviews", "beauty": "beauty"}
    export = {"name": "json", "format": "json", "path": "out.json", "fields": fields}
    report = _run(_write_spec(tmp_path, "dummyjson", [source], [export], rules=rules))
    items = json.loads((run_env / "lists" / "dummyjson" / "out.json").read_text(encoding="utf-8"))
    assert [i["images"] for i in items] == [p["images"] or "" for p in products]
    assert [i["tags"] for i in items] == [p["tags"] or "" for p in products]
    assert report["rules"]["matched"]["beauty"] == sum("beauty" in p["tags"] for p in products)
    # an array of objects is not a list of scalars: it stays text, its compact JSON (P4)
    assert json.loads(items[0]["reviews"]) == products[0]["reviews"]


def test_wxrs_repeated_categories_are_one_list(run_env: Path, tmp_path: Path) -> None:
    shutil.copy(REALFEEDS / "woo-wxr" / "sample_products.xml", tmp_path / "wxr.xml")
    source = {"name": "wxr", "url": "wxr.xml", "lists": {"category": ","}}
    export = {
        "name": "csv",
        "format": "csv",
        "path": "out.csv",
        "fields": {"id": "post_id", "category": "category"},
        "list_separator": "|",
    }
    _run(_write_spec(tmp_path, "wxr", [source], [export], key="post_id"))
    _header, rows = read_csv(run_env / "lists" / "wxr" / "out.csv")
    by_id = dict((r[0], r[1]) for r in rows)
    assert by_id["6"] == "Blue|featured|Green|Large|Medium|Red|Small|variable|Tshirts"


def test_an_xml_list_keeps_its_first_seen_place_in_every_exports_columns(run_env: Path, tmp_path: Path) -> None:
    # SPEC 8.18: without `fields`, columns are the fields in first-seen order; a list is seen at its first element.
    (tmp_path / "feed.xml").write_text(
        "<rss><channel>"
        "<item><id>1</id><title>Tee</title><img>a.jpg</img><img>b.jpg</img><color>red</color></item>"
        "<item><id>2</id><title>Cap</title><img>c.jpg</img><color>blue</color></item>"
        "</channel></rss>",
        encoding="utf-8",
    )
    source = {"name": "main", "url": "feed.xml", "lists": {"img": ","}}
    exports = [
        {"name": "csv", "format": "csv", "path": "out.csv"},
        {"name": "json", "format": "json", "path": "out.json"},
        {"name": "google", "format": "google-xml", "path": "out.xml"},
    ]
    _run(_write_spec(tmp_path, "xml_order", [source], exports, key="id"))
    out = run_env / "lists" / "xml_order"

    header, rows = read_csv(out / "out.csv")
    assert header == ["id", "title", "img", "color"]
    assert rows[0] == ["1", "Tee", "a.jpg,b.jpg", "red"]
    items = json.loads((out / "out.json").read_text(encoding="utf-8"))
    assert [list(item) for item in items] == [["id", "title", "img", "color"]] * 2
    tee = _items(out / "out.xml")[0]
    assert [etree.QName(e).localname for e in tee] == ["id", "title", "img", "img", "color"]


# -- nested attributes (P25-P27) --------------------------------------------------------------------
NESTED_FIELDS = {
    "id": "id",
    "shipping.country": "country",
    "title": "title",
    "shipping.service": "service",
    "shipping.price": "{price} EUR",
    "size.sizes": "sizes",
}


def test_dotted_output_names_nest_in_every_format(run_env: Path, tmp_path: Path) -> None:
    write_csv(
        tmp_path / "main.csv",
        ["id", "title", "country", "service", "price", "sizes"],
        [["1", "A", "IT", "", "4.99", "S,M"], ["2", "B", "", "", "", ""]],
    )
    source = {"name": "main", "url": "main.csv", "lists": {"sizes": ","}}
    exports = [
        {"name": format, "format": format, "path": f"out.{format}", "fields": NESTED_FIELDS}
        for format in ("csv", "json", "google-xml")
    ]
    for e in exports:
        if e["format"] == "csv":
            e["list_separator"] = "|"  # a sub-value is a text: a list is joined with "," whatever the export (P26)
    _run(_write_spec(tmp_path, "nested", [source], exports))
    out = run_env / "lists" / "nested"

    header, rows = read_csv(out / "out.csv")
    assert header == ["id", "shipping", "title", "size"]
    # empty sub-values kept; the column is "" when every sub-value is empty (P27)
    assert rows == [["1", "IT::4.99 EUR", "A", "S,M"], ["2", ":: EUR", "B", ""]]

    items = json.loads((out / "out.json").read_text(encoding="utf-8"))
    assert items[0] == {
        "id": "1",
        "shipping": {"country": "IT", "service": "", "price": "4.99 EUR"},
        "title": "A",
        "size": {"sizes": "S,M"},
    }
    assert list(items[0]) == ["id", "shipping", "title", "size"]
    assert items[1]["size"] == {"sizes": ""}

    first, second = _items(out / "out.google-xml")
    assert [child.tag for child in first] == [G + "id", G + "shipping", G + "title", G + "size"]
    shipping = first.find(G + "shipping")
    assert shipping is not None
    assert [(c.tag, c.text) for c in shipping] == [(G + "country", "IT"), (G + "price", "4.99 EUR")]
    assert second.find(G + "size") is None  # no parent when every sub-value is empty
    second_shipping = second.find(G + "shipping")
    assert second_shipping is not None and [c.text for c in second_shipping] == [" EUR"]


def test_a_parent_that_is_also_a_flat_column_is_a_spec_error(
    run_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "ship"], [["1", "x"]])
    export = {
        "name": "csv",
        "format": "csv",
        "path": "out.csv",
        "fields": {"shipping": "ship", "shipping.price": "ship"},
    }
    code, _out = cli("run", str(_write_spec(tmp_path, "nested_bad", [{"name": "main", "url": "main.csv"}], [export])))
    assert code == 2
    err = capsys.readouterr().err
    assert "exports[0].fields.shipping:" in err and "parent of sub-attributes" in err


# -- the preview and an export's filter ---------------------------------------------------------------
def test_the_preview_shows_list_values_as_lists(
    run_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_csv(tmp_path / "main.csv", ["id", "tags"], [["1", "b|a|b"], ["2", ""]])
    rules = [{"name": "tidy", "then": [{"dedupe": "tags"}, {"append": "tags", "value": "new"}]}]
    source = {"name": "main", "url": "main.csv", "lists": {"tags": "|"}}
    spec = _write_spec(tmp_path, "list_preview", [source], [], rules=rules)
    code, out = cli("preview", str(spec), "--json")
    assert code == 0, out
    items = json.loads(out)["items"]
    changes = {i["key"]: i["rules"][0]["changes"] for i in items}
    assert changes == {
        "1": [{"field": "tags", "before": ["b", "a", "b"], "after": ["b", "a", "new"]}],
        "2": [{"field": "tags", "before": [], "after": ["new"]}],
    }
    code, table = cli("preview", str(spec))
    assert code == 0 and "tags ['b', 'a', 'b'] -> ['b', 'a', 'new']" in table


def test_an_exports_where_reads_list_fields_like_a_rules_when(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "images"], [["1", "a,b"], ["2", "c"], ["3", ""]])
    where = {"any": [{"field": "images", "op": "count_gt", "value": "1"}, {"field": "images", "op": "empty"}]}
    export = {"name": "csv", "format": "csv", "path": "out.csv", "where": where}
    source = {"name": "main", "url": "main.csv", "lists": {"images": ","}}
    _run(_write_spec(tmp_path, "list_where", [source], [export]))
    _header, rows = read_csv(run_env / "lists" / "list_where" / "out.csv")
    assert rows == [["1", "a,b"], ["3", ""]]


def test_the_cap_is_google_xmls_alone_and_counts_only_the_items_it_writes(run_env: Path, tmp_path: Path) -> None:
    eleven = ",".join(f"https://x/{n}.jpg" for n in range(11))
    write_csv(
        tmp_path / "main.csv", ["id", "pics", "state"], [["1", eleven, "on"], ["2", eleven, "off"], ["3", "a", "on"]]
    )
    fields = {"id": "id", "additional_image_link": "pics"}
    where = {"field": "state", "op": "eq", "value": "on"}
    exports = [
        {
            "name": "google",
            "format": "google-xml",
            "path": "g.xml",
            "fields": fields,
            "where": where,
            "channel": "none",
        },
        {"name": "json", "format": "json", "path": "j.json", "fields": fields},
    ]
    source = {"name": "main", "url": "main.csv", "lists": {"pics": ","}}
    report = _run(_write_spec(tmp_path, "cap", [source], exports))
    google, as_json = report["exports"]
    (finding,) = google["diagnostics"]["findings"]
    assert (finding["count"], finding["dropped"], finding["samples"]) == (1, 1, ["1"])
    assert as_json.get("diagnostics") is None
    items = json.loads((run_env / "lists" / "cap" / "j.json").read_text(encoding="utf-8"))
    assert [len(i["additional_image_link"]) for i in items] == [11, 11, 1]
    first, _third = _items(run_env / "lists" / "cap" / "g.xml")
    assert len(_texts(first, "additional_image_link")) == 10


def test_a_renamed_repeat_named_like_a_declared_list_is_one_element_whatever_its_text(
    run_env: Path, tmp_path: Path
) -> None:
    """<title> twice makes `title_2` (8.5); declared as a list, its text is one element, never an array
    literal of the feed's own (which could choose its bounds or dimensions)."""
    (tmp_path / "feed.xml").write_text(
        "<items><item><id>1</id><title>t</title><title>[0:1]={x,y}</title></item>"
        "<item><id>2</id><title>u</title><title>{{a,b},{c,d}}</title></item>"
        "<item><id>3</id><title>v</title><title>{</title></item></items>",
        encoding="utf-8",
    )
    source = {"name": "x", "url": "feed.xml", "lists": {"title_2": ","}}
    export = {"name": "json", "format": "json", "path": "out.json"}
    _run(_write_spec(tmp_path, "renamed_list", [source], [export], key="id"))
    items = json.loads((run_env / "lists" / "renamed_list" / "out.json").read_text(encoding="utf-8"))
    assert [i["title_2"] for i in items] == [["[0:1]={x,y}"], ["{{a,b},{c,d}}"], ["{"]]


def test_a_text_in_a_list_field_is_escaped_in_json_like_any_text(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "tags"], [["1", "a"]])
    rules = [{"name": "odd", "then": [{"set": "tags", "value": 'q"u\\o\tte\u2028'}]}]
    source = {"name": "main", "url": "main.csv", "lists": {"tags": ","}}
    exports = [
        {"name": "json", "format": "json", "path": "out.json"},
        {"name": "jsonl", "format": "jsonl", "path": "out.jsonl"},
    ]
    _run(_write_spec(tmp_path, "escaped_text", [source], exports, rules=rules))
    out = run_env / "lists" / "escaped_text"
    assert json.loads((out / "out.json").read_text(encoding="utf-8"))[0]["tags"] == 'q"u\\o\tte\u2028'
    assert json.loads((out / "out.jsonl").read_text(encoding="utf-8"))["tags"] == 'q"u\\o\tte\u2028'


HOSTILE_ELEMENTS = ["a\\b", 'say "hi"', "{x,y}", "NULL", "tab\there", "é ü", "[0:1]={a}"]


@pytest.mark.parametrize("fmt", ["csv", "json", "xml"])
def test_list_elements_that_read_like_array_syntax_are_staged_exactly(run_env: Path, tmp_path: Path, fmt: str) -> None:
    """A list field's staging column is text[], parsed by the COPY that stages it: elements holding quotes,
    backslashes, braces, `NULL`, a tab or an array's bounds are each one element, as written (trimmed),
    and an item without elements (an empty cell, an empty array, no element) has none."""
    if fmt == "csv":
        body = [["1", "|".join([*HOSTILE_ELEMENTS, " ", ""])], ["2", ""]]
        write_csv(tmp_path / "feed.csv", ["id", "tags"], body)
    elif fmt == "json":
        items = [{"id": "1", "tags": [*HOSTILE_ELEMENTS, " ", None]}, {"id": "2", "tags": []}]
        (tmp_path / "feed.json").write_text(json.dumps(items), encoding="utf-8")
    else:
        root = etree.Element("items")
        for n, tags in (("1", [*HOSTILE_ELEMENTS, " "]), ("2", [])):
            item = etree.SubElement(root, "item")
            etree.SubElement(item, "id").text = n
            for tag in tags:
                etree.SubElement(item, "tags").text = tag
        (tmp_path / "feed.xml").write_bytes(etree.tostring(root))
    source = {"name": "main", "url": f"feed.{fmt}", "format": fmt, "lists": {"tags": "|"}}
    exports = [{"name": "json", "format": "json", "path": "out.json"}]
    _run(_write_spec(tmp_path, f"hostile_{fmt}", [source], exports))
    items = json.loads((run_env / "lists" / f"hostile_{fmt}" / "out.json").read_text(encoding="utf-8"))
    assert [i["tags"] for i in items] == [HOSTILE_ELEMENTS, ""]
