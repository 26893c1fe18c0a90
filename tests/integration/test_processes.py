"""The processes worker in this process, on the real Postgres: dispatch, outcomes, scope, leases, timeouts.

Each test uses its own workspace id, so the tests share the session database
without seeing each other's rows. Worker processes are in test_processes_workers.py.
"""

from __future__ import annotations

import json
import select
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from sqlalchemy import Engine

from firefeed.config import get_settings
from firefeed.db.engine import raw_connection
from firefeed.errors import ConfigError
from firefeed.processes._sql import parse_queries, query
from firefeed.processes.config import ProcessConfig
from firefeed.processes.registry import RUNNABLES
from firefeed.processes.worker import Worker
from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv

pytestmark = pytest.mark.integration


def insert(engine: Engine, function: str, input_data: Any, *, workspace: str, worker_type: str = "etl") -> int:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO processes (worker_type, workspace_id, function, input_data) VALUES (%s, %s, %s, %s) "
            "RETURNING id",
            (worker_type, workspace, function, json.dumps(input_data)),
        )
        return int(cur.fetchone()[0])


def row(engine: Engine, process_id: int) -> dict[str, Any]:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM processes WHERE id = %s", (process_id,))
        names = [d[0] for d in cur.description]
        return dict(zip(names, cur.fetchone(), strict=True))


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture()
def workspace() -> str:
    return f"ws{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def make_worker(engine: Engine, workspace: str) -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def make(*, timeout_s: float | None = None, **config: Any) -> Worker:
        worker = Worker(
            engine=engine,
            settings=get_settings(),
            workspace_id=workspace,
            worker_type="etl",
            config=ProcessConfig(**config),
            timeout_s=timeout_s,
        )
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.close()


@pytest.fixture()
def running_worker(make_worker: Callable[..., Worker]) -> Iterator[Callable[..., Worker]]:
    """Starts Worker.run() in a thread; stops it at the end of the test."""
    threads: list[tuple[Worker, threading.Thread]] = []

    def start(**kwargs: Any) -> Worker:
        kwargs.setdefault("grace_s", 0)
        worker = make_worker(**kwargs)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        threads.append((worker, thread))
        return worker

    yield start
    for worker, thread in threads:
        worker.stop()
        thread.join(15)
        assert not thread.is_alive()


def drain(make_worker: Callable[..., Worker]) -> int:
    return make_worker().drain()


