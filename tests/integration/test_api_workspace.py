"""The web workspace's API (#53): the spec as text, validation at lines, versions and restore, downloads,
and the same 404 for another company on every route.

One real API (uvicorn in a thread) and one export folder for the module; one project is run once through
`firefeed run` and shared by the tests that read what it published.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from firefeed.config import reset_settings
from tests.integration.conftest import cli, new_company, write_csv

pytestmark = pytest.mark.integration

HOSTILE = "<img src=x onerror=alert(1)>\u202e"


@pytest.fixture(scope="module")
def env(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("workspace")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREFEED_EXPORT_DIR", str(root / "exports"))
        mp.setenv("FIREFEED_DATA_DIR", str(root / "var"))
        mp.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root / "sources"))
        mp.delenv("FIREFEED_STORAGE_URL", raising=False)
        mp.delenv("FIREFEED_PUBLIC_URL", raising=False)
        reset_settings()
        yield root
    reset_settings()


@pytest.fixture(scope="module")
def api(env: Path) -> Iterator[str]:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as url:
        yield url


@pytest.fixture()
def http(api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api, timeout=30, headers={"Accept-Encoding": "identity"}) as client:
        yield client


def spec_doc(company: str, project: str, folder: Path) -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "name": HOSTILE,
        "sources": [{"name": "main", "url": str(folder / "main.csv")}],
        "rules": [
            {
                "name": HOSTILE,
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock"}],
            },
            {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
        ],
        "exports": [
            {"name": "csv", "format": "csv", "path": "feed.csv", "fields": {"title": "title", "id": "id", "p": "price"}}
        ],
        "lookups": [{"name": "cats", "key": "title", "rows": [{"title": "Boot", "gpc": "187"}]}],
    }


class Shop:
    """A company with a project whose spec lives under the local sources root (so the API may apply it)."""

    def __init__(self, env: Path) -> None:
        self.company, self.auth = new_company("ws_")
        self.project = "ws_" + uuid.uuid4().hex[:10]
        self.folder = env / "sources" / self.company
        self.folder.mkdir(parents=True)
        write_csv(
            self.folder / "main.csv",
            ["id", "title", "price", "quantity", "availability"],
            [["A1", HOSTILE, "10.00", "0", "in stock"], ["A2", "Boot", "20.00", "4", "in stock"]],
        )
        self.doc = spec_doc(self.company, self.project, self.folder)

    def put(self, http: httpx.Client, doc: dict[str, Any] | None = None) -> httpx.Response:
        return http.put(f"/api/projects/{self.project}", headers=self.auth, content=json.dumps(doc or self.doc))

    def run(self) -> None:
        spec = self.folder / "spec.yaml"
        spec.write_text(yaml.safe_dump(self.doc, sort_keys=False))
        code, out = cli("run", str(spec), "--json")
        assert code == 0, out


@pytest.fixture(scope="module")
def shop(env: Path, api: str) -> Shop:
    """The shared project: applied over the API, then run once (which applies it again from its file)."""
    s = Shop(env)
    with httpx.Client(base_url=api, timeout=30) as http:
        assert s.put(http).status_code == 201
    s.run()
    return s


def test_the_spec_comes_back_as_yaml_in_the_documents_key_order_and_names_as_json_text(
    http: httpx.Client, shop: Shop
) -> None:
    r = http.get(f"/api/projects/{shop.project}/spec", headers=shop.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["project"] == shop.project
    assert isinstance(body["version"], int)
    assert body["spec"]["rules"][0]["name"] == HOSTILE
    assert body["applied_at"]
    again = yaml.load(body["yaml"], Loader=yaml.BaseLoader)
    assert again == body["spec"]
    # the export's fields in the order the merchant wrote them, not sorted
    assert list(again["exports"][0]["fields"]) == ["title", "id", "p"]
    assert body["yaml"].index("company:") < body["yaml"].index("sources:") < body["yaml"].index("exports:")


def test_a_valid_draft_is_ok_and_nothing_is_stored(http: httpx.Client, shop: Shop) -> None:
    before = http.get(f"/api/projects/{shop.project}/versions", headers=shop.auth).json()
    draft = dict(shop.doc, name="changed but only validated")
    r = http.post(f"/api/projects/{shop.project}/validate", headers=shop.auth, content=yaml.safe_dump(draft))
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True}
    assert http.get(f"/api/projects/{shop.project}/versions", headers=shop.auth).json() == before


DRAFT = """\
company: {company}
project: {project}
sources:
  - name: main
    url: {url}
    fromat: csv
