"""Rule preview (`firefeed preview`, POST /api/projects/{id}/preview) on small fixed feeds and the real Postgres."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.config import reset_settings
from firefeed.db.engine import raw_connection
from firefeed.runs.maintenance import SCRATCH_AREA_MAX_AGE_S, drop_orphan_tmp_tables
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import company_schema, ident, scratch_area
from firefeed.schema.service import SchemaService
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, read_csv, write_csv
from tests.integration.test_api import new_company
from tests.integration.test_web_page import ARTIFACTS, browser  # noqa: F401 (a fixture)
from tests.unit.test_fetch import FeedServer, body, status

pytestmark = pytest.mark.integration

RULES: list[dict[str, Any]] = [
    {
        "name": "out of stock",
        "when": {"field": "quantity", "op": "lte", "value": "0"},
        "then": [{"set": "availability", "value": "out of stock"}],
        "else": [{"set": "availability", "value": "in stock"}],
    },
    {"name": "drop tests", "when": {"field": "title", "op": "contains", "value": "test"}, "then": [{"exclude": True}]},
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {
        "name": "brand in title",
        "when": {"field": "brand", "op": "not_empty"},
        "then": [{"set": "title", "value": "{brand} {title}"}],
    },
    {"name": "switched off", "enabled": False, "then": [{"set": "title", "value": "never"}]},
    {"name": "keep branded", "when": {"field": "brand", "op": "not_empty"}, "else": [{"exclude": True}]},
]


def make_project(folder: Path, company: str, project: str | None = None) -> Path:
    """A spec file with a primary, an enrich source (quantity only) and an append source, and the six rules."""
    project = project or "pv_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity", "brand"],
        [
            ["A1", "Runner test", "10.00", "0", "Acme"],
            ["A2", "Boot", "19,99 EUR", "4", "Zeta"],
            ["A3", "Hat", "5", "0", ""],
            ["A4", "Sock", "3", "9", "Acme"],
        ],
    )
    write_csv(folder / "stock.csv", ["id", "quantity", "title"], [["A2", "0", "not taken"], ["A4", "12", "x"]])
    write_csv(folder / "extra.csv", ["id", "title", "price", "brand"], [["N1", "New thing", "7", "Acme"]])
    spec = {
        "company": company,
        "project": project,
        "sources": [
            {"name": "main", "url": "main.csv"},
            {"name": "stock", "url": "stock.csv", "mode": "enrich", "fields": ["quantity"]},
            {"name": "extra", "url": "extra.csv", "mode": "append"},
        ],
        "rules": RULES,
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def preview_json(*args: str) -> dict[str, Any]:
    code, out = cli("preview", *args, "--json")
    assert code == 0, out
    result: dict[str, Any] = json.loads(out)
    return result


def changes(item: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(r["rule"], c["field"], c["before"], c["after"]) for r in item["rules"] for c in r["changes"]]


def test_a_preview_counts_each_rule_and_shows_every_change_before_and_after(run_env: Path, tmp_path: Path) -> None:
    spec = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    result = preview_json(str(spec), "--items", "4")

    assert result["sample"] == {"items": 4, "ids": None, "missing_ids": []}
    assert result["fields"] == ["id", "title", "price", "quantity", "brand", "availability"]
    assert [(s["name"], s["rows_read"], s["rows_kept"]) for s in result["sources"]] == [
        ("main", 4, 4),
        ("stock", 2, 2),
        ("extra", 1, 0),  # N1 is not among the primary's first four items
    ]
    summary = {
        r["rule"]: (r["items_in"], r["matched"], r["not_matched"], r["changed"], r["excluded"]) for r in result["rules"]
    }
    assert summary == {
        "out of stock": (4, 3, 1, 4, 0),
        "drop tests": (4, 1, 3, 0, 1),
        "vat": (3, 3, 0, 3, 0),
        "brand in title": (3, 2, 1, 2, 0),
        "switched off": (0, 0, 0, 0, 0),
        "keep branded": (3, 2, 1, 0, 1),
    }
    assert [r["enabled"] for r in result["rules"]] == [True, True, True, True, False, True]

    items = {i["key"]: i for i in result["items"]}
    assert list(items) == ["A1", "A2", "A3", "A4"]
    assert items["A1"]["excluded_by"] == "drop tests"
    assert changes(items["A1"]) == [("out of stock", "availability", "", "out of stock")]
    assert [(r["rule"], r["matched"], r["excluded"]) for r in items["A1"]["rules"]] == [
        ("out of stock", True, False),
        ("drop tests", True, True),
    ]
    # A2's quantity 0 came from the stock source; its price keeps the text around the number.
    assert items["A2"]["excluded_by"] is None
    assert changes(items["A2"]) == [
        ("out of stock", "availability", "", "out of stock"),
        ("vat", "price", "19,99 EUR", "24.39 EUR"),
        ("brand in title", "title", "Boot", "Zeta Boot"),
    ]
    assert items["A3"]["excluded_by"] == "keep branded"
    assert [(r["rule"], r["matched"], r["excluded"]) for r in items["A3"]["rules"]][-1] == (
        "keep branded",
        False,
        True,
    )
    assert changes(items["A3"]) == [
        ("out of stock", "availability", "", "out of stock"),
        ("vat", "price", "5", "6.10"),
    ]
    assert changes(items["A4"]) == [
        ("out of stock", "availability", "", "in stock"),
        ("vat", "price", "3", "3.66"),
        ("brand in title", "title", "Sock", "Acme Sock"),
    ]
    assert all(i["source"] == "main" for i in items.values())

    code, table = cli("preview", str(spec), "--items", "4")
    assert code == 0
    assert "vat: price '19,99 EUR' -> '24.39 EUR'" in table
    assert "excluded by 'keep branded'" in table
    assert "switched off                    (disabled)" in table


def test_the_first_n_items_stop_reading_the_primary_early(run_env: Path, tmp_path: Path) -> None:
    spec = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    result = preview_json(str(spec), "--items", "2")
    assert [i["key"] for i in result["items"]] == ["A1", "A2"]
    assert [(s["name"], s["rows_read"], s["rows_kept"]) for s in result["sources"]] == [
        ("main", 2, 2),
        ("stock", 2, 1),
        ("extra", 1, 0),
    ]
    assert {r["rule"]: r["items_in"] for r in result["rules"]}["vat"] == 1


def test_item_ids_choose_the_sample_with_appended_items_and_name_the_missing_ones(
    run_env: Path, tmp_path: Path
) -> None:
    spec = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    result = preview_json(str(spec), "--item", "nope", "--item", " N1 ", "--item", "A4")

    assert result["sample"] == {"items": None, "ids": ["nope", "N1", "A4"], "missing_ids": ["nope"]}
    # Feed order, not request order: the primary's items, then the appended ones.
    assert [(i["key"], i["source"]) for i in result["items"]] == [("A4", "main"), ("N1", "extra")]
    assert [(s["name"], s["rows_kept"]) for s in result["sources"]] == [("main", 1), ("stock", 1), ("extra", 1)]
    n1 = result["items"][1]
    assert changes(n1) == [
        ("out of stock", "availability", "", "in stock"),  # no quantity: no number, so not <= 0
        ("vat", "price", "7", "8.54"),
        ("brand in title", "title", "New thing", "Acme New thing"),
    ]
    assert n1["excluded_by"] is None


def test_the_preview_counts_are_the_ones_a_real_run_reports(run_env: Path, tmp_path: Path) -> None:
    spec = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    preview = preview_json(str(spec), "--item", "A1", "--item", "A2", "--item", "A3", "--item", "A4", "--item", "N1")
    code, out = cli("run", str(spec), "--json")
    assert code == 0, out
    report = json.loads(out)

    enabled = {r["rule"]: r["matched"] for r in preview["rules"] if r["enabled"]}
    assert enabled == report["rules"]["matched"]
    assert sum(r["excluded"] for r in preview["rules"]) == report["rules"]["excluded"]
    _, rows = read_csv(run_env / report["exports"][0]["path"])
    assert [r[0] for r in rows] == [i["key"] for i in preview["items"] if i["excluded_by"] is None]


def test_the_preview_gives_the_warnings_a_run_gives_in_its_json_and_its_table(run_env: Path, tmp_path: Path) -> None:
    """A misspelled field in a rule and a field name where a text was meant in an export's `fields` are seen
    before the first run: the preview lists the same warnings as the run's report."""
    spec_path = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    spec["rules"].append({"name": "typo", "when": {"field": "quantty", "op": "eq", "value": "0"}, "then": []})
    spec["exports"][0]["fields"] = {"id": "id", "shipping.country": "US", "shipping.price": "{price} EUR"}
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    preview = preview_json(str(spec_path))
    code, out = cli("run", str(spec_path), "--json")
    assert code == 0, out
    report = json.loads(out)
    ours = [w for w in report["warnings"] if "no source has" in w]
    assert len(ours) == 2 and preview["warnings"] == ours
    assert ours[0].startswith("rules[6] ('typo') reads 'quantty'")
    assert ours[1].startswith("exports[0] ('csv') reads fields that no source has and no rule sets: 'US'")
    code, table = cli("preview", str(spec_path))
    assert code == 0 and f"  warning: {ours[1]}" in table.splitlines()


