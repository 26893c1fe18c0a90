"""The run-request path made fast (issue 16): runs refer to stored spec versions instead of copying the
spec, the version a run was requested with is the one it runs with, and /healthz never waits for the
thread pool the sync routes share.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg2
import pytest
from alembic import command
from sqlalchemy import create_engine, func, inspect, select

from firefeed.api.app import create_app
from firefeed.api.serve import ServerThread
from firefeed.config import normalize_database_url
from firefeed.db.migrate import alembic_config, upgrade
from firefeed.db.models import PipelineRun, Project, SpecVersion
from firefeed.errors import PipelineBusyError
from firefeed.runs.service import RunStore, spec_digest
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv
from tests.services import admin_url, database_url_for

pytestmark = pytest.mark.integration


def spec_of(company: str, project: str, export: str = "csv") -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv", "headers": {"X-Z": "1", "X-A": "2"}}],
        "exports": [{"name": export, "format": "csv", "path": f"{export}.csv", "fields": {"title": "t", "id": "i"}}],
    }


def new_project(folder: Path, export: str = "csv") -> tuple[str, dict[str, Any]]:
    project = "sv_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "main.csv", ["id", "title"], [["A1", "Shoe"]])
    spec = spec_of("acme", project, export)
    RunStore().apply_spec(parse_spec(spec), spec_dir=folder)
    return project, spec


def versions_of(store: RunStore, project: str) -> list[SpecVersion]:
    with store.sessions() as s:
        return list(s.scalars(select(SpecVersion).where(SpecVersion.project_id == project).order_by(SpecVersion.id)))


def version_of_run(store: RunStore, run_id: str) -> int | None:
    with store.sessions() as s:
        return s.execute(select(PipelineRun.spec_version_id).where(PipelineRun.id == uuid.UUID(run_id))).scalar()


def current_version(store: RunStore, project: str) -> int | None:
    with store.sessions() as s:
        return s.execute(select(Project.spec_version_id).where(Project.id == project)).scalar()


def test_a_run_refers_to_the_projects_spec_version_and_copies_no_document(database_url: str, tmp_path: Path) -> None:
    store = RunStore()
    project, _ = new_project(tmp_path)
    run_id = store.request_run(project, "api")
    (version,) = versions_of(store, project)
    assert current_version(store, project) == version.id
    assert version_of_run(store, run_id) == version.id
    # The run row holds a reference only: the document lives once, in spec_versions.
    columns = {c["name"] for c in inspect(store.engine).get_columns("pipeline_runs")}
    assert "spec_version_id" in columns
    assert not {"spec", "spec_dir"} & columns
    store.request_cancel(run_id)


def test_a_spec_applied_while_a_run_is_queued_changes_only_the_next_run(database_url: str, tmp_path: Path) -> None:
    store = RunStore()
    project, _ = new_project(tmp_path, export="first")
    queued = store.request_run(project, "api")
    store.apply_spec(parse_spec(spec_of("acme", project, "second")), spec_dir=tmp_path / "elsewhere")

    spec, spec_dir = store.run_spec(queued)
    assert [e.name for e in spec.exports] == ["first"]
    assert spec_dir == tmp_path
    # Key order survives the version (SPEC 8.18): headers and fields come back as the spec lists them.
    assert list(spec.sources[0].headers) == ["X-Z", "X-A"]
    assert list(spec.exports[0].fields or {}) == ["title", "id"]

    store.request_cancel(queued)
    after = store.request_run(project, "api")
    spec, spec_dir = store.run_spec(after)
    assert [e.name for e in spec.exports] == ["second"]
    assert spec_dir == tmp_path / "elsewhere"
    assert version_of_run(store, queued) != version_of_run(store, after)
    store.request_cancel(after)


def test_applying_the_same_spec_again_reuses_its_version(database_url: str, tmp_path: Path) -> None:
    store = RunStore()
    project, spec = new_project(tmp_path, export="a")
    first = current_version(store, project)
    store.apply_spec(parse_spec(spec), spec_dir=tmp_path)
    assert current_version(store, project) == first
    store.apply_spec(parse_spec(spec_of("acme", project, "b")), spec_dir=tmp_path)
    second = current_version(store, project)
    assert second != first
    # Back to the first document: its version is found again by its digest, not stored twice.
    store.apply_spec(parse_spec(spec), spec_dir=tmp_path)
    assert current_version(store, project) == first
    assert [v.id for v in versions_of(store, project)] == [first, second]
    # The same document from another folder resolves its sources elsewhere: another version.
    store.apply_spec(parse_spec(spec), spec_dir=tmp_path / "other")
    assert current_version(store, project) not in (first, second)


def test_a_busy_project_is_refused_naming_its_run_without_a_new_run(database_url: str, tmp_path: Path) -> None:
    store = RunStore()
    project, _ = new_project(tmp_path)
    active = store.request_run(project, "cli")
    for _ in range(3):
        with pytest.raises(PipelineBusyError) as busy:
            store.request_run(project, "api")
        assert busy.value.run_id == active
    assert [str(r.id) for r in store.runs_of_project(project)] == [active]
    store.request_cancel(active)


# -- the migration --------------------------------------------------------------------------------
@pytest.fixture()
def scratch_url(database_url: str) -> Iterator[str]:
    """An empty database of its own, for migrating up and down."""
    name = f"firefeed_sv_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(admin_url())
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
    try:
        yield database_url_for(admin_url(), name)
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def test_the_migration_turns_run_snapshots_into_shared_versions_and_back(scratch_url: str, tmp_path: Path) -> None:
    upgrade(scratch_url, "20261201_0009")
    old = spec_of("acme", "mig", "old")
    new = spec_of("acme", "mig", "new")
    with psycopg2.connect(scratch_url) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO companies (id) VALUES ('acme')")
        cur.execute(
            "INSERT INTO projects (id, company_id, spec, spec_dir) VALUES ('mig', 'acme', %s, %s)",
            (json.dumps(new), str(tmp_path)),
        )
        runs = [uuid.uuid4() for _ in range(4)]
        for run_id, spec in zip(runs, (old, old, new, None), strict=True):
            cur.execute(
                "INSERT INTO pipeline_runs (id, project_id, company_id, status, trigger, spec, spec_dir) "
                "VALUES (%s, 'mig', 'acme', 'SUCCEEDED', 'cli', %s, %s)",
                (str(run_id), json.dumps(spec) if spec else None, str(tmp_path) if spec else None),
            )

    upgrade(scratch_url, "head")
    engine = create_engine(normalize_database_url(scratch_url))
    try:
        store = RunStore(engine)
        # The last run is from before snapshots: it reads the project's current spec.
        exports = [[e.name for e in store.run_spec(str(r))[0].exports] for r in runs]
        assert exports == [["old"], ["old"], ["new"], ["new"]]
        assert store.run_spec(str(runs[0]))[1] == tmp_path
        with store.sessions() as s:
            assert s.execute(select(func.count()).select_from(SpecVersion)).scalar() == 2  # old and new, once each
            project_version = s.execute(select(Project.spec_version_id)).scalar()
            digests = {v.id: v.digest for v in s.scalars(select(SpecVersion))}
        assert version_of_run(store, str(runs[2])) == project_version
        assert version_of_run(store, str(runs[3])) is None
        # SQL and Python compute the same digest: applying the migrated spec again reuses its version.
        assert digests[project_version] == spec_digest(new, str(tmp_path))
        store.apply_spec(parse_spec(new), spec_dir=tmp_path)
        assert current_version(store, "mig") == project_version
        with store.sessions() as s:
            assert s.execute(select(func.count()).select_from(SpecVersion)).scalar() == 2
    finally:
        engine.dispose()

    command.downgrade(alembic_config(scratch_url), "20261201_0009")
    with psycopg2.connect(scratch_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, spec, spec_dir FROM pipeline_runs")
        back = {uuid.UUID(str(r[0])): (r[1], r[2]) for r in cur.fetchall()}
    assert back[runs[0]] == (old, str(tmp_path))
    assert back[runs[2]] == (new, str(tmp_path))
    assert back[runs[3]] == (None, None)


# -- /healthz ---------------------------------------------------------------------------------------
def test_healthz_answers_while_sync_requests_fill_the_thread_pool(database_url: str) -> None:
    """A flood of sync requests takes every thread of the pool; liveness must not queue behind them."""
    app = create_app()
    release = threading.Event()
    finished: list[float] = []

    @app.get("/test-slow")
    def slow() -> dict[str, str]:  # a sync route: it holds a pool thread until released
        release.wait(30)
        finished.append(time.monotonic())
        return {"status": "done"}

    with ServerThread(app) as base:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        with httpx.Client(base_url=base, timeout=60, limits=limits) as http:
            flood = [threading.Thread(target=http.get, args=("/test-slow",)) for _ in range(60)]
            for t in flood:
                t.start()
            time.sleep(1.0)  # every pool thread (40) is now waiting in /test-slow
            try:
                answer = http.get("/healthz", timeout=10)
                answered_at = time.monotonic()
            finally:
                release.set()
                for t in flood:
                    t.join(timeout=60)
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}
    assert len(finished) == 60
    assert answered_at < min(finished)  # liveness answered before any of the flood was let go
