"""Lists through channel rules, lookups and `values` end to end (SPEC 9: P22, P29, P33)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import cli, run_json, write_csv

pytestmark = pytest.mark.integration


def _spec(tmp: Path, project: str) -> Path:
    write_csv(
        tmp / "main.csv",
        ["id", "title", "images", "tags"],
        [
            ["1", "Gold ring", "r1.jpg, r2.jpg, r3.jpg", "shop|rings"],
            ["2", "Red hat", "h1.jpg", "hats|sale|hats"],
            ["3", "Mug", "", "kitchen"],
        ],
    )
    write_csv(tmp / "cats.csv", ["code", "gpc"], [["rings", "Jewelry > Rings"], ["sale", "Sale"], ["kitchen", "Mugs"]])
    spec: dict[str, Any] = {
        "company": "catalog",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv", "lists": {"images": ","}}],
        "lookups": [{"name": "cats", "url": "cats.csv", "key": "code"}],
        "rules": [{"name": "tags", "then": [{"split": "tags", "separator": "|"}]}],
        "exports": [
            {"name": "plain", "format": "json", "path": "plain.json"},
            {
                "name": "google",
                "format": "json",
                "path": "google.json",
                "rules": [
                    # on the project's lists: a declared one and one the project's rules made
                    {"name": "two images", "then": [{"take": "images", "count": "2"}]},
                    {"name": "gpc", "then": [{"lookup": "cats", "match": "tags", "set": {"gpc": "gpc"}}]},
                    # a list of the export's own, made from a field the project leaves as text
                    {"name": "words", "then": [{"split": "title", "separator": " "}, {"take": "title", "count": 1}]},
                ],
            },
        ],
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def test_channel_rules_act_on_list_fields_and_make_lists_of_their_own(run_env: Path, tmp_path: Path) -> None:
    code, report = run_json(_spec(tmp_path, "list_channels"))
    assert code == 0, report
    out = run_env / "catalog" / "list_channels"
    plain = json.loads((out / "plain.json").read_text(encoding="utf-8"))
    google = json.loads((out / "google.json").read_text(encoding="utf-8"))
    assert [(i["images"], i["tags"], i["title"]) for i in plain] == [
        (["r1.jpg", "r2.jpg", "r3.jpg"], ["shop", "rings"], "Gold ring"),
        (["h1.jpg"], ["hats", "sale", "hats"], "Red hat"),
        ("", ["kitchen"], "Mug"),
    ]
    assert [(i["images"], i["title"], i["gpc"]) for i in google] == [
        (["r1.jpg", "r2.jpg"], ["Gold"], "Jewelry > Rings"),  # "shop" has no row: the next element's
        (["h1.jpg"], ["Red"], "Sale"),
        ("", ["Mug"], "Mugs"),
    ]
    own = report["exports"][1]["rules"]
    (lookup,) = own["lookups"]
    assert (lookup["matched"], lookup["unmatched"]) == (3, 0)


def test_values_counts_each_distinct_element_of_a_list_once_per_item(run_env: Path, tmp_path: Path) -> None:
    code, report = run_json(_spec(tmp_path, "list_values"))
    assert code == 0, report
    code, out = cli("values", "list_values", "tags", "--json")
    assert code == 0, out
    assert json.loads(out)["values"] == [
        {"value": "shop", "count": 1},
        {"value": "rings", "count": 1},
        {"value": "hats", "count": 1},  # twice in one item: one count
        {"value": "sale", "count": 1},
        {"value": "kitchen", "count": 1},
    ]
    code, out = cli("values", "list_values", "images", "--json")
    assert code == 0, out
    assert [(v["value"], v["count"]) for v in json.loads(out)["values"]][-2:] == [("h1.jpg", 1), ("", 1)]


def test_the_preview_shows_an_exports_own_list_of_a_text_field(run_env: Path, tmp_path: Path) -> None:
    code, out = cli("preview", str(_spec(tmp_path, "list_preview")), "--json")
    assert code == 0, out
    (google,) = json.loads(out)["exports"]
    words = [r for r in google["rules"] if r["rule"] == "words"]
    # the project's title is a text in the export's copy; split makes it a list, "Mug" included (P2: json tells)
    assert words[0]["changed"] == 3
    changes = {
        i["key"]: [c for e in i["rules"] for c in e["changes"] if c["field"] == "title"] for i in google["items"]
    }
    assert changes["1"] == [{"field": "title", "before": "Gold ring", "after": ["Gold"]}]
    assert changes["3"] == [{"field": "title", "before": "Mug", "after": ["Mug"]}]


def test_the_first_image_as_image_link_and_the_others_as_additional_image_link(run_env: Path, tmp_path: Path) -> None:
    """The docs/lists.md recipe: Google wants the main image once, in `image_link`, and only the
    others in `additional_image_link`; two channel rules split one image list that way."""
    write_csv(
        tmp_path / "main.csv",
        ["id", "title", "images"],
        [["1", "Gold ring", "r1.jpg, r2.jpg, r1.jpg, r3.jpg"], ["2", "Red hat", "h1.jpg"], ["3", "Mug", ""]],
    )
    spec = {
        "company": "catalog",
        "project": "image_recipe",
        "sources": [{"name": "main", "url": "main.csv", "lists": {"images": ","}}],
        "exports": [
            {
                "name": "google",
                "format": "google-xml",
                "path": "google.xml",
                # C3: these items are not Google-complete; this test reads how the image list is split.
                "max_invalid": "100%",
                "fields": {"id": "id", "title": "title", "image_link": "image_link", "additional_image_link": "images"},
                "rules": [
                    {"name": "main image", "then": [{"set": "image_link", "value": "{images[0]}"}]},
                    {
                        "name": "other images",
                        "then": [{"remove": "images", "when": {"field": "_", "op": "eq", "value": "{image_link}"}}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report
    items = (run_env / "catalog" / "image_recipe" / "google.xml").read_text(encoding="utf-8").split("<item>")[1:]
    assert [i.split("</item>")[0] for i in items] == [
        "<g:id>1</g:id><g:title>Gold ring</g:title><g:image_link>r1.jpg</g:image_link>"
        "<g:additional_image_link>r2.jpg</g:additional_image_link>"
        "<g:additional_image_link>r3.jpg</g:additional_image_link>",
        "<g:id>2</g:id><g:title>Red hat</g:title><g:image_link>h1.jpg</g:image_link>",
        "<g:id>3</g:id><g:title>Mug</g:title>",
    ]
