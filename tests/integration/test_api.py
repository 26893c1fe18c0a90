"""The HTTP API against a real uvicorn server and the real Postgres: every route, its happy path and its errors."""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import cli, new_company, write_csv

pytestmark = pytest.mark.integration

ROUTES = [
    ("GET", "/api/projects"),
    ("GET", "/api/projects/p"),
    ("PUT", "/api/projects/p"),
    ("POST", "/api/projects/p/pipeline/run"),
    ("POST", "/api/projects/p/pipeline/run-now"),
    ("GET", "/api/projects/p/pipeline/runs"),
    # A run no one made; fixed, so every pytest-xdist worker collects the same test ids.
    ("GET", "/api/runs/0b6f9a52-3c1d-4e8f-9a7b-2d4c6e8f0a1b"),
    ("POST", "/api/runs/0b6f9a52-3c1d-4e8f-9a7b-2d4c6e8f0a1b/cancel"),
    ("GET", "/api/tokens"),
    ("POST", "/api/tokens"),
    ("DELETE", "/api/tokens/1"),
]


def spec_of(company: str, project: str, url: str = "main.csv") -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "name": f"{project} feed",
        "sources": [{"name": "main", "url": url}],
        "rules": [
            {
                "name": "out of stock",
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock"}],
            },
        ],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def add_project(company: str, folder: Path, project: str | None = None) -> str:
    """A project of `company` with a local CSV, applied as `firefeed apply` would (with a spec folder)."""
    project = project or "p_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "quantity", "availability"],
        [["A1", "Shoe", "0", "in stock"], ["A2", "Boot", "4", "in stock"], ["A3", "Hat", "0", ""]],
    )
    RunStore().apply_spec(parse_spec(spec_of(company, project)), spec_dir=folder)
    return project


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_api_route_refuses_a_request_without_a_valid_token(http: httpx.Client, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer ff_not-a-real-token"}, {"Authorization": "Basic dXNlcjpwdw=="}):
        r = http.request(method, path, headers=headers)
        assert r.status_code == 401, (method, path, headers, r.text)
        assert r.json()["error"] == "unauthorized"
        assert r.json()["message"]
        assert r.headers["www-authenticate"] == "Bearer"


def test_health_readiness_metrics_and_docs_are_open(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}
    metrics = http.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "# HELP" in metrics.text
    assert http.get("/docs").status_code == 200
    paths = set(http.get("/openapi.json").json()["paths"])
    assert {
        "/api/projects",
        "/api/projects/{project_id}",
        "/api/projects/{project_id}/pipeline/run",
        "/api/projects/{project_id}/pipeline/run-now",
        "/api/projects/{project_id}/pipeline/runs",
        "/api/runs/{run_id}",
        "/api/runs/{run_id}/cancel",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= paths


def test_a_put_spec_reads_back_with_get_and_a_second_put_updates_it(http: httpx.Client) -> None:
    company, auth = new_company()
    project = "shoes_" + uuid.uuid4().hex[:8]
    spec = spec_of(company, project, url="https://feeds.example.com/shoes.csv")
    created = http.put(f"/api/projects/{project}", headers=auth, content=json.dumps(spec))
    assert created.status_code == 201, created.text
    assert created.json()["created"] is True
    assert created.json()["links"]["runs"] == f"/api/projects/{project}/pipeline/runs"

    stored = http.get(f"/api/projects/{project}", headers=auth).json()
    assert stored["company"] == company
    assert stored["project"] == project
    assert stored["sources"][0] == {"name": "main", "url": "https://feeds.example.com/shoes.csv"}
    assert stored["rules"][0]["name"] == "out of stock"
    assert stored["exports"][0]["path"] == "out.csv"

    spec["name"] = "renamed"
    updated = http.put(
        f"/api/projects/{project}",
        headers={**auth, "Content-Type": "application/yaml"},
        content=yaml.safe_dump(spec),
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["created"] is False
    assert http.get(f"/api/projects/{project}", headers=auth).json()["name"] == "renamed"


def test_a_bad_spec_is_a_422_that_names_the_offending_key(http: httpx.Client) -> None:
    company, auth = new_company()
    bad = "bad_" + uuid.uuid4().hex[:8]
    spec = spec_of(company, bad, url="https://feeds.example.com/a.csv")
    spec["sources"][0]["colour"] = "red"
    r = http.put(f"/api/projects/{bad}", headers=auth, json=spec)
    assert r.status_code == 422
    assert r.json() == {"error": "spec_error", "message": "unknown key", "path": "sources[0].colour"}
    # Two mistakes: both in one answer, the misspelled one with the key it likely meant (#48).
    spec["exports"][0]["formt"] = "csv"
    body = http.put(f"/api/projects/{bad}", headers=auth, json=spec).json()
    assert (body["path"], body["message"]) == ("sources[0].colour", "unknown key")
    assert body["problems"] == [
        {"path": "sources[0].colour", "message": "unknown key"},
        {"path": "exports[0].formt", "message": "unknown key (did you mean 'format'?)"},
    ]
    del spec["exports"][0]["formt"]

    r = http.put("/api/projects/other_id", headers=auth, json=spec_of(company, bad, url="https://x.test/a.csv"))
    assert (r.status_code, r.json()["error"], r.json()["path"]) == (422, "spec_error", "project")

    r = http.put(f"/api/projects/{bad}", headers=auth, json=spec_of("someone_else", bad, url="https://x.test/a.csv"))
    assert (r.status_code, r.json()["error"], r.json()["path"]) == (422, "spec_error", "company")

    r = http.put(f"/api/projects/{bad}", headers=auth, content=b"company: [unclosed")
    assert (r.status_code, r.json()["error"]) == (422, "spec_error")
    assert http.get(f"/api/projects/{bad}", headers=auth).status_code == 404


def test_a_token_lists_only_its_own_companys_projects(http: httpx.Client, tmp_path: Path) -> None:
    acme, acme_auth = new_company()
    other, other_auth = new_company()
    mine = sorted([add_project(acme, tmp_path / "a"), add_project(acme, tmp_path / "b")])
    theirs = add_project(other, tmp_path / "c")

    listed = http.get("/api/projects", headers=acme_auth).json()
    assert listed["company"] == acme
    assert [p["project"] for p in listed["projects"]] == mine
    assert all(p["latest_run"] is None for p in listed["projects"])
    assert [p["project"] for p in http.get("/api/projects", headers=other_auth).json()["projects"]] == [theirs]


def test_another_companys_project_and_run_are_404_as_if_they_did_not_exist(http: httpx.Client, tmp_path: Path) -> None:
    owner, owner_auth = new_company()
    intruder, auth = new_company()
    project = add_project(owner, tmp_path)
    run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=owner_auth).json()["run_id"]

    for method, path in [
        ("GET", f"/api/projects/{project}"),
        ("POST", f"/api/projects/{project}/pipeline/run"),
        ("POST", f"/api/projects/{project}/pipeline/run-now"),
        ("GET", f"/api/projects/{project}/pipeline/runs"),
        ("GET", f"/api/runs/{run_id}"),
        ("POST", f"/api/runs/{run_id}/cancel"),
    ]:
        r = http.request(method, path, headers=auth)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"] == "not_found"
    # Taking over another company's project id through a spec is refused the same way.
    r = http.put(f"/api/projects/{project}", headers=auth, json=spec_of(intruder, project, "https://x.test/a.csv"))
    assert (r.status_code, r.json()["error"]) == (404, "not_found")
    assert http.get(f"/api/runs/{run_id}", headers=owner_auth).json()["status"] == "PENDING"
    http.post(f"/api/runs/{run_id}/cancel", headers=owner_auth)


def test_a_run_request_is_202_then_409_naming_the_active_run(http: httpx.Client, tmp_path: Path) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path)

    accepted = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
    assert accepted.status_code == 202, accepted.text
    run_id = accepted.json()["run_id"]
    assert accepted.json()["status"] == "PENDING"
    assert accepted.headers["location"] == f"/api/runs/{run_id}"
    assert accepted.json()["links"]["self"] == f"/api/runs/{run_id}"

    for path in ("run", "run-now"):
        busy = http.post(f"/api/projects/{project}/pipeline/{path}", headers=auth)
        assert busy.status_code == 409
        body = busy.json()
        assert body["error"] == "pipeline_busy"
        assert body["run_id"] == run_id
        assert body["links"] == {"run": f"/api/runs/{run_id}"}
        assert run_id in body["message"]

    report = http.get(f"/api/runs/{run_id}", headers=auth).json()
    assert (report["status"], report["trigger"], report["project"]) == ("PENDING", "api", project)
    http.post(f"/api/runs/{run_id}/cancel", headers=auth)

    missing = http.post("/api/projects/no_such_project/pipeline/run", headers=auth)
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert missing.json()["message"]


def test_cancelling_a_pending_run_makes_it_cancelled_and_frees_the_project(http: httpx.Client, tmp_path: Path) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path)
    run_id = http.post(f"/api/projects/{project}/pipeline/run-now", headers=auth).json()["run_id"]

    cancelled = http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "CANCELLED"
    assert cancelled.json()["cancel_requested"] is True
    report = http.get(f"/api/runs/{run_id}", headers=auth).json()
    assert report["status"] == "CANCELLED"
    assert report["finished_at"] is not None

    again = http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    assert (again.status_code, again.json()["status"]) == (200, "CANCELLED")
    next_run = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
    assert next_run.status_code == 202
    http.post(f"/api/runs/{next_run.json()['run_id']}/cancel", headers=auth)