rules:
  - name: vat
    then:
      - math: price
        op: multiply
        value: "1.22"
  - name: broken
    when: {{field: price, op: biggerthan, value: "3"}}
    then:
      - sett: title
        value: x
exports:
  - name: out
    format: cvs
    path: out.csv
"""


def test_every_error_of_a_draft_comes_back_at_its_line_and_key_with_a_suggestion(
    http: httpx.Client, shop: Shop
) -> None:
    text = DRAFT.format(company=shop.company, project=shop.project, url=shop.folder / "main.csv")
    r = http.post(f"/api/projects/{shop.project}/validate", headers=shop.auth, content=text)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is False
    by_path = {e["path"]: e for e in body["errors"]}
    lines = text.splitlines()
    assert by_path["sources[0].fromat"]["line"] == 6
    assert lines[by_path["sources[0].fromat"]["line"] - 1].strip().startswith("fromat")
    assert by_path["sources[0].fromat"]["suggestion"] == "did you mean 'format'?"
    assert "did you mean" not in by_path["sources[0].fromat"]["message"]
    assert by_path["exports[0].format"]["line"] == 20
    assert by_path["exports[0].format"]["column"] == 5
    assert by_path["exports[0].format"]["suggestion"] == "did you mean 'csv'?"
    for e in body["errors"]:
        assert set(e) == {"path", "line", "column", "message", "suggestion"}
        assert e["line"] is not None and 1 <= e["line"] <= len(lines), e


def test_no_body_checks_the_stored_spec_again_and_a_project_without_one_is_404(http: httpx.Client, shop: Shop) -> None:
    assert http.post(f"/api/projects/{shop.project}/validate", headers=shop.auth).json() == {"ok": True}
    r = http.post(f"/api/projects/nothing_{uuid.uuid4().hex[:6]}/validate", headers=shop.auth)
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_a_draft_that_is_not_yaml_points_at_the_parsers_line(http: httpx.Client, shop: Shop) -> None:
    text = f"company: {shop.company}\nproject: {shop.project}\nsources: [\n  - name: main\n"
    body = http.post(f"/api/projects/{shop.project}/validate", headers=shop.auth, content=text).json()
    assert body["ok"] is False
    assert body["errors"][0]["path"] == ""
    assert body["errors"][0]["line"] is not None


def test_a_draft_over_the_size_cap_is_413_and_a_new_project_may_be_validated(
    http: httpx.Client, shop: Shop, env: Path
) -> None:
    big = "# " + "x" * (1024**2 + 10)
    r = http.post(f"/api/projects/{shop.project}/validate", headers=shop.auth, content=big)
    assert r.status_code == 413
    assert r.json()["error"] == "payload_too_large"
    fresh = "new_" + uuid.uuid4().hex[:8]
    doc = spec_doc(shop.company, fresh, shop.folder)
    r = http.post(f"/api/projects/{fresh}/validate", headers=shop.auth, content=json.dumps(doc))
    assert r.json() == {"ok": True}
    r = http.post(f"/api/projects/{fresh}/validate", headers=shop.auth, content=json.dumps(dict(doc, company="other")))
    assert r.json()["errors"][0]["path"] == "company"


def test_versions_list_newest_first_and_an_older_one_is_restored_through_the_apply(
    http: httpx.Client, env: Path
) -> None:
    s = Shop(env)
    assert s.put(http).status_code == 201
    first = http.get(f"/api/projects/{s.project}/spec", headers=s.auth).json()
    s.doc["rules"][1]["then"][0]["value"] = "1.10"
    assert s.put(http).status_code == 200
    listed = http.get(f"/api/projects/{s.project}/versions", headers=s.auth).json()["versions"]
    assert [v["current"] for v in listed] == [True, False]
    assert listed[1]["version"] == first["version"]
    assert all(v["bytes"] > 0 and v["runs"] == 0 and v["created_at"] for v in listed)

    old = http.get(f"/api/projects/{s.project}/versions/{first['version']}", headers=s.auth).json()
    assert old["version"] == first["version"]
    assert yaml.load(old["yaml"], Loader=yaml.BaseLoader)["rules"][1]["then"][0]["value"] == "1.22"

    r = http.post(f"/api/projects/{s.project}/versions/{first['version']}/restore", headers=s.auth)
    assert r.status_code == 200, r.text
    assert r.json()["project"] == s.project and r.json()["created"] is False
    now = http.get(f"/api/projects/{s.project}/spec", headers=s.auth).json()
    assert now["spec"]["rules"][1]["then"][0]["value"] == "1.22"
    # the same document: the same version is current again
    assert now["version"] == first["version"]
    for unknown in ("999999999", "1e3", "-1", "99999999999999999999999", "x"):
        assert http.get(f"/api/projects/{s.project}/versions/{unknown}", headers=s.auth).status_code == 404


def test_the_published_file_downloads_as_an_attachment_of_its_type(http: httpx.Client, shop: Shop, env: Path) -> None:
    r = http.get(f"/api/projects/{shop.project}/exports/csv/file", headers=shop.auth)
    assert r.status_code == 200, r.text
    assert r.content == (env / "exports" / shop.company / shop.project / "feed.csv").read_bytes()
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    assert r.headers["content-disposition"].startswith('attachment; filename="feed.csv"')
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.content.splitlines()[0] == b"title,id,p"


def test_an_export_never_published_or_unknown_is_404(http: httpx.Client, env: Path) -> None:
    s = Shop(env)
    assert s.put(http).status_code == 201
    for export in ("csv", "nope"):
        r = http.get(f"/api/projects/{s.project}/exports/{export}/file", headers=s.auth)
        assert r.status_code == 404
        assert r.json()["error"] == "not_found"


ROUTES = [
    ("GET", "/api/projects/{p}/spec"),
    ("POST", "/api/projects/{p}/validate"),
    ("GET", "/api/projects/{p}/versions"),
    ("GET", "/api/projects/{p}/versions/{v}"),
    ("POST", "/api/projects/{p}/versions/{v}/restore"),
    ("GET", "/api/projects/{p}/exports/csv/file"),
    ("GET", "/api/projects/{p}/items/A1"),
    ("POST", "/api/projects/{p}/lookups/cats/rows"),
    ("GET", "/api/projects/{p}/lookups/cats/unmatched"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_another_company_gets_the_404_of_a_missing_project_on_every_route(
    http: httpx.Client, shop: Shop, method: str, path: str
) -> None:
    _, other = new_company("ws_other_")
    version = http.get(f"/api/projects/{shop.project}/spec", headers=shop.auth).json()["version"]
    url = path.format(p=shop.project, v=version)
    body = json.dumps(shop.doc) if method == "POST" else None
    theirs = http.request(method, url, headers=other, content=body)
    nothing = "no_such_" + uuid.uuid4().hex[:5]
    missing = http.request(method, path.format(p=nothing, v=version), headers=other)
    assert theirs.status_code == 404, theirs.text
    assert theirs.json()["error"] == "not_found"
    if "validate" not in path:  # a project that does not exist yet may be validated (the page creates projects)
        assert missing.status_code == 404
        # word for word the answer of a project that does not exist
        assert theirs.text.replace(shop.project, "P") == missing.text.replace(nothing, "P")
    assert http.request(method, url, content=body).status_code == 401


def two_sources(env: Path) -> Shop:
    """A shop whose stock file (enrich) sets quantities, with a channel-rule export and a filtered one."""
    s = Shop(env)
    write_csv(
        s.folder / "main.csv",
        ["id", "title", "price", "quantity", "brand"],
        [
            ["A1", "Runner test", "10.00", "5", "Acme"],
            ["A2", HOSTILE, "20.00", "4", "Zeta"],
            ["A3", "Hat", "5.00", "2", ""],
        ],
    )
    write_csv(s.folder / "stock.csv", ["id", "quantity"], [["A2", "0"], ["A3", ""]])
    s.doc["sources"].append({"name": "stock", "url": str(s.folder / "stock.csv"), "mode": "enrich"})
    s.doc["rules"] = [
        {
            "name": "oos",
            "when": {"field": "quantity", "op": "lte", "value": "0"},
            "then": [{"set": "availability", "value": "out of stock"}],
        },
        {
            "name": "drop tests",
            "when": {"field": "title", "op": "contains", "value": "test"},
            "then": [{"exclude": True}],
        },
    ]
    s.doc["exports"] = [
        {
            "name": "plain",
            "format": "csv",
            "path": "plain.csv",
            "fields": {"id": "id", "label": "{brand}: {title}", "fixed": {"value": "{x}"}, "q": "quantity"},
            "where": {"field": "brand", "op": "not_empty"},
        },
        {
            "name": "google",
            "format": "google-xml",
            "path": "g.xml",
            "fields": {"id": "id", "title": "title", "price": "price", "availability": "availability"},
            "rules": [
                {"name": "no hats", "when": {"field": "title", "op": "eq", "value": "Hat"}, "then": [{"exclude": True}]}
            ],
        },
    ]
    return s


def test_a_preview_shows_each_cell_after_the_rules_what_set_it_and_each_exports_rows(
    http: httpx.Client, env: Path
) -> None:
    s = two_sources(env)
    assert s.put(http).status_code == 201, s.put(http).text
    r = http.post(f"/api/projects/{s.project}/preview", headers=s.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    fields = body["fields"]
    assert fields == ["id", "title", "price", "quantity", "brand", "availability"]
    items = {i["key"]: i for i in body["items"]}
    a2 = items["A2"]
    assert a2["values"] == ["A2", HOSTILE, "20.00", "0", "Zeta", "out of stock"]
    assert a2["origin"] == ["source:main", "source:main", "source:main", "source:stock", "source:main", "rule:oos"]
    assert a2["changed"] == [5]
    assert items["A3"]["origin"][3] == "source:main"  # the stock file's empty quantity does not overwrite
    assert items["A3"]["origin"][5] == "" and items["A3"]["changed"] == []
    assert items["A1"]["excluded_by"] == "drop tests"

    outputs = {o["export"]: o for o in body["outputs"]}
    assert [o["export"] for o in body["outputs"]] == ["plain", "google"]
    plain = outputs["plain"]
    assert plain["columns"] == ["id", "label", "fixed", "q"]
    assert plain["rows"] == [{"key": "A2", "cells": ["A2", f"Zeta: {HOSTILE}", "{x}", "0"]}]
    assert plain["total"] == 1
    assert plain["excluded"] == [{"key": "A1", "by": "drop tests"}, {"key": "A3", "by": "where"}]
    google = outputs["google"]
    assert [row["key"] for row in google["rows"]] == ["A2"]
    assert {"key": "A3", "by": "no hats"} in google["excluded"]
    (channel,) = body["exports"]
    assert channel["name"] == "google" and channel["fields"] == fields
    assert "origin" in channel["items"][0]


def test_an_edited_rule_replays_the_kept_source_rows_and_a_changed_file_is_read_again(
    http: httpx.Client, env: Path
) -> None:
    from firefeed.preview.cache import SAMPLES

    s = two_sources(env)
    url = f"/api/projects/{s.project}/preview"
    assert http.post(url, headers=s.auth, content=json.dumps(s.doc)).status_code == 200
    hits, misses = SAMPLES.hits, SAMPLES.misses
    s.doc["rules"][0]["then"][0]["value"] = "sold out"
    edited = http.post(url, headers=s.auth, content=json.dumps(s.doc)).json()
    assert SAMPLES.hits - hits == 2 and SAMPLES.misses == misses  # both sources replayed
    assert {i["key"]: i["values"][5] for i in edited["items"]}["A2"] == "sold out"
    assert [src["rows_read"] for src in edited["sources"]] == [3, 2]

    write_csv(s.folder / "stock.csv", ["id", "quantity"], [["A2", "7"], ["A3", "0"]])
    fresh = http.post(url, headers=s.auth, content=json.dumps(s.doc)).json()
    assert SAMPLES.misses - misses == 1  # the stock file changed; the primary did not
    values = {i["key"]: i["values"] for i in fresh["items"]}
    assert values["A2"][3] == "7" and values["A3"][5] == "sold out"


def test_an_item_as_each_source_brought_it_through_the_rules_and_in_each_export(http: httpx.Client, env: Path) -> None:
    s = two_sources(env)
    assert s.put(http).status_code == 201
    r = http.get(f"/api/projects/{s.project}/items/A2", headers=s.auth)
    assert r.status_code == 200, r.text
    item = r.json()
    assert item["key"] == "A2"
    assert item["sources"] == [
        {
            "name": "main",
            "fields": ["id", "title", "price", "quantity", "brand"],
            "values": ["A2", HOSTILE, "20.00", "4", "Zeta"],
        },
        {"name": "stock", "fields": ["id", "quantity"], "values": ["A2", "0"]},
    ]
    assert [(x["rule"], x["matched"]) for x in item["rules"]] == [("oos", True), ("drop tests", False)]
    assert item["values"][item["fields"].index("availability")] == "out of stock"
    plain, google = item["exports"]
    assert plain["cells"] == ["A2", f"Zeta: {HOSTILE}", "{x}", "0"] and plain["excluded_by"] is None
    assert google["columns"] == ["id", "title", "price", "availability"]
    checks = {f["check"] for f in google["findings"]}
    assert {"price_format", "html", "missing"} <= checks, google["findings"]  # no currency, a tag, no link
    assert all(set(f) == {"check", "attribute", "severity", "message"} for f in google["findings"])

    gone = http.get(f"/api/projects/{s.project}/items/A1", headers=s.auth).json()
    assert gone["excluded_by"] == "drop tests"
    assert [e["excluded_by"] for e in gone["exports"]] == ["drop tests", "drop tests"]
    assert all(e["cells"] is None for e in gone["exports"])
    missing = http.get(f"/api/projects/{s.project}/items/NOPE", headers=s.auth)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_unmatched_values_become_lookup_rows_and_the_next_run_matches_them(http: httpx.Client, env: Path) -> None:
    s = Shop(env)
    s.doc["rules"].append({"name": "gpc", "then": [{"lookup": "cats", "match": "title", "set": {"gpc": "gpc"}}]})
    s.doc["lookups"].append({"name": "file", "key": "title", "url": str(s.folder / "main.csv")})
    assert s.put(http).status_code == 201
    base = f"/api/projects/{s.project}/lookups"
    before = http.get(f"{base}/cats/unmatched", headers=s.auth).json()
    assert before == {"lookup": "cats", "run_id": None, "actions": [], "values": []}
    s.run()
    found = http.get(f"{base}/cats/unmatched", headers=s.auth).json()
    assert found["run_id"] is not None
    assert found["values"] == [{"value": HOSTILE, "count": 1}]
    assert found["actions"][0]["rule"] == "gpc" and found["actions"][0]["unmatched"] == 1

    versions = len(http.get(f"/api/projects/{s.project}/versions", headers=s.auth).json()["versions"])
    added = http.post(f"{base}/cats/rows", headers=s.auth, json={"rows": [{"title": HOSTILE, "gpc": "<b>1</b>"}]})
    assert added.status_code == 200, added.text
    assert added.json()["rows"] == 2 and added.json()["lookup"] == "cats"
    assert len(http.get(f"/api/projects/{s.project}/versions", headers=s.auth).json()["versions"]) == versions + 1
    spec = http.get(f"/api/projects/{s.project}/spec", headers=s.auth).json()["spec"]
    assert spec["lookups"][0]["rows"][-1] == {"title": HOSTILE, "gpc": "<b>1</b>"}
    assert spec["sources"] == s.doc["sources"]

    # the next run (from the stored spec, with its folder) matches the value
    s.doc = spec
    s.run()
    assert http.get(f"{base}/cats/unmatched", headers=s.auth).json()["values"] == []

    url_lookup = http.post(f"{base}/file/rows", headers=s.auth, json={"rows": [{"title": "x"}]})
    assert url_lookup.status_code == 409 and url_lookup.json()["error"] == "lookup_not_inline"
    assert http.post(f"{base}/nope/rows", headers=s.auth, json={"rows": [{"title": "x"}]}).status_code == 404
    for bad in ({"rows": []}, {"rows": [{"gpc": "1"}]}, {"rows": [{"title": 3}]}, {"other": 1}, [1]):
        r = http.post(f"{base}/cats/rows", headers=s.auth, json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["error"] == "spec_error"
    big = {"rows": [{"title": "t" * 1000, "gpc": "g" * 1000}] * 600}
    assert http.post(f"{base}/cats/rows", headers=s.auth, json=big).status_code == 413


def test_two_additions_at_once_both_land(http: httpx.Client, env: Path, api: str) -> None:
    s = Shop(env)
    assert s.put(http).status_code == 201
    url = f"/api/projects/{s.project}/lookups/cats/rows"

    def add(title: str) -> int:
        with httpx.Client(base_url=api, timeout=30) as client:
            return client.post(url, headers=s.auth, json={"rows": [{"title": title, "gpc": "1"}]}).status_code

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(add, ["one", "two"]))
    assert codes == [200, 200]
    rows = http.get(f"/api/projects/{s.project}/spec", headers=s.auth).json()["spec"]["lookups"][0]["rows"]
    assert sorted(r["title"] for r in rows) == ["Boot", "one", "two"]


def test_the_page_has_its_content_security_policy_under_either_of_its_addresses(http: httpx.Client) -> None:
    """`/` sent the page with its policy (no inline script, never framed); the same file at /web/index.html,
    as the static mount serves it, came without one: a way around the policy for a link or a frame."""
    for path in ("/", "/web/index.html"):
        r = http.get(path)
        assert r.status_code == 200 and "<main" in r.text
        policy = r.headers.get("content-security-policy", "")
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, path


def test_a_lookup_or_export_whose_name_holds_a_slash_is_reached_by_its_routes(http: httpx.Client, env: Path) -> None:
    """A spec's names may hold any character, and the page sends a name as one encoded path segment (`a%2Fb`);
    the server reads it decoded, so a name with a slash matched none of these routes (the framework's
    404 "Not Found"): its rows could not be added, its values not listed, its file not downloaded."""
    s = Shop(env)
    s.doc["lookups"].append({"name": "shoes/boots", "key": "title", "rows": [{"title": "Boot", "gpc": "1"}]})
    s.doc["exports"].append({"name": "google/de", "format": "csv", "path": "de.csv"})
    assert s.put(http).status_code == 201
    base = f"/api/projects/{s.project}"
    r = http.post(f"{base}/lookups/shoes%2Fboots/rows", headers=s.auth, json={"rows": [{"title": "Hat", "gpc": "2"}]})
    assert r.status_code == 200, r.text
    assert r.json()["lookup"] == "shoes/boots" and r.json()["rows"] == 2
    r = http.get(f"{base}/lookups/shoes%2Fboots/unmatched", headers=s.auth)
    assert r.status_code == 200 and r.json()["lookup"] == "shoes/boots"
    r = http.get(f"{base}/exports/google%2Fde/file", headers=s.auth)
    assert r.status_code == 404 and "google/de" in r.json()["message"]  # the route's own: not published yet


def test_an_items_answer_stays_under_the_previews_answer_bound_whatever_its_exports(
    http: httpx.Client, env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The item fits the bound, but each export writes it again, and each source brought it: the item's
    answer was not measured past the item (a 5 MB item and 30 exports answered 153 MB, bound 16 MB)."""
    s = Shop(env)
    write_csv(s.folder / "main.csv", ["id", "title", "note"], [["A1", "t", "x" * 20_000], ["A2", "u", "y"]])
    s.doc["rules"], s.doc["lookups"] = [], []
    s.doc["exports"] = [{"name": f"e{i}", "format": "csv", "path": f"e{i}.csv"} for i in range(8)]
    assert s.put(http).status_code == 201
    monkeypatch.setenv("FIREFEED_PREVIEW_MAX_ANSWER_BYTES", str(64 * 1024))
    reset_settings()
    try:
        r = http.get(f"/api/projects/{s.project}/items/A1", headers=s.auth)
        assert r.status_code == 422, len(r.content)
        assert r.json()["error"] == "preview_failed" and "FIREFEED_PREVIEW_MAX_ANSWER_BYTES" in r.json()["message"]
        small = http.get(f"/api/projects/{s.project}/items/A2", headers=s.auth)
        assert small.status_code == 200 and len(small.json()["exports"]) == 8
    finally:
        monkeypatch.undo()
        reset_settings()