# -- the table, the claim index, the trigger ----------------------------------------------
def test_the_claim_query_is_served_by_the_partial_claim_index(engine: Engine, workspace: str) -> None:
    for _ in range(3):
        insert(engine, "firefeed.ping", {}, workspace=workspace)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")  # a tiny table is scanned otherwise; we ask if the index fits
        cur.execute(
            "EXPLAIN " + query("claim_process"),
            {"claimed_by": "t:1", "worker_type": "etl", "workspace_id": workspace},
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
        conn.rollback()
    assert "ix_processes_claim" in plan, plan
    assert "Sort" not in plan, plan  # the index order is the claim order


def test_the_model_and_the_migrations_agree_on_the_processes_table(engine: Engine) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from firefeed.db.models import Base
    from firefeed.processes.models import Process

    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    mine = [d for d in diffs if Process.__tablename__ in repr(d)]
    assert mine == []


def test_an_insert_notifies_the_channel_with_the_rows_scope(engine: Engine, database_url: str, workspace: str) -> None:
    listener = psycopg2.connect(database_url)
    try:
        listener.autocommit = True
        listener.cursor().execute(query("listen"))
        insert(engine, "firefeed.ping", {}, workspace=workspace, worker_type="etl")
        assert select.select([listener], [], [], 5)[0]
        listener.poll()
        payloads = [json.loads(n.payload) for n in listener.notifies]
    finally:
        listener.close()
    assert {"worker_type": "etl", "workspace_id": workspace} in payloads


def test_the_query_loader_reads_every_named_block() -> None:
    queries = parse_queries("-- a --\n-- what a does\nSELECT 1;\n\n-- b_c --\n-- what b does\nSELECT\n  2;\n")
    assert queries == {"a": "SELECT 1;", "b_c": "SELECT\n  2;"}
    assert query("claim_process").startswith("UPDATE processes")


# -- dispatch and outcomes ----------------------------------------------------------------------
def test_an_unknown_function_fails_the_row_with_the_known_names(engine: Engine, workspace: str, make_worker) -> None:
    pid = insert(engine, "firefeed.pipeline.runn", {"project": "p"}, workspace=workspace)
    assert make_worker().drain() == 1
    r = row(engine, pid)
    assert r["status"] == "failed"
    assert "unknown function 'firefeed.pipeline.runn'" in r["error_message"]
    for name in RUNNABLES:
        assert name in r["error_message"]
    assert r["claimed_by"] and r["claimed_at"] is not None


@pytest.mark.parametrize(
    ("input_data", "expected"),
    [
        ({}, "input_data is missing 'project'"),
        ({"project": 42}, "input_data.project must be a non-empty string, got the number 42"),
        ({"project": "  "}, "input_data.project must be a non-empty string, got an empty string"),
        (["shoes"], "input_data must be a JSON object, got an array"),
        ({"project": "p", "when": "now"}, "input_data has unexpected key(s) 'when'"),
    ],
)
def test_bad_input_data_fails_the_row_saying_what_is_expected(
    engine: Engine, workspace: str, make_worker, input_data: Any, expected: str
) -> None:
    pid = insert(engine, "firefeed.pipeline.run", input_data, workspace=workspace)
    make_worker().drain()
    r = row(engine, pid)
    assert r["status"] == "failed"
    assert expected in r["error_message"]
    assert 'firefeed.pipeline.run takes input_data {"project": "<project id>"}' in r["error_message"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"project": ' + "9" * 5000 + "}", "it holds a number too long to read (more than 4,300 digits)"),
        ('{"project": ' + "[" * 3000 + "]" * 3000 + "}", "it is nested too deep to read"),
    ],
    ids=["long-number", "deep"],
)
def test_input_data_python_cannot_read_fails_its_row_and_the_next_row_runs(
    engine: Engine, workspace: str, make_worker, text: str, reason: str
) -> None:
    # Postgres stores both; decoding them inside the claim rolled it back, so the row stayed pending
    # and every later claim of the workspace failed on it again.
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO processes (worker_type, workspace_id, function, input_data)"
            " VALUES ('etl', %s, 'firefeed.pipeline.run', %s::jsonb) RETURNING id",
            (workspace, text),
        )
        bad = int(cur.fetchone()[0])
    good = insert(engine, "firefeed.ping", {}, workspace=workspace)
    assert make_worker().drain() == 2
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, status, error_message FROM processes WHERE id IN (%s, %s) ORDER BY id", (bad, good))
        (_, status, error), (_, good_status, _) = cur.fetchall()
    assert status == "failed" and good_status == "completed"
    assert error.startswith(f"input_data cannot be read: {reason}; firefeed.pipeline.run takes input_data")


def _spec(tmp_path: Path, company: str, project: str, url: str = "main.csv") -> dict[str, Any]:
    write_csv(tmp_path / "main.csv", ["id", "title", "price"], [["A1", "Shoe", "10"], ["A2", "Boot", "20"]])
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": url}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def test_another_companys_project_fails_exactly_like_a_missing_one(
    engine: Engine, workspace: str, make_worker, tmp_path: Path
) -> None:
    theirs = f"p{uuid.uuid4().hex[:8]}"
    RunStore(engine).apply_spec(parse_spec(_spec(tmp_path, "someone_else", theirs)), spec_dir=tmp_path)
    other = insert(engine, "firefeed.pipeline.run", {"project": theirs}, workspace=workspace)
    missing = insert(engine, "firefeed.pipeline.run", {"project": "no_such_project"}, workspace=workspace)
    make_worker().drain()
    r_other, r_missing = row(engine, other), row(engine, missing)
    assert (r_other["status"], r_other["error_message"]) == ("failed", f"unknown project {theirs!r}")
    assert (r_missing["status"], r_missing["error_message"]) == ("failed", "unknown project 'no_such_project'")
    assert r_other["output_data"] is None
    assert RunStore(engine).runs_of_project(theirs) == []


