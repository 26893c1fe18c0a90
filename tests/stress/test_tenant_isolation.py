"""Company A can never read, run, cancel, preview or export company B's data, by any path.

Three doors: A's API token (every route with a project or run id, taken from the live
OpenAPI schema so a new route is covered the day it appears), A's spec (local files under
B's folder of FIREFEED_LOCAL_SOURCES_ROOT, export paths into B's folder, field names
written as SQL aimed at B's schema), and A's processes rows (every registered function
given B's ids). Each refusal is checked against a positive control: A's own data works.
tests/integration/test_api.py and test_processes.py hold the single-route versions.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from firefeed.api.app import create_app
from firefeed.api.serve import ServerThread
from firefeed.config import get_settings, reset_settings
from firefeed.db.engine import raw_connection
from firefeed.pipeline.run import execute_run
from firefeed.processes.registry import RUNNABLES
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.schema.identifiers import company_schema
from firefeed.spec.loader import parse_spec
from tests.integration import conftest as integration
from tests.integration import test_processes as processes
from tests.integration.conftest import write_csv
from tests.integration.test_processes import insert, row

SECRET = "B-TOP-SECRET"

# Fixtures shared with the integration tests.
run_env = integration.run_env
make_worker = processes.make_worker


@dataclass
class Tenants:
    base_url: str
    a: str
    b: str
    a_auth: dict[str, str]
    b_auth: dict[str, str]
    sources_root: Path
    b_project: str
    b_run: str


def _spec(company: str, project: str, url: str, **export: str) -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": url, "format": "csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": export.get("path", "out.csv")}],
    }


@pytest.fixture()
def tenants(
    run_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Tenants]:
    """Companies A and B behind one server; B has local files, a finished run with an export, and a pending run."""
    root = tmp_path / "sources"
    monkeypatch.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root))
    reset_settings()
    a, b = "tenant_a_" + uuid.uuid4().hex[:6], "tenant_b_" + uuid.uuid4().hex[:6]
    (root / a).mkdir(parents=True)
    (root / b).mkdir(parents=True)
    write_csv(root / a / "mine.csv", ["id", "title"], [["A1", "A's shoe"]])
    write_csv(root / b / "secret.csv", ["id", "title"], [["B1", SECRET]])
    tokens = TokenStore()
    a_auth = {"Authorization": f"Bearer {tokens.create(a)}"}
    b_auth = {"Authorization": f"Bearer {tokens.create(b)}"}
    with ServerThread(create_app()) as base_url, httpx.Client(base_url=base_url, timeout=30) as http:
        b_project = "bproj_" + uuid.uuid4().hex[:8]
        put = http.put(f"/api/projects/{b_project}", headers=b_auth, json=_spec(b, b_project, "secret.csv"))
        assert put.status_code == 201, put.text
        store = RunStore()
        finished = store.request_run(b_project, "cli")
        execute_run(finished)
        assert store.run(finished).status == "SUCCEEDED", build_report(store, finished)["error"]
        pending = http.post(f"/api/projects/{b_project}/pipeline/run", headers=b_auth).json()["run_id"]
        yield Tenants(base_url, a, b, a_auth, b_auth, root, b_project, pending)
        store.request_cancel(pending)
    reset_settings()


def _b_state(t: Tenants) -> dict[str, Any]:
    """Everything of B's that A must not change: its spec, its runs and their states, its export's bytes."""
    store = RunStore()
    runs = [(str(r.id), r.status, bool(r.cancel_requested)) for r in store.runs_of_project(t.b_project, 100)]
    export = next(
        (get_settings().export_dir / e["path"] for r in runs for e in build_report(store, r[0])["exports"]), None
    )
    return {
        "spec": dict(store.project(t.b_project).spec),
        "runs": runs,
        "export": export.read_bytes() if export is not None and export.exists() else None,
    }


def _operations(http: httpx.Client) -> list[tuple[str, str, bool]]:
    """(method, path, takes a spec body) of every route with a project or run id in its path."""
    paths = http.get("/openapi.json").json()["paths"]
    return [
        (method.upper(), path, "application/yaml" in op.get("requestBody", {}).get("content", {}))
        for path, item in paths.items()
        for method, op in item.items()
        if method in ("get", "post", "put", "delete", "patch") and ("{project_id}" in path or "{run_id}" in path)
    ]


def test_every_route_with_an_id_answers_404_to_another_companys_token(tenants: Tenants, stress_tally: Any) -> None:
    t = tenants
    before = _b_state(t)
    with httpx.Client(base_url=t.base_url, timeout=30) as http:
        operations = _operations(http)
        # The routes the SPEC lists, plus whatever was added since (preview, ...): all are checked.
        assert len(operations) >= 7, operations
        tried = 0
        for method, template, takes_spec in operations:
            bodies: list[Any] = [None]
            if takes_spec:
                # A's own spec naming B's project: a takeover attempt, or a draft preview of B's project id.
                bodies.append(_spec(t.a, t.b_project, "mine.csv"))
            for payload in bodies:
                answers = []
                for project, run in ((t.b_project, t.b_run), ("nobody_" + uuid.uuid4().hex[:8], str(uuid.uuid4()))):
                    path = template.replace("{project_id}", project).replace("{run_id}", run)
                    # A route's required query: a valid request, so that only the id can be what is refused.
                    params = {"field": "title"} if template.endswith("/values") else None
                    if payload is None:
                        r = http.request(method, path, headers=t.a_auth, params=params)
                    else:
                        r = http.request(method, path, headers=t.a_auth, json={**payload, "project": project})
                    tried += 1
                    assert t.b not in r.text and SECRET not in r.text, r.text
                    answers.append((r.status_code, r.json().get("error")))
                if payload is not None:
                    # A's spec with B's id is refused; with a fresh id it is A's to create (ids are global).
                    assert answers[0] == (404, "not_found"), (method, template, answers)
                    continue
                # B's ids answer exactly as ids that exist nowhere: A cannot even learn that they exist.
                assert answers[0] == answers[1], (method, template, answers)
                assert answers[0][0] == 404 or method == "PUT", (method, template, answers)
        listed = http.get("/api/projects", headers=t.a_auth).json()
        assert t.b_project not in {p["project"] for p in listed["projects"]}
        # Positive control: B's own token reaches the same routes.
        assert http.get(f"/api/projects/{t.b_project}", headers=t.b_auth).status_code == 200
        assert http.get(f"/api/runs/{t.b_run}", headers=t.b_auth).json()["status"] == "PENDING"
    stress_tally.inputs_tried("cross-tenant requests", tried)
    assert _b_state(t) == before


@pytest.mark.parametrize(
    "url",
    [
        "../{b}/secret.csv",
        "{root}/{b}/secret.csv",
        "file://{root}/{b}/secret.csv",
        "file://{root}/{a}/%2e%2e/{b}/secret.csv",
        "sub/../../{b}/secret.csv",
        "link_to_b/secret.csv",
        "linked_secret.csv",
    ],
)
def test_a_spec_of_company_a_cannot_read_company_bs_local_files(url: str, tenants: Tenants, stress_tally: Any) -> None:
    t = tenants
    (t.sources_root / t.a / "link_to_b").symlink_to(t.sources_root / t.b, target_is_directory=True)
    (t.sources_root / t.a / "linked_secret.csv").symlink_to(t.sources_root / t.b / "secret.csv")
    project = "asteal_" + uuid.uuid4().hex[:8]
    spec = _spec(t.a, project, url.format(root=t.sources_root, a=t.a, b=t.b))
    with httpx.Client(base_url=t.base_url, timeout=60) as http:
        # Refused when applied (#48), naming the key and the company's folder; FETCH checks again at a run.
        put = http.put(f"/api/projects/{project}", headers=t.a_auth, json=spec)
        preview = http.post(f"/api/projects/{project}/preview", headers=t.a_auth)
    stress_tally.run()
    stress_tally.inputs_tried("cross-tenant paths")
    assert (put.status_code, put.json()["error"], put.json()["path"]) == (422, "spec_error", "sources[0].url"), put.text
    assert "outside the allowed folders" in put.json()["message"] and SECRET not in put.text
    assert str(t.sources_root / t.a) in put.json()["message"] and t.b not in put.json()["message"].split(":")[-1]
    assert preview.status_code in (404, 422), preview.text  # nothing was stored to preview
    assert SECRET not in preview.text


def test_a_spec_of_company_a_reads_its_own_local_files(tenants: Tenants, run_env: Path) -> None:
    # The control for the refusals above: the same route and root do serve A's own folder.
    t = tenants
    project = "aown_" + uuid.uuid4().hex[:8]
    with httpx.Client(base_url=t.base_url, timeout=60) as http:
        assert http.put(f"/api/projects/{project}", headers=t.a_auth, json=_spec(t.a, project, "mine.csv")).is_success
        run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=t.a_auth).json()["run_id"]
        execute_run(run_id)
        report = http.get(f"/api/runs/{run_id}", headers=t.a_auth).json()
    assert report["status"] == "SUCCEEDED", report["error"]
    assert (get_settings().export_dir / report["exports"][0]["path"]).read_text(encoding="utf-8").count("A's shoe") == 1


@pytest.mark.parametrize("export_path", ["../{b_project}/out.csv", "../../{b}/{b_project}/out.csv", "to_b/out.csv"])
def test_a_spec_of_company_a_cannot_write_into_company_bs_export_folder(
    export_path: str,
    tenants: Tenants,
    run_env: Path,
    stress_tally: Any,
) -> None:
    t = tenants
    before = _b_state(t)
    assert before["export"] is not None
    project = "awrite_" + uuid.uuid4().hex[:8]
    (run_env / t.a / project).mkdir(parents=True)
    (run_env / t.a / project / "to_b").symlink_to(run_env / t.b / t.b_project, target_is_directory=True)
    spec = _spec(t.a, project, "mine.csv", path=export_path.format(b=t.b, b_project=t.b_project))
    with httpx.Client(base_url=t.base_url, timeout=60) as http:
        put = http.put(f"/api/projects/{project}", headers=t.a_auth, json=spec)
        stress_tally.inputs_tried("cross-tenant paths")
        if put.status_code == 422:  # `..` never gets past the spec
            assert put.json()["path"] == "exports[0].path"
            return
        assert put.status_code == 201, put.text
        run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=t.a_auth).json()["run_id"]
        execute_run(run_id)
        report = http.get(f"/api/runs/{run_id}", headers=t.a_auth).json()
    stress_tally.run()
    assert report["status"] == "FAILED"
    assert report["error"]["step"] == "EXPORT"
    assert "outside the project's export folder" in report["error"]["message"]
    assert _b_state(t) == before


def test_field_names_written_as_sql_never_reach_company_bs_tables(
    tenants: Tenants,
    run_env: Path,
    stress_tally: Any,
) -> None:
    t = tenants
    b_schema = company_schema(t.b)
    hostile = [
        "id",
        f'x"; DROP SCHEMA {b_schema} CASCADE; --',
        f"title FROM {b_schema}.{t.b_project} --",
        f'"{b_schema}"."{t.b_project}"',
        f"{b_schema}.{t.b_project}",
    ]
    write_csv(t.sources_root / t.a / "sql.csv", hostile, [["A1", "v1", "v2", "v3", "v4"]])
    project = "asql_" + uuid.uuid4().hex[:8]
    spec = _spec(t.a, project, "sql.csv")
    spec["rules"] = [
        {
            "when": {"field": hostile[2], "op": "eq", "value": "v2"},
            "then": [{"set": hostile[3], "value": f"{{{hostile[1]}}}"}],
        }
    ]
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (b_schema,))
        b_tables = cur.fetchall()
    assert b_tables, "B has tables to protect"
    with httpx.Client(base_url=t.base_url, timeout=60) as http:
        assert http.put(f"/api/projects/{project}", headers=t.a_auth, json=spec).status_code == 201
        run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=t.a_auth).json()["run_id"]
        execute_run(run_id)
        report = http.get(f"/api/runs/{run_id}", headers=t.a_auth).json()
    stress_tally.run()
    assert report["status"] == "SUCCEEDED", report["error"]
    with (get_settings().export_dir / report["exports"][0]["path"]).open(newline="", encoding="utf-8") as f:
        header, first = list(csv.reader(f))
    assert header == hostile
    assert first == ["A1", "v1", "v2", "v1", "v4"]
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (b_schema,))
        assert cur.fetchall() == b_tables


@pytest.fixture()
def workspace(tenants: Tenants) -> str:
    """The processes worker of company A (make_worker from test_processes builds its workers on this)."""
    return tenants.a


def test_a_processes_row_of_company_a_cannot_touch_company_bs_projects_or_runs(
    tenants: Tenants,
    make_worker: Any,
    stress_tally: Any,
) -> None:
    from firefeed.db.engine import get_engine

    t = tenants
    engine = get_engine()
    before = _b_state(t)
    takeover = _spec(t.a, t.b_project, "mine.csv")
    # Each row, and the error that says no more than "not yours" (the same as for an id that does not exist).
    rows = {
        insert(engine, "firefeed.pipeline.run", {"project": t.b_project}, workspace=t.a): "unknown project",
        insert(
            engine, "firefeed.pipeline.run", {"project": t.b_project, "accept_drop": True}, workspace=t.a
        ): "unknown project",
        insert(engine, "firefeed.run.status", {"run_id": t.b_run}, workspace=t.a): "unknown run",
        insert(engine, "firefeed.project.apply", {"spec": takeover}, workspace=t.a): "not available to this workspace",
        insert(
            engine, "firefeed.project.apply", {"spec": _spec(t.b, t.b_project, "x.csv")}, workspace=t.a
        ): "is not this workspace",
    }
    # Every registered function that takes an id is covered above; a new one must be added here.
    assert {"firefeed.pipeline.run", "firefeed.run.status", "firefeed.project.apply"} | {"firefeed.ping"} == set(
        RUNNABLES
    )
    make_worker().drain()
    stress_tally.inputs_tried("cross-tenant process rows", len(rows))
    for pid, refusal in rows.items():
        r = row(engine, pid)
        assert (r["status"], r["output_data"]) == ("failed", None), r
        assert refusal in r["error_message"], r["error_message"]
        assert SECRET not in json.dumps(r, default=str)
    assert _b_state(t) == before
    # Positive control: A's worker runs A's own project.
    own = "aproc_" + uuid.uuid4().hex[:8]
    RunStore().apply_spec(parse_spec(_spec(t.a, own, "mine.csv")), spec_dir=None, company=t.a)
    pid = insert(engine, "firefeed.pipeline.run", {"project": own}, workspace=t.a)
    make_worker().drain()
    stress_tally.run()
    assert row(engine, pid)["status"] == "completed", row(engine, pid)["error_message"]