#: export names a URL path segment cannot carry as they are (any name is valid, docs/spec.md): a slash,
#: the characters that end a path (`?`, `#`), `%`, a trailing slash, and a dot segment
ODD_EXPORTS = ["google/de", "a?b#c%d e", "feeds/", "..", "x/file"]


@pytest.fixture(scope="module")
def odd(env: Path, api: str) -> Shop:
    """A project whose exports have the names of ODD_EXPORTS, applied over the API and run once."""
    s = Shop(env)
    s.doc["exports"] = [
        {"name": name, "format": "csv", "path": f"odd{i}.csv", "fields": {"id": "id", "p": "price"}}
        for i, name in enumerate(ODD_EXPORTS)
    ]
    with httpx.Client(base_url=api, timeout=30) as http:
        assert s.put(http).status_code == 201
    s.run()
    return s


def _export_url(s: Shop, name: str, tail: str) -> str:
    """The route's URL with the name as one encoded segment; a name of dots alone with its dots encoded too
    (as `.` and `..`, a client would remove them as dot segments)."""
    segment = quote(name, safe="")
    return f"/api/projects/{s.project}/exports/{segment.replace('.', '%2E') if not name.strip('.') else segment}/{tail}"


@pytest.mark.parametrize("name", ODD_EXPORTS)
def test_an_export_file_is_downloaded_whatever_the_exports_name(http: httpx.Client, odd: Shop, name: str) -> None:
    r = http.get(_export_url(odd, name, "file"), headers=odd.auth)
    assert r.status_code == 200, r.text
    assert r.text.splitlines()[0] == "id,p"