def test_a_projects_runs_are_listed_newest_first(http: httpx.Client, tmp_path: Path) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path)
    ids = []
    for _ in range(3):
        run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=auth).json()["run_id"]
        http.post(f"/api/runs/{run_id}/cancel", headers=auth)
        ids.append(run_id)

    listed = http.get(f"/api/projects/{project}/pipeline/runs", headers=auth).json()
    assert listed["project"] == project
    assert [r["run_id"] for r in listed["runs"]] == ids[::-1]
    assert all(r["status"] == "CANCELLED" and r["trigger"] == "api" for r in listed["runs"])
    limited = http.get(f"/api/projects/{project}/pipeline/runs?limit=2", headers=auth).json()
    assert [r["run_id"] for r in limited["runs"]] == ids[:0:-1]
    bad = http.get(f"/api/projects/{project}/pipeline/runs?limit=0", headers=auth)
    assert (bad.status_code, bad.json()["error"]) == (422, "invalid_request")
    latest = http.get("/api/projects", headers=auth).json()["projects"][0]["latest_run"]
    assert latest["run_id"] == ids[-1]


def test_a_finished_run_is_served_as_its_run_report(http: httpx.Client, tmp_path: Path, run_env: Path) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path)
    run_id = RunStore().request_run(project, "cli")
    execute_run(run_id)

    r = http.get(f"/api/runs/{run_id}", headers=auth)
    assert r.status_code == 200
    report = r.json()
    assert report["status"] == "SUCCEEDED", report["error"]
    assert [s["step"] for s in report["steps"]] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    assert report["rules"]["matched"] == {"out of stock": 2}
    assert report["exports"][0]["name"] == "csv"
    assert report["exports"][0]["rows"] == 3
    assert report["links"]["self"] == f"/api/runs/{run_id}"
    # Cancelling a finished run changes nothing.
    done = http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    assert (done.status_code, done.json()["status"], done.json()["cancel_requested"]) == (200, "SUCCEEDED", False)


