"""The items behind each channel finding (#49): `firefeed findings`, its API route and the page's links."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from firefeed.db.engine import get_engine, raw_connection
from firefeed.runs.tokens import TokenStore
from firefeed.schema.identifiers import checked_keys_table, company_schema, published_keys_table
from tests.integration.conftest import cli, new_company, run_json, write_csv
from tests.integration.test_web_page import WAIT_MS, browser  # noqa: F401

pytestmark = pytest.mark.integration

HEADER = [
    "id", "sku", "title", "description", "link", "image_link", "availability", "price", "gtin", "group", "color",
    "size", "condition",
]  # fmt: skip
GOOD_GTIN, BAD_GTIN = "4006381333931", "4006381333932"


def _item(n: int, **changes: str) -> list[str]:
    row = {
        "id": f"A{n}",
        "sku": f"S{n}",
        "title": f"Item {n}",
        "description": f"A good item number {n}",
        "link": f"https://shop.example.com/p/{n}",
        "image_link": f"https://cdn.example.com/{n}.jpg",
        "availability": "in stock",
        "price": "10.00 EUR",
        "gtin": GOOD_GTIN,
        "group": f"grp{n}",
        "color": "red",
        "size": "M",
        "condition": "new",
    }
    row.update(changes)
    return [row[h] for h in HEADER]


BROKEN = [
    _item(1),
    _item(2, gtin=BAD_GTIN),
    _item(3, price="0.00 EUR"),
    _item(4, sku="S1"),  # the channel id of A1
    _item(5, group="shirt"),
    _item(6, group="shirt"),  # the same variant as A5
    _item(7, title="A <b>bold</b> item", condition="mint"),
    _item(8, sku="", price="free"),  # no channel id: listed by its key
]
#: (key, check, attribute, severity, value) of every item behind BROKEN's findings, in export order
EXPECTED = [
    ("S2", "gtin", "gtin", "error", BAD_GTIN),
    ("S3", "price_value", "price", "error", "0.00 EUR"),
    ("S1", "duplicate_id", "id", "error", "S1"),
    ("S6", "variants", "item_group_id", "warning", None),
    ("S7", "html", "title", "warning", "A <b>bold</b> item"),
    ("S7", "value", "condition", "error", "mint"),
    ("A8", "missing", "id", "error", ""),
    ("A8", "price_format", "price", "error", "free"),
]


def _spec(tmp: Path, company: str, project: str, rows: list[list[str]], **google: Any) -> Path:
    write_csv(tmp / "main.csv", HEADER, rows)
    fields = {h: h for h in HEADER if h not in ("sku", "group")}
    fields.update({"id": "sku", "item_group_id": "group"})
    exports = [
        {"name": "google", "format": "google-xml", "path": "g.xml", "fields": fields, "max_invalid": 100, **google},
        {"name": "plain", "format": "csv", "path": "p.csv"},
        {"name": "meta", "format": "csv", "path": "m.csv", "channel": "meta", "max_invalid": 100},
    ]
    spec = {"company": company, "project": project, "sources": [{"name": "main", "url": "main.csv"}]}
    spec["exports"] = exports
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    return path


def _project(tmp: Path, rows: list[list[str]] = BROKEN, **google: Any) -> tuple[str, str, dict[str, Any]]:
    """(company, project, report) of a project whose one run has ended, the `google` export checked."""
    company, project = "fl_" + uuid.uuid4().hex[:10], "fl_" + uuid.uuid4().hex[:8]
    _, report = run_json(_spec(tmp, company, project, rows, **google))
    return company, project, report


def _rows(answer: dict[str, Any]) -> list[tuple[str, str, str, str, str | None]]:
    return [(i["key"], i["check"], i["attribute"], i["severity"], i["value"]) for i in answer["items"]]


def _findings(*args: str) -> tuple[int, Any]:
    code, out = cli("findings", *args, "--json")
    return code, json.loads(out) if out else None


def test_the_cli_lists_every_item_behind_each_finding_with_the_value_it_wrote_in_export_order(
    run_env: Path, tmp_path: Path
) -> None:
    _, project, report = _project(tmp_path)
    assert report["status"] == "SUCCEEDED", report["error"]
    code, answer = _findings(project, "google")
    assert code == 0
    assert _rows(answer) == EXPECTED
    assert (answer["export"], answer["source"], answer["run_id"]) == ("google", "published", report["run_id"])
    assert (answer["total"], answer["offset"], answer["limit"], answer["next_offset"]) == (8, 0, 100, None)
    # the messages are the report's, so an item reads as the finding it belongs to (the variant
    # attributes compared are the report's alone: the run table keeps their hash, not their names)
    google = next(e for e in report["exports"] if e["name"] == "google")
    messages = {(f["check"], f["attribute"]): f["message"] for f in google["diagnostics"]["findings"]}
    messages[("variants", "item_group_id")] = (
        "item_group_id: the same variant attributes as an earlier item of its group"
    )
    assert [i["message"] for i in answer["items"]] == [messages[(r[1], r[2])] for r in EXPECTED]
    # and every item the report counts is listed
    assert sum(f["count"] for f in google["diagnostics"]["findings"]) == len(EXPECTED)

    code, text = cli("findings", project, "google", "--check", "price_format")
    assert code == 0
    assert "google: 1 finding item(s) of the published file" in text
    line = next(x for x in text.splitlines() if x.strip().startswith("A8"))
    assert line.split()[:5] == ["A8", "error", "price_format", "price", "'free'"]
    assert "price: not '<number> <ISO 4217 code>'" in line


def test_the_cli_pages_and_without_an_export_groups_every_export_with_a_channel(run_env: Path, tmp_path: Path) -> None:
    _, project, _ = _project(tmp_path)
    code, answer = _findings(project, "--limit", "3", "--offset", "2")
    assert code == 0
    assert [e["export"] for e in answer["exports"]] == ["google", "meta"]  # `plain` has no channel
    google = answer["exports"][0]
    assert _rows(google) == EXPECTED[2:5]
    assert (google["total"], google["next_offset"]) == (8, 5)
    code, text = cli("findings", project, "--limit", "3", "--offset", "2")
    assert "more: --offset 5" in text
    code, answer = _findings(project, "google", "--offset", "8")
    assert (answer["items"], answer["total"], answer["next_offset"]) == ([], 8, None)

    assert cli("findings", project, "google", "--check", "colour")[0] == 2
    assert cli("findings", project, "google", "--limit", "1001")[0] == 2
    assert cli("findings", project, "nope")[0] == 4
    assert cli("findings", "fl_nobody_" + uuid.uuid4().hex[:6])[0] == 4
    code, answer = _findings(project, "plain")
    assert (code, answer["items"], answer["source"]) == (0, [], None)
    assert "has no channel" in answer["reason"]


def test_an_export_never_checked_lists_nothing_and_says_why(run_env: Path, tmp_path: Path) -> None:
    company, project = "fl_" + uuid.uuid4().hex[:10], "fl_" + uuid.uuid4().hex[:8]
    assert cli("apply", str(_spec(tmp_path, company, project, BROKEN)))[0] == 0
    code, answer = _findings(project, "google")
    assert (code, answer["total"], answer["items"], answer["run_id"]) == (0, 0, [], None)
    assert "has not been published or checked yet" in answer["reason"]


def test_the_api_pages_filters_and_refuses_unknown_checks_exports_and_other_companies(
    run_env: Path, tmp_path: Path, http: httpx.Client
) -> None:
    company, project, report = _project(tmp_path)
    auth = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    path = f"/api/projects/{project}/exports/google/findings"
    whole = http.get(path, headers=auth)
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert _rows(body) == EXPECTED
    assert set(body) == {"export", "run_id", "source", "total", "offset", "limit", "next_offset", "items", "reason"}
    assert body["run_id"] == report["run_id"]
    # the CLI's --json is the same answer
    assert _findings(project, "google")[1] == body

    seen: list[tuple[str, str, str, str, str | None]] = []
    offset: int | None = 0
    while offset is not None:
        page = http.get(path, headers=auth, params={"offset": offset, "limit": 3}).json()
        assert page["limit"] == 3 and len(page["items"]) <= 3
        seen += _rows(page)
        offset = page["next_offset"]
    assert seen == EXPECTED

    errors = http.get(path, headers=auth, params={"check": "value"}).json()
    assert _rows(errors) == [("S7", "value", "condition", "error", "mint")]
    assert (errors["total"], errors["next_offset"]) == (1, None)
    assert _rows(http.get(path, headers=auth, params={"check": "duplicate_id"}).json()) == [EXPECTED[2]]
    assert _rows(http.get(path, headers=auth, params={"check": "url"}).json()) == []

    bad = http.get(path, headers=auth, params={"check": "colour"})
    assert bad.status_code == 422
    assert bad.json()["path"] == "check"
    assert "'colour'" in bad.json()["message"] and "duplicate_id" in bad.json()["message"]
    assert http.get(path, headers=auth, params={"limit": 1001}).status_code == 422
    assert http.get(path, headers=auth, params={"offset": -1}).status_code == 422
    assert http.get(path, headers=auth, params={"offset": 2**63}).status_code == 422  # past a bigint: not a 500
    unknown = http.get(f"/api/projects/{project}/exports/nope/findings", headers=auth)
    assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
    assert (
        http.get(f"/api/projects/nobody_{uuid.uuid4().hex[:6]}/exports/google/findings", headers=auth).status_code
        == 404
    )
    _, other = new_company("fl_other_")
    stranger = http.get(path, headers=other)
    assert (stranger.status_code, stranger.json()["error"]) == (404, "not_found")
    assert company not in stranger.text
    assert http.get(path).status_code == 401


def test_a_run_blocked_by_fail_on_error_lists_its_own_items_until_a_publish_replaces_them(
    run_env: Path, tmp_path: Path
) -> None:
    clean = [_item(1), _item(2)]
    company, project, first = _project(tmp_path, clean, fail_on="error")
    assert first["status"] == "SUCCEEDED", first["error"]
    assert _findings(project, "google")[1]["total"] == 0

    spec = _spec(tmp_path, company, project, [_item(1), _item(2, gtin=BAD_GTIN)], fail_on="error")
    code, blocked = run_json(spec)
    assert (code, blocked["status"]) == (1, "FAILED")
    answer = _findings(project, "google")[1]
    assert (answer["source"], answer["run_id"]) == ("blocked", blocked["run_id"])
    assert _rows(answer) == [("S2", "gtin", "gtin", "error", BAD_GTIN)]
    # the published file is still the first run's: its table is there, but the blocked run's is read
    schema = company_schema(company)
    assert _tables(schema) >= {published_keys_table(project, "google"), checked_keys_table(project, "google")}

    code, fixed = run_json(_spec(tmp_path, company, project, [_item(1), _item(2, title="Tom &amp; Jerry")]))
    assert fixed["status"] == "SUCCEEDED", fixed["error"]
    answer = _findings(project, "google")[1]
    assert (answer["source"], answer["run_id"]) == ("published", fixed["run_id"])
    assert _rows(answer) == [("S2", "html", "title", "warning", "Tom &amp; Jerry")]


def _tables(schema: str) -> set[str]:
    with raw_connection(get_engine()) as conn, conn.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
        return {r[0] for r in cur.fetchall()}


def test_the_page_links_each_finding_to_the_items_behind_it(
    browser: object,  # noqa: F811
    run_env: Path,
    tmp_path: Path,
) -> None:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    company, project, report = _project(tmp_path)
    token = TokenStore().create(company)
    with ServerThread(create_app()) as base_url:
        page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
        page.goto(base_url + "/")
        page.fill("#token-input", token)
        page.click("#login-form button[type=submit]")
        page.wait_for_selector(".findings[data-export=google] .finding-items-link", timeout=WAIT_MS)
        links = page.locator(".findings[data-export=google] .finding-items-link")
        hrefs = [links.nth(n).get_attribute("href") for n in range(links.count())]
        google = next(e for e in report["exports"] if e["name"] == "google")
        checks = [f["check"] for f in google["diagnostics"]["findings"]]
        assert hrefs == [f"/api/projects/{project}/exports/google/findings?check={c}" for c in checks]
        row = page.locator(".findings[data-export=google] tbody tr", has_text="price_value")
        row.locator(".finding-items-link").click()
        page.wait_for_selector("#finding-items-table tbody tr", timeout=WAIT_MS)
        cells = page.locator("#finding-items-table tbody tr td").all_text_contents()
        assert cells == ["S3", "error", "price_value", "price", "0.00 EUR", "price: 0 or negative"]
        assert "1 item(s) of the published file" in (page.text_content("#finding-items-summary") or "")
        assert page.locator("#finding-items-more").is_hidden()
        # a value is shown as text, never as markup
        page.locator(".findings[data-export=google] tbody tr", has_text="html").locator(".finding-items-link").click()
        page.wait_for_selector("#finding-items-table tbody tr[data-key=S7]", timeout=WAIT_MS)
        assert "A <b>bold</b> item" in page.locator("#finding-items-table tbody tr").all_text_contents()[0]
        assert page.locator("#finding-items b").count() == 0


def test_a_read_that_waits_past_the_deadline_answers_504_and_the_next_one_reads_again(
    run_env: Path, tmp_path: Path, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.config import reset_settings

    company, project, _ = _project(tmp_path)
    auth = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    path = f"/api/projects/{project}/exports/google/findings"
    monkeypatch.setenv("FIREFEED_VALUES_DEADLINE_S", "0.5")
    reset_settings()
    table = f'"{company_schema(company)}"."{published_keys_table(project, "google")}"'
    with raw_connection(get_engine()) as conn, conn.cursor() as cur:
        cur.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # as a publish's rename holds it
        late = http.get(path, headers=auth)
        conn.rollback()
    assert (late.status_code, late.json()["error"]) == (504, "values_timeout")
    assert "FIREFEED_VALUES_DEADLINE_S=0.5 s" in late.json()["message"]
    assert http.get(path, headers=auth).json()["total"] == len(EXPECTED)