def test_a_pipeline_run_row_completes_with_the_run_report_and_the_export(
    engine: Engine, run_env: Path, workspace: str, make_worker, tmp_path: Path
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    RunStore(engine).apply_spec(parse_spec(_spec(tmp_path, workspace, project)), spec_dir=tmp_path)
    pid = insert(engine, "firefeed.pipeline.run", {"project": project}, workspace=workspace)
    make_worker().drain()
    r = row(engine, pid)
    assert r["status"] == "completed", r["error_message"]
    assert r["error_message"] is None
    report = r["output_data"]
    assert (report["status"], report["trigger"], report["project"], report["company"]) == (
        "SUCCEEDED",
        "process",
        project,
        workspace,
    )
    assert [s["step"] for s in report["steps"]] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    (export,) = report["exports"]
    assert export["rows"] == 2
    assert (run_env / export["path"]).is_file()  # relative to the export folder (SPEC 5)


def test_a_busy_project_fails_the_row_naming_the_active_run(
    engine: Engine, workspace: str, make_worker, tmp_path: Path
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    store = RunStore(engine)
    store.apply_spec(parse_spec(_spec(tmp_path, workspace, project)), spec_dir=tmp_path)
    active = store.request_run(project, "cli")
    try:
        pid = insert(engine, "firefeed.pipeline.run", {"project": project}, workspace=workspace)
        make_worker().drain()
    finally:
        store.request_cancel(active)
    r = row(engine, pid)
    assert r["status"] == "failed"
    assert r["error_message"] == f"project {project!r} already has an active run {active}; no new run was started"
    assert r["output_data"] == {"error": "pipeline_busy", "project": project, "run_id": active}


def test_run_status_reports_only_the_workspaces_own_runs(
    engine: Engine, workspace: str, make_worker, tmp_path: Path
) -> None:
    store = RunStore(engine)
    mine, theirs = f"p{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:8]}"
    store.apply_spec(parse_spec(_spec(tmp_path, workspace, mine)), spec_dir=tmp_path)
    store.apply_spec(parse_spec(_spec(tmp_path, "someone_else", theirs)), spec_dir=tmp_path)
    my_run, their_run = store.request_run(mine, "cli"), store.request_run(theirs, "cli")
    store.request_cancel(my_run)
    store.request_cancel(their_run)
    ok = insert(engine, "firefeed.run.status", {"run_id": my_run}, workspace=workspace)
    hidden = insert(engine, "firefeed.run.status", {"run_id": their_run}, workspace=workspace)
    make_worker().drain()
    assert row(engine, ok)["output_data"]["run_id"] == my_run
    assert row(engine, ok)["output_data"]["status"] == "CANCELLED"
    assert (row(engine, hidden)["status"], row(engine, hidden)["error_message"]) == (
        "failed",
        f"unknown run {their_run!r}",
    )


def test_project_apply_creates_a_workspace_project_and_refuses_another_company(
    engine: Engine, workspace: str, make_worker, tmp_path: Path
) -> None:
    project = f"p{uuid.uuid4().hex[:8]}"
    remote = "https://feeds.example.com/main.csv"  # a row's spec has no folder: a local file would be refused
    good = insert(
        engine, "firefeed.project.apply", {"spec": _spec(tmp_path, workspace, project, remote)}, workspace=workspace
    )
    foreign = insert(
        engine, "firefeed.project.apply", {"spec": _spec(tmp_path, "someone_else", "x1", remote)}, workspace=workspace
    )
    bad = insert(engine, "firefeed.project.apply", {"spec": {"company": workspace}}, workspace=workspace)
    make_worker().drain()
    assert row(engine, good)["output_data"]["created"] is True
    assert RunStore(engine).project(project, company=workspace).company_id == workspace
    assert "is not this workspace" in row(engine, foreign)["error_message"]
    assert row(engine, bad)["status"] == "failed"
    assert "project" in row(engine, bad)["error_message"]


def test_rows_of_other_workspaces_and_worker_types_are_left_alone(engine: Engine, workspace: str, make_worker) -> None:
    mine = insert(engine, "firefeed.ping", {}, workspace=workspace)
    other_ws = insert(engine, "firefeed.ping", {}, workspace=workspace + "x")
    other_type = insert(engine, "firefeed.ping", {}, workspace=workspace, worker_type="media")
    assert make_worker().drain() == 1
    assert row(engine, mine)["status"] == "completed"
    assert row(engine, mine)["output_data"]["workspace_id"] == workspace
    for pid in (other_ws, other_type):
        assert (row(engine, pid)["status"], row(engine, pid)["claimed_by"]) == ("pending", None)


# -- leases, timeouts, concurrency -----------------------------------------------------------------------
def _orphan(engine: Engine, process_id: int, *, age_s: float) -> None:
    """Make the row look claimed by a worker that died `age_s` seconds ago."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            "UPDATE processes SET status = 'running', claimed_by = 'gone:1', claimed_at = now(), "
            "heartbeat_at = now() - make_interval(secs => %s) WHERE id = %s",
            (age_s, process_id),
        )


def test_an_orphaned_row_goes_back_to_pending_once_then_fails(engine: Engine, workspace: str, make_worker) -> None:
    pid = insert(engine, "firefeed.ping", {}, workspace=workspace)
    worker = make_worker(lease_s=5, max_attempts=2)
    _orphan(engine, pid, age_s=1)
    assert worker.store.recover_stale(lease_s=5, max_attempts=2) == []  # still within its lease
    _orphan(engine, pid, age_s=6)
    (rec,) = worker.store.recover_stale(lease_s=5, max_attempts=2)
    assert (rec.status, rec.attempts, rec.lost_by) == ("pending", 1, "gone:1")
    r = row(engine, pid)
    assert (r["status"], r["claimed_by"], r["attempts"]) == ("pending", None, 1)
    _orphan(engine, pid, age_s=6)
    (rec,) = worker.store.recover_stale(lease_s=5, max_attempts=2)
    r = row(engine, pid)
    assert (r["status"], r["attempts"]) == ("failed", 2)
    assert r["error_message"].startswith("gave up after 2 claim(s) whose worker stopped heartbeating (last: gone:1")
    assert "FIREFEED_PROCESS_MAX_ATTEMPTS=2" in r["error_message"]


def test_the_sweep_never_touches_another_scopes_rows(engine: Engine, workspace: str, make_worker) -> None:
    pid = insert(engine, "firefeed.ping", {}, workspace=workspace + "x")
    _orphan(engine, pid, age_s=60)
    assert make_worker().store.recover_stale(lease_s=1, max_attempts=2) == []
    assert row(engine, pid)["status"] == "running"


def test_a_row_past_its_timeout_fails_and_its_job_is_cancelled(engine: Engine, workspace: str, running_worker) -> None:
    running_worker(timeout_s=0.5)
    pid = insert(engine, "firefeed.ping", {"sleep_s": 30}, workspace=workspace)
    wait_for(lambda: row(engine, pid)["status"] == "failed", timeout=10)
    assert row(engine, pid)["error_message"] == (
        "timed out after 0.5 s (FIREFEED_PROCESS_TIMEOUT_S); the job was cancelled"
    )


def test_a_long_job_does_not_stop_the_worker_from_claiming_others(
    engine: Engine, workspace: str, running_worker
) -> None:
    running_worker(concurrency=2, poll_s=30)
    slow = insert(engine, "firefeed.ping", {"sleep_s": 30}, workspace=workspace)
    wait_for(lambda: row(engine, slow)["status"] == "running")
    quick = [insert(engine, "firefeed.ping", {}, workspace=workspace) for _ in range(5)]
    wait_for(lambda: all(row(engine, q)["status"] == "completed" for q in quick), timeout=10)
    assert row(engine, slow)["status"] == "running"


def test_a_running_worker_wakes_on_insert_without_waiting_for_its_poll(
    engine: Engine, workspace: str, running_worker
) -> None:
    running_worker(poll_s=60)
    time.sleep(0.3)  # let it reach its first wait
    started = time.monotonic()
    pid = insert(engine, "firefeed.ping", {}, workspace=workspace)
    wait_for(lambda: row(engine, pid)["status"] == "completed", timeout=5)
    assert time.monotonic() - started < 2


def test_stopping_releases_the_rows_that_did_not_finish_within_the_grace_period(
    engine: Engine, workspace: str, make_worker
) -> None:
    worker = make_worker(concurrency=2, grace_s=0.5)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    long = insert(engine, "firefeed.ping", {"sleep_s": 30}, workspace=workspace)
    short = insert(engine, "firefeed.ping", {"sleep_s": 0.2}, workspace=workspace)
    wait_for(lambda: row(engine, long)["status"] == "running" and row(engine, short)["status"] == "running")
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert row(engine, short)["status"] == "completed"
    r = row(engine, long)
    assert (r["status"], r["claimed_by"], r["attempts"]) == ("pending", None, 0)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FIREFEED_PROCESS_LEASE_S", "abc"),
        ("FIREFEED_PROCESS_CONCURRENCY", "0"),
        ("FIREFEED_PROCESS_MAX_ATTEMPTS", "1.5"),
        ("FIREFEED_PROCESS_POLL_S", "-1"),
    ],
)
def test_a_bad_process_setting_is_refused_naming_the_variable(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.config import get_settings, reset_settings

    monkeypatch.setenv(name, value)
    reset_settings()
    try:
        with pytest.raises(ConfigError, match=name):
            get_settings()
    finally:
        monkeypatch.delenv(name)
        reset_settings()
    assert ProcessConfig.from_settings() == ProcessConfig()
