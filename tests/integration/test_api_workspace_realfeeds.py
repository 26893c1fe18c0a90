"""The workspace routes a merchant uses first, on a real catalog (#53): Shopify's jewelry sample under the
docs' example spec (tests/fixtures/realfeeds/shopify-jewelry), applied over the API and run once.

One item with variants and a marked-up description (`GET .../items/{key}`), the distinct values of its
category field (`GET .../values?field=Type`), and the preview of the spec's HTML rule on it: each answer as
docs/web.md and docs/spec.md say, and every text the file holds (HTML, U+00A0, U+2028, `"`) the same
characters in the answer as in the file. What is expected is read from the CSV here, not from the product.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import yaml

from firefeed.config import reset_settings
from tests.integration.conftest import cli, new_company

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JEWELRY = ROOT / "tests" / "fixtures" / "realfeeds" / "shopify-jewelry" / "jewelery.csv"


@pytest.fixture(scope="module")
def env(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("workspace_real")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFEED_EXPORT_DIR", str(root / "exports"))
        mp.setenv("FIREFEED_DATA_DIR", str(root / "var"))
        mp.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root / "sources"))
        mp.delenv("FIREFEED_STORAGE_URL", raising=False)
        mp.delenv("FIREFEED_PUBLIC_URL", raising=False)
        reset_settings()
        yield root
    reset_settings()


class Shop:
    def __init__(self, env: Path, api: str) -> None:
        self.company, self.auth = new_company("wsr_")
        self.project = "jewelry_" + uuid.uuid4().hex[:8]
        folder = env / "sources" / self.company
        folder.mkdir(parents=True)
        shutil.copy(JEWELRY, folder / "jewelery.csv")
        doc = yaml.safe_load((ROOT / "docs" / "examples" / "shopify-google.yaml").read_text(encoding="utf-8"))
        doc.update(company=self.company, project=self.project)
        doc["sources"][0]["url"] = str(folder / "jewelery.csv")
        self.doc = doc
        with httpx.Client(base_url=api, timeout=30) as http:
            put = http.put(f"/api/projects/{self.project}", headers=self.auth, content=json.dumps(doc))
            assert put.status_code == 201, put.text
        spec = folder / "spec.yaml"
        spec.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
        code, out = cli("run", str(spec), "--json")
        assert code == 0, out


@pytest.fixture(scope="module")
def api(env: Path) -> Iterator[str]:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def shop(env: Path, api: str) -> Shop:
    return Shop(env, api)


@pytest.fixture()
def http(api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api, timeout=30) as client:
        yield client


def _rows() -> list[dict[str, str]]:
    with JEWELRY.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _plain(html: str) -> str:
    """The example spec's "plain description" rule, by hand: tags and entities to a space, then `trim` (the
    ends stripped, each inner run of white space, U+00A0 and U+2028 among it, folded to one space)."""
    text = re.sub(r"&[#a-zA-Z0-9]+;", " ", re.sub(r"<[^>]*>", " ", html))
    return re.sub(r"\s+", " ", text).strip()


def test_an_item_with_variants_and_marked_up_text_comes_back_as_the_file_holds_it(
    http: httpx.Client, shop: Shop
) -> None:
    rows = _rows()
    product = next(r for r in rows if r["Handle"] == "gemstone" and r["Title"])
    purple = next(r for r in rows if r["Handle"] == "gemstone" and r["Option1 Value"] == "Purple")
    assert purple["Body (HTML)"] == "" and product["Body (HTML)"].startswith("<p>")

    r = http.get(f"/api/projects/{shop.project}/items/{quote('gemstone:Purple', safe='')}", headers=shop.auth)
    assert r.status_code == 200, r.text
    item = r.json()
    assert set(item) >= {"key", "sources", "rules", "excluded_by", "fields", "values", "origin", "changed", "exports"}
    assert item["key"] == "gemstone:Purple" and item["excluded_by"] is None
    (source,) = item["sources"]
    brought = dict(zip(source["fields"], source["values"], strict=True))
    # the variant as the preset makes it: its own option and price, the product row's text
    assert (brought["color"], brought["item_group_id"], brought["title"]) == (
        "Purple",
        "gemstone",
        "Gemstone Necklace - Purple",
    )
    assert brought["Body (HTML)"] == product["Body (HTML)"]
    after = dict(zip(item["fields"], item["values"], strict=True))
    assert after["Body (HTML)"] == _plain(product["Body (HTML)"])
    assert item["origin"][item["fields"].index("Body (HTML)")] == "rule:plain description"
    assert item["fields"].index("Body (HTML)") in item["changed"]
    html = next(x for x in item["rules"] if x["rule"] == "plain description")
    assert html["matched"] and [c["field"] for c in html["changes"]] == ["Body (HTML)"] * len(html["changes"])
    assert html["changes"][0]["before"] == product["Body (HTML)"]
    (google,) = item["exports"]
    cells = dict(zip(google["columns"], google["cells"], strict=True))
    assert cells["description"] == _plain(product["Body (HTML)"])
    assert (cells["id"], cells["item_group_id"], cells["color"]) == ("gemstone:Purple", "gemstone", "Purple")
    assert google["findings"] == []


def test_unicode_and_markup_of_a_description_reach_the_answers_unchanged(http: httpx.Client, shop: Shop) -> None:
    body = next(r["Body (HTML)"] for r in _rows() if r["Handle"] == "choker-with-gold-pendant" and r["Title"])
    assert "\u00a0" in body and "\u2028" in body and "<ul>" in body and '"' in body

    item = http.get(f"/api/projects/{shop.project}/items/choker-with-gold-pendant", headers=shop.auth).json()
    brought = dict(zip(item["sources"][0]["fields"], item["sources"][0]["values"], strict=True))
    assert brought["Body (HTML)"] == body
    after = dict(zip(item["fields"], item["values"], strict=True))
    assert after["Body (HTML)"] == _plain(body)
    assert 'Length, 12" with 2.5" extender Width, 0.3" Lobster clasp' in after["Body (HTML)"]

    # the preview of the spec's rules on that item and a variant: the HTML rule's change, text for text
    r = http.post(
        f"/api/projects/{shop.project}/preview",
        params=[("item", "choker-with-gold-pendant"), ("item", "gemstone:Purple")],
        headers=shop.auth,
    )
    assert r.status_code == 200, r.text
    preview = r.json()
    assert [i["key"] for i in preview["items"]] == ["choker-with-gold-pendant", "gemstone:Purple"]
    rule = next(x for x in preview["rules"] if x["rule"] == "plain description")
    assert (rule["items_in"], rule["matched"], rule["changed"], rule["excluded"]) == (2, 2, 2, 0)
    choker = preview["items"][0]
    (change,) = [c for x in choker["rules"] if x["rule"] == "plain description" for c in x["changes"]]
    assert (change["field"], change["before"], change["after"]) == ("Body (HTML)", body, _plain(body))
    (out,) = preview["outputs"]
    rows = {row["key"]: dict(zip(out["columns"], row["cells"], strict=True)) for row in out["rows"]}
    assert rows["choker-with-gold-pendant"]["description"] == _plain(body)


def test_the_category_fields_values_are_counted_per_item_as_the_file_holds_them(http: httpx.Client, shop: Shop) -> None:
    rows = _rows()
    # an item per variant: a product's Type is on its first row, its variants are the rows with a price
    types: dict[str, str] = {}
    expected: Counter[str] = Counter()
    for row in rows:
        if row["Title"]:
            types[row["Handle"]] = row["Type"]
        if row["Variant Price"]:
            expected[types[row["Handle"]]] += 1
    assert sum(expected.values()) == 23

    r = http.get(f"/api/projects/{shop.project}/values", params={"field": "Type"}, headers=shop.auth)
    assert r.status_code == 200, r.text
    found = r.json()
    assert found["field"] == "Type", found
    assert {v["value"]: v["count"] for v in found["values"]} == dict(expected)
    counts = [v["count"] for v in found["values"]]
    assert counts == sorted(counts, reverse=True)
