"""Maintenance on beat: the janitor drops orphans only, the reaper frees crashed runs, history is pruned."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from firefeed import metrics
from firefeed.dataplane.run_tables import RunTables
from firefeed.runs.contract import JobKind, JobSpec
from firefeed.runs.jobs import JobStore
from firefeed.runs.maintenance import drop_orphan_tmp_tables, prune_history, reap_stale_runs
from firefeed.runs.service import RunStore
from firefeed.schema.service import SchemaService
from firefeed.spec.loader import parse_spec

pytestmark = pytest.mark.integration

COMPANY = "ops_maint"


def new_project() -> str:
    project = "maint_" + uuid.uuid4().hex[:10]
    spec: dict[str, Any] = {
        "company": COMPANY,
        "project": project,
        "sources": [{"name": "main", "url": "https://feeds.example.test/main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    RunStore().apply_spec(parse_spec(spec), spec_dir=None)
    return project


def running_run(project: str) -> str:
    store = RunStore()
    run_id = store.request_run(project, "api")
    assert store.mark_running(run_id)
    return run_id


def sample(name: str, **labels: str) -> float:
    body, _ = metrics.render(fleet=False)
    return next(
        (v for n, lbl, v in metrics.iter_samples(body.decode()) if n == name and lbl == labels),
        0.0,
    )


def tmp_tables() -> set[str]:
    return {table for _, table in RunTables(SchemaService()).list_rules_tmp(COMPANY)}


def test_the_janitor_drops_an_orphan_and_never_a_live_runs_table(engine: Engine) -> None:
    schema = SchemaService(engine)
    live = running_run(new_project())
    pending = RunStore().request_run(new_project(), "api")
    finished = running_run(new_project())
    RunStore().finish_run(finished, "FAILED", report=None, error=None)
    crashed_unknown = str(uuid.uuid4())
    live_t = schema.create_rules_tmp(COMPANY, live, 1, ["title"])
    pending_t = schema.create_rules_tmp(COMPANY, pending, 1, ["title"])
    orphan_t = schema.create_rules_tmp(COMPANY, finished, 2, ["title"])
    unknown_t = schema.create_rules_tmp(COMPANY, crashed_unknown, 1, ["title"])
    before = sample("firefeed_janitor_dropped_tables_total")

    dropped = drop_orphan_tmp_tables(engine)

    assert {d.split(".", 1)[1] for d in dropped} >= {orphan_t, unknown_t}
    left = tmp_tables()
    assert {live_t, pending_t} <= left
    assert not {orphan_t, unknown_t} & left
    assert sample("firefeed_janitor_dropped_tables_total") >= before + 2


def test_the_reaper_fails_a_run_without_heartbeat_and_frees_its_project(engine: Engine) -> None:
    store = RunStore(engine)
    project = new_project()
    stale = running_run(project)
    fresh = running_run(new_project())
    store.step_started(stale, "MERGE")
    table = SchemaService(engine).create_rules_tmp(COMPANY, stale, 1, ["title"])
    (job,) = JobStore(engine).create(stale, [JobSpec(JobKind.EXPORT)])
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE pipeline_runs SET heartbeat_at = now() - interval '1 hour' WHERE id = :id"), {"id": stale}
        )
    reaped_before = sample("firefeed_reaped_runs_total")
    failed_before = sample("firefeed_runs_finished_total", status="FAILED", trigger="api")

    reaped = reap_stale_runs(engine, stale_after_s=300)

    assert stale in reaped and fresh not in reaped
    run = store.run(stale)
    assert run.status == "FAILED"
    assert run.error is not None and run.error["type"] == "StaleRun" and run.error["step"] == "MERGE"
    assert "no heartbeat" in run.error["message"]
    assert run.report is not None and run.report["status"] == "FAILED"
    assert [s.status for s in store.steps(stale)] == ["FAILED"]
    assert store.run(fresh).status == "RUNNING"
    assert table not in tmp_tables()
    state = JobStore(engine).get(job)
    assert state is not None and state.status == "CANCELLED"
    assert store.request_run(project, "api")  # the project is free again
    assert sample("firefeed_reaped_runs_total") == reaped_before + 1
    assert sample("firefeed_runs_finished_total", status="FAILED", trigger="api") == failed_before + 1
    assert reap_stale_runs(engine, stale_after_s=300) == []


def test_pruning_deletes_old_finished_runs_but_keeps_each_projects_latest(engine: Engine) -> None:
    store = RunStore(engine)
    project = new_project()
    runs = []
    for _ in range(3):
        run_id = running_run(project)
        store.finish_run(run_id, "SUCCEEDED", report=None, error=None)
        runs.append(run_id)
    old, also_old, latest = runs
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE pipeline_runs SET finished_at = now() - interval '40 days', "
                "requested_at = requested_at - interval '40 days' WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": runs},
        )
    recent = running_run(new_project())
    store.finish_run(recent, "FAILED", report=None, error=None)

    pruned = prune_history(30, engine)

    assert pruned >= 2
    left = {str(r.id) for r in store.runs_of_project(project)}
    assert left == {latest}
    assert store.run(recent).status == "FAILED"
    assert prune_history(30, engine) == 0
    _ = (old, also_old)


def test_the_reaper_removes_the_dead_runs_unpublished_exports_and_downloads(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.config import get_settings, reset_settings
    from firefeed.export import resolve_export_path
    from firefeed.storage.keys import partial_key

    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    reset_settings()
    try:
        project = new_project()
        stale = running_run(project)
        published = resolve_export_path(get_settings().export_dir, COMPANY, project, "out.csv")
        published.parent.mkdir(parents=True)
        published.write_text("previous\n")
        partial = published.parent / partial_key(published.name, stale)
        partial.write_text("half written")
        download = get_settings().data_dir / "runs" / stale / "fetch" / "x" / "main.csv"
        download.parent.mkdir(parents=True)
        download.write_text("id\n1\n")
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE pipeline_runs SET heartbeat_at = now() - interval '1 hour' WHERE id = :id"), {"id": stale}
            )

        assert stale in reap_stale_runs(engine, stale_after_s=300)

        assert not partial.exists()
        assert published.read_text() == "previous\n"
        assert not (get_settings().data_dir / "runs" / stale).exists()
    finally:
        reset_settings()


def versions_of(engine: Engine, project: str) -> list[int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id FROM spec_versions WHERE project_id = :p ORDER BY id"), {"p": project})
        return [int(r[0]) for r in rows]


def reapply(project: str, source_url: str) -> None:
    spec: dict[str, Any] = {
        "company": COMPANY,
        "project": project,
        "sources": [{"name": "main", "url": source_url}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    RunStore().apply_spec(parse_spec(spec), spec_dir=None)


def test_pruning_deletes_the_spec_versions_no_run_or_project_refers_to(engine: Engine) -> None:
    store = RunStore()
    project = new_project()
    first = versions_of(engine, project)
    ran = running_run(project)  # refers to the first version
    store.finish_run(ran, "SUCCEEDED", report=None, error=None)
    # A tenant applying specs in a loop: every document is a version, only the last one is current.
    for n in range(5):
        reapply(project, f"https://feeds.example.test/main-{n}.csv")
    applied = versions_of(engine, project)
    assert len(applied) == 6
    with engine.connect() as conn:
        current = conn.execute(text("SELECT spec_version_id FROM projects WHERE id = :p"), {"p": project}).scalar()
    assert current == applied[-1]

    prune_history(30, engine)

    assert versions_of(engine, project) == [*first, current]
    # The runs still read their spec; applying a pruned document again stores it anew.
    assert store.run(ran).status == "SUCCEEDED"
    reapply(project, "https://feeds.example.test/main-0.csv")
    assert len(versions_of(engine, project)) == 3
    reapply(project, "https://feeds.example.test/main-4.csv")  # the version kept: reused, not stored again
    assert versions_of(engine, project)[-2] == applied[-1]
    assert len(versions_of(engine, project)) == 3


def test_the_janitor_removes_an_ended_runs_old_temporary_export_files_only(engine: Engine, run_env: Path) -> None:
    """A worker killed mid-export leaves its temporary; the run then succeeds (or dies) and the janitor removes it."""
    import os
    import time

    from firefeed.runs.maintenance import remove_stale_export_temporaries

    ended = running_run(new_project())
    RunStore().finish_run(ended, "SUCCEEDED", report=None, error=None)
    live = running_run(new_project())
    folder = run_env / COMPANY / "shared"
    folder.mkdir(parents=True)

    def aged(name: str, age_s: float) -> Path:
        path = folder / name
        path.write_bytes(b"x" * 1024)
        os.utime(path, (time.time() - age_s, time.time() - age_s))
        return path

    killed = aged(f"..out.csv.{ended[:8]}.partial.8pbmjk9v.tmp", 3600)
    killed_before = aged(f"...out.csv.{ended[:8]}.partial.8pbmjk9v.tmp.pcaks6hx.tmp", 3600)
    young = aged(f"..out.csv.{ended[:8]}.partial.youngone.tmp", 5)
    # Another project's run writing into the same folder, still in progress (in a long query: an old mtime).
    other = aged(f"..out.csv.{live[:8]}.partial.abcdefgh.tmp", 3600)
    user = aged("out.csv.tmp", 3600)
    published = aged("out.csv", 3600)
    # The copy kept beside a large export for its next write (storage/spares.py), and one whose export is gone.
    spare = aged(".out.csv.spare", 3600)
    orphan = aged(".gone.csv.spare", 5)

    removed = remove_stale_export_temporaries(engine, stale_after_s=300)

    assert sorted(removed) == sorted([str(killed.resolve()), str(killed_before.resolve()), str(orphan.resolve())])
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (young, other, user, published, spare))
