"""SPEC 10 C1: `{value: TEXT}` in an export's `fields` writes TEXT on every item, in every format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from lxml import etree

from firefeed.export.google_xml import GOOGLE_NS
from tests.integration.conftest import read_csv, run_json, write_csv

G = "{" + GOOGLE_NS + "}"

# Order kept as written: a literal sits between field columns; `{price}` as a literal is those characters.
FIELDS: dict[str, Any] = {
    "id": "id",
    "condition": {"value": "new"},
    "title": "title",
    "note": {"value": "{price}"},
    "shipping.country": {"value": "US"},
    "shipping.price": "{price} USD",
}


def _run(tmp_path: Path, exports: list[dict[str, Any]]) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title", "price"], [["1", "Tee", "9"], ["2", "Cap", ""]])
    # C3: these items are not Google-complete; this test reads the literal columns each format writes.
    exports = [{**e, "max_invalid": "100%"} if e["format"] == "google-xml" else e for e in exports]
    spec = {
        "company": "literals",
        "project": "c1",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": exports,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    assert not [w for w in report.get("warnings", []) if "reads fields" in str(w)], report


def test_a_literal_is_written_on_every_item_in_every_format(run_env: Path, tmp_path: Path) -> None:
    formats = {"csv": "csv", "tsv": "tsv", "json": "json", "jsonl": "jsonl", "google-xml": "xml"}
    _run(tmp_path, [{"name": f, "format": f, "path": f"out.{ext}", "fields": FIELDS} for f, ext in formats.items()])
    out = run_env / "literals" / "c1"

    header, rows = read_csv(out / "out.csv")
    assert header == ["id", "condition", "title", "note", "shipping"]
    assert rows == [["1", "new", "Tee", "{price}", "US:9 USD"], ["2", "new", "Cap", "{price}", "US: USD"]]
    tsv = (out / "out.tsv").read_text(encoding="utf-8").splitlines()
    assert tsv[0].split("\t") == header and tsv[1].split("\t") == rows[0]

    first = {
        "id": "1",
        "condition": "new",
        "title": "Tee",
        "note": "{price}",
        "shipping": {"country": "US", "price": "9 USD"},
    }
    items = json.loads((out / "out.json").read_text(encoding="utf-8"))
    assert items[0] == first and list(items[0]) == list(first)
    assert items[1]["condition"] == "new" and items[1]["shipping"] == {"country": "US", "price": " USD"}
    lines = [json.loads(line) for line in (out / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines == items

    tee, cap = etree.fromstring((out / "out.xml").read_bytes()).iter("item")
    assert [c.tag for c in tee] == [G + "id", G + "condition", G + "title", G + "note", G + "shipping"]
    assert [(c.tag, c.text) for c in tee][1:4:2] == [(G + "condition", "new"), (G + "note", "{price}")]
    shipping = cap.find(G + "shipping")
    assert shipping is not None
    assert [(c.tag, c.text) for c in shipping] == [(G + "country", "US"), (G + "price", " USD")]


def test_a_mapping_with_another_key_is_a_spec_error_naming_its_path(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id"], [["1"]])
    fields = {"id": "id", "shipping.country": {"text": "US"}}
    spec = {
        "company": "literals",
        "project": "c1_bad",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv", "fields": fields}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code != 0
    assert report["error"]["path"] == 'exports[0].fields["shipping.country"]'
    assert "'text' is not a key it takes" in report["error"]["message"]