def test_a_failed_run_is_not_said_to_be_cancel_requested(http: httpx.Client, tmp_path: Path, run_env: Path) -> None:
    # A failing run raises the cancel flag itself to stop its jobs; nobody asked for a cancel (#48).
    company, auth = new_company()
    project = add_project(company, tmp_path)
    (tmp_path / "main.csv").unlink()
    run_id = RunStore().request_run(project, "cli")
    assert execute_run(run_id)["status"] == "FAILED"

    assert http.get(f"/api/runs/{run_id}", headers=auth).json()["cancel_requested"] is False
    runs = http.get(f"/api/projects/{project}/pipeline/runs", headers=auth).json()["runs"]
    assert [(r["status"], r["cancel_requested"]) for r in runs] == [("FAILED", False)]


def test_unknown_ids_and_routes_answer_json_errors(http: httpx.Client) -> None:
    _, auth = new_company()
    for path in ("/api/runs/not-a-uuid", f"/api/runs/{uuid.uuid4()}", "/api/projects/nope", "/api/nothing-here"):
        r = http.get(path, headers=auth)
        assert r.status_code == 404, path
        assert r.json()["error"] == "not_found"
    r = http.delete("/api/projects/nope", headers=auth)
    assert (r.status_code, r.json()["error"]) == (405, "method_not_allowed")