@pytest.mark.parametrize("name", ODD_EXPORTS)
def test_an_exports_findings_are_listed_whatever_its_name(http: httpx.Client, odd: Shop, name: str) -> None:
    r = http.get(_export_url(odd, name, "findings"), headers=odd.auth)
    assert r.status_code == 200, r.text
    assert r.json()["export"] == name


@pytest.mark.parametrize("name", ODD_EXPORTS)
def test_an_exports_feed_url_is_rotated_whatever_its_name(http: httpx.Client, odd: Shop, name: str) -> None:
    before = {
        f["export"]: f for f in http.get(f"/api/projects/{odd.project}/feed-urls", headers=odd.auth).json()["feed_urls"]
    }
    r = http.post(_export_url(odd, name, "feed-url/rotate"), headers=odd.auth)
    assert r.status_code == 200, r.text
    assert r.json()["export"] == name and r.json()["url"] != before[name]["url"]


@pytest.mark.parametrize("name", ODD_EXPORTS)
def test_an_exports_sync_is_reached_whatever_its_name(http: httpx.Client, odd: Shop, name: str) -> None:
    """These exports have no sync: the routes' own 404 names the export (the framework's names nothing)."""
    for r in (
        http.get(_export_url(odd, name, "sync"), headers=odd.auth),
        http.post(_export_url(odd, name, "sync/repair"), headers=odd.auth),
    ):
        assert r.status_code == 404, r.text
        assert f"export {name!r} of project {odd.project!r} has no sync" in r.json()["message"], r.text