def test_a_json_sources_field_past_the_sample_is_warned_about_as_maybe_the_samples(
    run_env: Path, tmp_path: Path
) -> None:
    """A JSON source's fields are those of the items read: a field only later items have is not in a
    preview's sample, so its warning says so, and the run, which reads every item, gives none."""
    items = [{"id": f"J{i}", "title": f"t{i}", **({"sale_price": "5"} if i == 25 else {})} for i in range(30)]
    (tmp_path / "items.json").write_text(json.dumps(items), encoding="utf-8")
    spec = {
        "company": "pv_" + uuid.uuid4().hex[:8],
        "project": "pv_" + uuid.uuid4().hex[:10],
        "sources": [{"name": "api", "url": "items.json"}],
        "rules": [{"name": "sale", "when": {"field": "sale_price", "op": "not_empty"},
                   "then": [{"set": "custom_label_0", "value": "sale"}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }  # fmt: skip
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    (warning,) = preview_json(str(path), "--items", "5")["warnings"]
    assert warning.startswith("rules[0] ('sale') reads 'sale_price', which no source has")
    assert warning.endswith(
        "(the preview read only the sample of a JSON or XML source: its later items may have the field)"
    )
    code, out = cli("run", str(path), "--json")
    assert code == 0, out
    assert not [w for w in json.loads(out).get("warnings", []) if "no source has" in w]


def _table_digests(engine: Engine, schema: str) -> dict[str, str]:
    """Every table of a schema and an md5 of all its rows (in a stable order)."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))
        tables = [r[0] for r in cur.fetchall()]
        out = {}
        for table in tables:
            cur.execute(
                sql.SQL(
                    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {} t"
                ).format(ident(schema, table))
            )
            n, digest = cur.fetchone()
            out[table] = f"{n}:{digest}"
        return out


def _schemas(engine: Engine) -> list[str]:
    """The database's schemas, without Postgres' per-connection temp schemas (any new connection may add one)."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_(toast_)?temp_' ORDER BY 1")
        return [r[0] for r in cur.fetchall()]


def _files(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_preview_leaves_the_projects_tables_runs_and_exports_exactly_as_they_were(
    run_env: Path, tmp_path: Path, engine: Engine, base_url: str
) -> None:
    company, auth = new_company()
    spec = make_project(tmp_path / "p", company)
    code, out = cli("run", str(spec), "--json")
    assert code == 0, out
    project = json.loads(out)["project"]
    # An active run does not stop a preview: no lock is taken.
    pending = RunStore().request_run(project, "cli")

    def snapshot() -> Any:
        return (
            _table_digests(engine, company_schema(company)),
            # The token's `last_used_at` is the API's bookkeeping of who called it, not the project's state.
            {t: d for t, d in _table_digests(engine, "public").items() if t != "api_tokens"},
            _schemas(engine),
            _files(run_env),
        )

    before = snapshot()
    assert before[0] and before[3], "the project has tables and exports to protect"
    preview_json(str(spec), "--items", "3")
    preview_json(project, "--item", "A2")  # the stored spec
    with httpx.Client(base_url=base_url, timeout=30) as http:
        r = http.post(f"/api/projects/{project}/preview?items=2", headers=auth)
        assert r.status_code == 200, r.text
    assert snapshot() == before
    previews = tmp_path / "var" / "previews"  # FIREFEED_DATA_DIR of run_env: the downloads are gone too
    assert not previews.exists() or not any(previews.iterdir())
    RunStore().request_cancel(pending)


def test_the_api_previews_the_stored_spec_or_a_sent_one_for_its_own_company_only(
    run_env: Path, tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    company, auth = new_company()
    other, other_auth = new_company()
    spec_path = make_project(tmp_path / "p", company)
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    project = spec["project"]
    RunStore().apply_spec(parse_spec(spec), spec_dir=spec_path.parent)
    # Sent specs have no folder: their local files must be in the company's folder under the root.
    root = tmp_path / "root"
    (root / company).mkdir(parents=True)
    for name in ("main.csv", "stock.csv", "extra.csv"):
        (root / company / name).write_bytes((spec_path.parent / name).read_bytes())
    (root / other).mkdir()
    monkeypatch.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root))
    reset_settings()

    with httpx.Client(base_url=base_url, timeout=30) as http:
        stored = http.post(f"/api/projects/{project}/preview", headers=auth, params={"item": ["A2", "zz"]})
        assert stored.status_code == 200, stored.text
        body = stored.json()
        assert [i["key"] for i in body["items"]] == ["A2"]
        assert body["sample"]["missing_ids"] == ["zz"]
        assert changes(body["items"][0])[1] == ("vat", "price", "19,99 EUR", "24.39 EUR")

        # A sent spec (YAML here) is previewed instead of the stored one: its single rule only.
        draft = dict(spec, rules=[{"name": "shout", "then": [{"uppercase": "title"}]}])
        sent = http.post(
            f"/api/projects/{project}/preview?items=1",
            headers={**auth, "Content-Type": "application/yaml"},
            content=yaml.safe_dump(draft),
        )
        assert sent.status_code == 200, sent.text
        assert [(r["rule"], r["changed"]) for r in sent.json()["rules"]] == [("shout", 1)]
        assert changes(sent.json()["items"][0]) == [("shout", "title", "Runner test", "RUNNER TEST")]

        # A draft of a project that does not exist yet can be previewed too.
        new = dict(draft, project="draft_" + uuid.uuid4().hex[:8])
        r = http.post(f"/api/projects/{new['project']}/preview", headers=auth, json=new)
        assert r.status_code == 200, r.text

        # Another company's token: 404 with or without a spec, as if the project did not exist.
        for content in (b"", json.dumps(dict(spec, company=other)).encode()):
            r = http.post(f"/api/projects/{project}/preview", headers=other_auth, content=content)
            assert (r.status_code, r.json()["error"]) == (404, "not_found"), r.text
        r = http.post("/api/projects/no_such_project/preview", headers=auth)
        assert (r.status_code, r.json()["error"]) == (404, "not_found")
        r = http.post(f"/api/projects/{project}/preview", headers={})
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized")

        # Bad input: a bad spec names its key, a spec of another company or bad query values are refused.
        bad = dict(spec, rules=[{"name": "x", "then": [{"math": "price", "op": "pow", "value": "2"}]}])
        r = http.post(f"/api/projects/{project}/preview", headers=auth, json=bad)
        assert (r.status_code, r.json()["error"], r.json()["path"]) == (422, "spec_error", "rules[0].then[0].op")
        r = http.post(f"/api/projects/{project}/preview", headers=auth, json=dict(spec, company=other))
        assert (r.status_code, r.json()["path"]) == (422, "company")
        for query in ("items=0", "items=1001", "item=%20", "items=2&item=A1"):
            r = http.post(f"/api/projects/{project}/preview?{query}", headers=auth)
            assert (r.status_code, r.json()["error"]) == (422, "invalid_request"), query

        # The run's fetch rules hold: a file outside the company's folder, a private address.
        escape = dict(spec, sources=[{"name": "main", "url": f"../{other}/main.csv"}])
        r = http.post(f"/api/projects/{project}/preview", headers=auth, json=escape)
        assert (r.status_code, r.json()["error"]) == (422, "unsafe_path"), r.text
        private = dict(spec, sources=[{"name": "main", "url": "http://127.0.0.1:9/feed.csv"}])
        r = http.post(f"/api/projects/{project}/preview", headers=auth, json=private)
        assert (r.status_code, r.json()["error"], r.json()["source"]) == (422, "unsafe_url", "main"), r.text
        # A lookup table is fetched under the same rules, and the refusal names the lookup, as a run's does.
        lookup = dict(spec, lookups=[{"name": "cats", "url": "http://169.254.169.254/cats.csv", "key": "k"}])
        r = http.post(f"/api/projects/{project}/preview", headers=auth, json=lookup)
        body = r.json()
        assert (r.status_code, body["error"], body["source"]) == (422, "unsafe_url", "cats"), r.text
        assert body["message"].startswith("lookup 'cats': address 169.254.169.254 is a non-public address"), body
    reset_settings()


def test_a_bad_spec_exits_2_naming_the_key_and_an_unknown_project_exits_4(
    run_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["rules"][1]["when"]["op"] = "resembles"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert cli("preview", str(spec))[0] == 2
    assert "rules[1].when.op" in capsys.readouterr().err
    assert cli("preview", str(tmp_path / "missing.yaml"))[0] == 2
    assert cli("preview", "no_such_project_" + uuid.uuid4().hex[:6])[0] == 4
    doc["rules"][1]["when"]["op"] = "contains"
    doc["sources"][0]["url"] = "nowhere.csv"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    assert cli("preview", str(spec))[0] == 1
    assert "no such file" in capsys.readouterr().err


def test_the_janitor_drops_a_crashed_previews_scratch_area_and_keeps_a_fresh_one(engine: Engine) -> None:
    service = SchemaService(engine)
    stale = scratch_area(int(time.time() - SCRATCH_AREA_MAX_AGE_S - 60), uuid.uuid4().hex[:16])
    fresh = scratch_area(int(time.time()), uuid.uuid4().hex[:16])
    for area in (stale, fresh):
        service.create_scratch_area(area)
        service.create_project_table(area, "items_x")
    drop_orphan_tmp_tables(engine)
    schemas = _schemas(engine)
    assert company_schema(stale) not in schemas
    assert company_schema(fresh) in schemas
    service.drop_scratch_area(fresh)
    assert company_schema(fresh) not in _schemas(engine)
    with pytest.raises(ValueError, match="not a scratch area"):
        service.drop_scratch_area("acme")


def test_the_web_page_previews_the_selected_projects_rules(
    browser: Any,  # noqa: F811 (the fixture imported from test_web_page)
    run_env: Path,
    tmp_path: Path,
    base_url: str,
) -> None:
    company, auth = new_company()
    spec_path = make_project(tmp_path / "p", company)
    doc = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    # SPEC 9: an export with rules of its own, which the page shows after the project's
    label = {"name": "channel <label>", "then": [{"set": "custom_label_0", "value": "web"}]}
    doc["exports"].append({"name": "shop <feed>", "format": "csv", "path": "shop.csv", "rules": [label]})
    # A field name where a text was meant: the preview warns, and the page shows the name as text.
    doc["exports"][1]["fields"] = {"id": "id", "label": "custom_label_0", "country": "<b>US</b>"}
    RunStore().apply_spec(parse_spec(doc), spec_dir=spec_path.parent)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.goto(base_url + "/")
    page.fill("#token-input", auth["Authorization"].removeprefix("Bearer "))
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#project-pane:not([hidden])", timeout=15_000)
    assert page.locator("#preview").is_hidden()

    page.click("#preview-rules")
    page.wait_for_selector("#preview-items tbody tr", timeout=15_000)
    cells = page.locator('#preview-rules-table tr[data-rule="vat"] td').all_text_contents()
    assert cells == ["vat", "3", "3", "0", "3", "0"]
    assert page.locator('#preview-rules-table tr[data-rule="switched off"] td').all_text_contents() == [
        "switched off",
        "disabled",
    ]
    a2 = page.locator('#preview-items tr[data-item="A2"]').all_inner_texts()
    assert [row.split("\t")[1:] for row in a2] == [
        ["out of stock", "availability", "", "out of stock"],
        ["vat", "price", "19,99 EUR", "24.39 EUR"],
        ["brand in title", "title", "Boot", "Zeta Boot"],
    ]
    assert "excluded by drop tests" in " ".join(page.locator('#preview-items tr[data-item="A1"]').all_inner_texts())
    assert page.text_content("#preview-summary", timeout=1000).startswith("4 item(s)")
    (warning,) = page.locator("#preview-warnings li").all_inner_texts()
    assert warning.startswith("warning: exports[1] ('shop <feed>') reads fields that no source has")
    assert "'<b>US</b>' (fields.country)" in warning and page.locator("#preview-warnings b").count() == 0
    channel = page.locator('#preview-exports section[data-export="shop <feed>"]')
    assert channel.locator("h4").inner_text() == "Export shop <feed>: its own rules, after the project's"
    assert channel.locator('.preview-export-rules tr[data-rule="channel <label>"] td').all_text_contents() == [
        "channel <label>",
        "2",
        "2",
        "0",
        "2",
        "0",
    ]
    rows = channel.locator('.preview-export-items tr[data-item="A2"]').all_inner_texts()
    assert [row.split("\t")[1:] for row in rows] == [["channel <label>", "custom_label_0", "", "web"]]
    # what the project's rules kept: A1 and A3 are excluded before the export's rules run
    assert channel.locator(".preview-export-items tbody tr").evaluate_all("rs => rs.map(r => r.dataset.item)") == [
        "A2",
        "A4",
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-page-preview.png"), full_page=True)
    assert console_errors == []


def test_an_http_source_is_previewed_and_a_failing_server_is_tried_twice_then_502(
    run_env: Path, tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("FIREFEED_FETCH_BACKOFF_S", "0.01")
    reset_settings()
    company, auth = new_company()
    spec = yaml.safe_load(make_project(tmp_path / "p", company).read_text(encoding="utf-8"))
    feed = (tmp_path / "p" / "main.csv").read_bytes()
    server = FeedServer()
    try:
        server.routes["/main.csv"] = body(feed)
        server.routes["/down.csv"] = status(503)
        spec["sources"] = [{"name": "main", "url": server.url("/main.csv")}]
        with httpx.Client(base_url=base_url, timeout=30) as http:
            ok = http.post(f"/api/projects/{spec['project']}/preview?items=2", headers=auth, json=spec)
            assert ok.status_code == 200, ok.text
            assert [i["key"] for i in ok.json()["items"]] == ["A1", "A2"]
            assert ok.json()["sources"] == [
                {"name": "main", "bytes": len(feed), "rows_read": 2, "rows_kept": 2, "malformed": 0}
            ]

            spec["sources"] = [{"name": "main", "url": server.url("/down.csv")}]
            down = http.post(f"/api/projects/{spec['project']}/preview", headers=auth, json=spec)
        assert (down.status_code, down.json()["error"], down.json()["source"]) == (502, "fetch_error", "main")
        assert "HTTP 503" in down.json()["message"]
        assert server.hits["/down.csv"] == 2  # one retry, whatever FIREFEED_FETCH_RETRIES says (3)
    finally:
        server.close()
        reset_settings()


def test_a_fetch_the_spec_got_wrong_is_a_422_with_a_stable_code_and_only_a_failing_server_a_502(
    run_env: Path, tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same kind of refusal gets one code: a redirect FireFeed will not follow is `unsafe_url` as a
    private address is, a request the spec describes that cannot be sent is `invalid_source_request`."""
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")  # the test server is on 127.0.0.1
    monkeypatch.setenv("FIREFEED_FETCH_BACKOFF_S", "0.01")
    reset_settings()
    company, auth = new_company()
    spec = yaml.safe_load(make_project(tmp_path / "p", company).read_text(encoding="utf-8"))
    server = FeedServer()
    try:
        server.routes["/main.csv"] = body((tmp_path / "p" / "main.csv").read_bytes())
        server.routes["/to-file.csv"] = status(302, Location="file:///etc/passwd")
        server.routes["/to-octal.csv"] = status(302, Location=f"http://0177.0.0.1:{server.port}/main.csv")
        server.routes["/down.csv"] = status(503)
        ok = {"name": "main", "url": server.url("/main.csv")}
        cases: list[tuple[dict[str, Any], str]] = [
            ({"name": "main", "url": f"http://0177.0.0.1:{server.port}/main.csv"}, "unsafe_url"),
            ({"name": "main", "url": f"http://\uff11\uff12\uff17.0.0.1:{server.port}/main.csv"}, "unsafe_url"),
            ({"name": "main", "url": server.url("/to-file.csv")}, "unsafe_url"),
            ({"name": "main", "url": server.url("/to-octal.csv")}, "unsafe_url"),
            ({"name": "main", "url": "http://999.0.0.1/main.csv"}, "invalid_source_request"),
            ({"name": "main", "url": "http:///main.csv"}, "invalid_source_request"),
            ({"name": "main", "url": "   ", "format": "csv"}, "invalid_source_request"),
        ]
        with httpx.Client(base_url=base_url, timeout=30) as http:
            for source, code in cases:
                r = http.post(
                    f"/api/projects/{spec['project']}/preview", headers=auth, json=dict(spec, sources=[source])
                )
                assert (r.status_code, r.json()["error"], r.json().get("source")) == (422, code, "main"), (
                    source,
                    r.text,
                )
            # A header the spec writes out is checked with the spec (a secret's value only at the fetch).
            for headers in ({"X-Key": "caf\u00e9"}, {"X-Key": "a\r\nX-Evil: 1"}, {"X Key": "a"}):
                r = http.post(
                    f"/api/projects/{spec['project']}/preview",
                    headers=auth,
                    json=dict(spec, sources=[dict(ok, headers=headers)]),
                )
                assert (r.status_code, r.json()["error"], r.json()["path"]) == (422, "spec_error", "sources[0].headers")
            down = http.post(
                f"/api/projects/{spec['project']}/preview",
                headers=auth,
                json=dict(spec, sources=[{"name": "main", "url": server.url("/down.csv")}]),
            )
        assert (down.status_code, down.json()["error"]) == (502, "fetch_error")
        assert server.hits["/main.csv"] == 0  # nothing the spec got wrong was sent, or followed
        assert (server.hits["/to-file.csv"], server.hits["/to-octal.csv"]) == (1, 1)  # a refusal is not retried
    finally:
        server.close()
        reset_settings()


def test_a_run_whose_source_request_is_invalid_fails_fetch_naming_the_source(
    run_env: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    spec["sources"][0] = {"name": "main", "url": "http://0177.0.0.1/main.csv"}
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    code, out = cli("run", str(spec_path), "--json")
    assert code == 1, out  # as for every source error (EXIT_FAILED)
    error = json.loads(out)["error"]
    assert (error["step"], error["type"]) == ("FETCH", "UnsafeURLError"), error
    assert error["message"].startswith("source 'main': host '0177.0.0.1' spells the non-public address 127.0.0.1")


def test_a_statement_the_database_refuses_is_a_preview_error_with_its_message(
    run_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """Not a traceback (CLI) or a bare 500 (API): a database on which nothing can be written (here a
    read-only default, as on a replica an operator pointed FireFeed at) refuses the scratch schema."""
    from sqlalchemy import create_engine

    from firefeed.errors import PreviewFailedError
    from firefeed.preview.service import preview_spec
    from firefeed.spec.loader import load_spec_file

    spec_path = make_project(tmp_path / "p", "pv_" + uuid.uuid4().hex[:8])
    read_only = create_engine(engine.url.update_query_dict({"options": "-c default_transaction_read_only=on"}))
    try:
        with pytest.raises(PreviewFailedError) as err:
            preview_spec(load_spec_file(spec_path), spec_dir=spec_path.parent, engine=read_only)
    finally:
        read_only.dispose()
    assert err.value.message.startswith("the database refused the preview: ERROR:  cannot execute CREATE SCHEMA")
    assert "read-only transaction" in err.value.message