def test_token_create_prints_a_token_the_api_accepts(http: httpx.Client) -> None:
    company = "co_" + uuid.uuid4().hex[:10]
    code, out = cli("token", "create", "--company", company)
    assert code == 0
    token = out.strip()
    assert token.startswith("ff_")
    assert len(token) >= 40
    listed = http.get("/api/projects", headers={"Authorization": f"Bearer {token}"})
    assert listed.status_code == 200
    assert listed.json() == {"company": company, "projects": []}
    assert cli("token", "create", "--company", "Not A Company")[0] == 2


def test_tokens_are_stored_only_as_their_hash(database_url: str) -> None:
    from sqlalchemy import select

    from firefeed.db.models import ApiToken
    from firefeed.runs.tokens import hash_token

    store = TokenStore()
    company = "hash_" + uuid.uuid4().hex[:8]
    token = store.create(company)
    with store.sessions() as s:
        rows = list(s.scalars(select(ApiToken).where(ApiToken.company_id == company)))
    assert [r.token_hash for r in rows] == [hash_token(token)]
    assert all(token not in (r.token_hash, r.token_prefix) for r in rows)
    assert store.verify(token) == company
    assert store.verify(token + "x") is None


def test_readiness_is_503_naming_the_broker_when_it_cannot_be_reached(http: httpx.Client) -> None:
    from tests.integration.test_pipeline_lock import celery_on

    with celery_on("redis://127.0.0.1:1/0"):
        r = http.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["error"] == "not_ready"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] != "ok"
    assert "broker" in body["message"]
    assert http.get("/healthz").status_code == 200


def test_a_companys_spec_writes_past_its_bound_are_refused_at_once_and_others_go_on(http: httpx.Client) -> None:
    """Validation is CPU under the GIL: one tenant may hold only SPEC_WRITES_PER_COMPANY of the API's threads."""
    from firefeed.api.spec_writes import SPEC_WRITES

    company, auth = new_company()
    other, other_auth = new_company()
    spec = spec_of(company, "busy_" + uuid.uuid4().hex[:8], url="https://feeds.example.com/a.csv")
    with contextlib.ExitStack() as held:
        for _ in range(SPEC_WRITES.per_company):  # as if that many of its PUTs were validating now
            held.enter_context(SPEC_WRITES.admitted(company))
        refused = http.put(f"/api/projects/{spec['project']}", headers=auth, content=json.dumps(spec))
        theirs = spec_of(other, "free_" + uuid.uuid4().hex[:8], url="https://feeds.example.com/b.csv")
        accepted = http.put(f"/api/projects/{theirs['project']}", headers=other_auth, content=json.dumps(theirs))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "too_many_spec_writes"
    assert refused.headers["Retry-After"] == str(refused.json()["retry_after"])
    assert accepted.status_code == 201, accepted.text
    # Refused, not queued: nothing was stored, and the place is free again once the writes end.
    assert http.get(f"/api/projects/{spec['project']}", headers=auth).status_code == 404
    assert http.put(f"/api/projects/{spec['project']}", headers=auth, content=json.dumps(spec)).status_code == 201


def test_concurrent_applies_of_one_new_project_create_it_exactly_once(database_url: str) -> None:
    """Two first PUTs of one new project both INSERTed its row; the loser's unique violation answered 500."""
    from concurrent.futures import ThreadPoolExecutor

    company, _ = new_company()
    spec = parse_spec(spec_of(company, "race_" + uuid.uuid4().hex[:8], url="https://feeds.example.com/r.csv"))
    barrier = threading.Barrier(8)

    def apply(_: int) -> bool:
        barrier.wait()
        return RunStore().apply_spec(spec, spec_dir=None, company=company)

    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(apply, range(8)))
    assert sorted(created) == [False] * 7 + [True]


def test_a_spec_whose_export_path_is_shaped_like_another_exports_spare_is_a_422(http: httpx.Client) -> None:
    """A tenant naming an export `.<name>.spare` would have another export's next file written over it
    (storage/spares.py): refused through the API, naming the key, and nothing stored."""
    company, auth = new_company()
    project = "spare_" + uuid.uuid4().hex[:8]
    spec = spec_of(company, project, url="https://feeds.example.com/a.csv")
    spec["exports"].append({**spec["exports"][0], "name": "shadow", "path": f".{spec['exports'][0]['path']}.spare"})
    r = http.put(f"/api/projects/{project}", headers=auth, json=spec)
    assert r.status_code == 422, r.text
    assert r.json()["path"] == "exports[1].path" and "'.<name>.spare'" in r.json()["message"]
    assert http.get(f"/api/projects/{project}", headers=auth).status_code == 404
