"""The per-project lock under real concurrency: HTTP clients, and `firefeed.pipeline.trigger` sent by name."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from firefeed.db.models import PipelineRun
from firefeed.runs.lock import project_lock_key, with_project_pipeline_lock
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore
from firefeed.spec.loader import parse_spec
from tests.integration.celery_workers import (
    bare_client_send,
    celery_workers,
    flush_broker,
    purge_memory_broker,
    worker_env,
)
from tests.integration.conftest import write_csv
from tests.services import MEMORY_BROKER, backend_for, broker_url, redis_db, requires_shared_broker

pytestmark = pytest.mark.integration

# Its own Redis database: the distributed tests use 13, and this test flushes what it used.
TRIGGER_REDIS_URL = os.environ.get("FIREFEED_TEST_TRIGGER_REDIS_URL", redis_db(12))
# "Immediately": a refused request must not wait for the winner's run, only for its commit.
IMMEDIATE_S = 2.0


def new_project(folder: Path) -> tuple[str, str, dict[str, str]]:
    """(company, project, auth header) for a fresh project with a local CSV."""
    company, project = "lk_" + uuid.uuid4().hex[:10], "p_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "main.csv", ["id", "title"], [["A1", "Shoe"], ["A2", "Boot"]])
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    RunStore().apply_spec(parse_spec(spec), spec_dir=folder)
    return company, project, {"Authorization": f"Bearer {TokenStore().create(company)}"}


def runs_of(project: str) -> list[PipelineRun]:
    return RunStore().runs_of_project(project, limit=1000)


def advisory_locks_held(store: RunStore) -> int:
    """Advisory locks held by anyone in this test database."""
    with store.sessions() as s:
        return int(
            s.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            ).scalar_one()
        )


def race(n: int, call: Any) -> list[tuple[Any, float]]:
    """Run `call(i)` in n threads released at the same instant; [(result, seconds)] in thread order."""
    barrier = threading.Barrier(n)
    results: list[tuple[Any, float]] = [(None, 0.0)] * n
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            t0 = time.perf_counter()
            out = call(i)
            results[i] = (out, time.perf_counter() - t0)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return results


def test_the_lock_key_is_derived_as_the_spec_says() -> None:
    assert project_lock_key("shoes_it") == -5106024346557143263
    assert project_lock_key("p1") == -701064020606552029
    assert project_lock_key("00000000-0000-0000-0000-000000000001") == 8845554376707389133


def test_fifty_simultaneous_requests_for_one_project_give_one_202_and_49_immediate_409s_naming_it(
    base_url: str, tmp_path: Path
) -> None:
    _, project, auth = new_project(tmp_path)
    limits = httpx.Limits(max_connections=60, max_keepalive_connections=60)
    with httpx.Client(base_url=base_url, timeout=30, limits=limits) as http:
        http.get("/healthz")
        answers = race(50, lambda i: http.post(f"/api/projects/{project}/pipeline/run", headers=auth))

    codes = Counter(r.status_code for r, _ in answers)
    assert codes == {202: 1, 409: 49}, codes
    winner = next(r for r, _ in answers if r.status_code == 202).json()["run_id"]
    busy = [(r.json(), seconds) for r, seconds in answers if r.status_code == 409]
    assert {body["run_id"] for body, _ in busy} == {winner}
    assert all(body["error"] == "pipeline_busy" for body, _ in busy)
    slowest = max(seconds for _, seconds in busy)
    assert slowest < IMMEDIATE_S, f"a 409 took {slowest:.2f}s"
    assert [str(r.id) for r in runs_of(project)] == [winner]
    RunStore().request_cancel(winner)


def test_two_projects_requested_at_the_same_instant_are_both_accepted(base_url: str, tmp_path: Path) -> None:
    _, first, auth_first = new_project(tmp_path / "a")
    _, second, auth_second = new_project(tmp_path / "b")
    targets = [(first, auth_first), (second, auth_second)]
    with httpx.Client(base_url=base_url, timeout=30) as http:
        answers = race(2, lambda i: http.post(f"/api/projects/{targets[i][0]}/pipeline/run", headers=targets[i][1]))
    assert [r.status_code for r, _ in answers] == [202, 202]
    for r, _ in answers:
        RunStore().request_cancel(r.json()["run_id"])


def test_the_lock_is_released_at_commit_and_leaves_no_advisory_lock(base_url: str, tmp_path: Path) -> None:
    store = RunStore()
    _, project, auth = new_project(tmp_path)
    with httpx.Client(base_url=base_url, timeout=30) as http:
        run_id = http.post(f"/api/projects/{project}/pipeline/run", headers=auth).json()["run_id"]
    assert advisory_locks_held(store) == 0
    # The project is busy because of its run, not because of a lock left behind.
    store.request_cancel(run_id)
    assert store.request_run(project, "cli")


def test_a_handler_that_raises_under_the_lock_leaves_no_run_and_no_lock(base_url: str, tmp_path: Path) -> None:
    store = RunStore()
    _, project, auth = new_project(tmp_path)

    def create_then_crash(s: Session) -> None:
        s.add(PipelineRun(id=uuid.uuid4(), project_id=project, company_id="x", status="PENDING", trigger="cli"))
        s.flush()
        raise RuntimeError("handler crashed after inserting its run")

    with store.sessions() as s:
        with pytest.raises(RuntimeError, match="handler crashed"):
            with_project_pipeline_lock(s, project, create_then_crash)
        # The lock is still held inside the failed transaction...
        assert advisory_locks_held(store) == 1
        s.rollback()
    # ...and the rollback released it, with the half-made run.
    assert advisory_locks_held(store) == 0
    assert runs_of(project) == []
    with httpx.Client(base_url=base_url, timeout=30) as http:
        after = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
    assert after.status_code == 202
    store.request_cancel(after.json()["run_id"])


def test_a_session_that_dies_holding_the_lock_releases_it(base_url: str, tmp_path: Path) -> None:
    store = RunStore()
    _, project, auth = new_project(tmp_path)
    with store.engine.connect() as conn:
        conn.execute(select(func.pg_try_advisory_xact_lock(project_lock_key(project))))
        with httpx.Client(base_url=base_url, timeout=30) as http:
            held = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
        assert held.status_code == 409
        assert held.json()["run_id"] is None
        conn.invalidate()  # the connection is dropped as a crashed process would drop it
    with httpx.Client(base_url=base_url, timeout=30) as http:
        after = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
    assert after.status_code == 202
    store.request_cancel(after.json()["run_id"])


@contextmanager
def celery_on(url: str) -> Iterator[Any]:
    """FireFeed's Celery app pointed at broker `url` (results there too, or in memory), restored afterwards."""
    from firefeed.celery_app import app

    def forget_connections() -> None:
        # The app caches its broker pool, producer pool and result backend; drop them so the new URLs apply.
        app._pool = None
        app.amqp._producer_pool = None
        app._backend_cache = None
        if hasattr(app._local, "backend"):
            del app._local.backend

    saved = {key: app.conf[key] for key in ("broker_url", "result_backend")}
    app.conf.update(broker_url=url, result_backend=backend_for(url))
    forget_connections()
    try:
        yield app
    finally:
        app.conf.update(saved)
        forget_connections()


def test_twenty_clients_sending_the_trigger_task_by_name_get_exactly_one_accepted(
    database_url: str, tmp_path: Path
) -> None:
    from celery.contrib.testing.worker import start_worker

    _, project, _ = new_project(tmp_path)
    url = broker_url(TRIGGER_REDIS_URL)  # without Redis: the in-memory broker, same in-process worker
    if url == MEMORY_BROKER:
        purge_memory_broker()  # runs other tests sent and nobody took must not start in this worker
    else:
        flush_broker(url)
    try:
        # No step queue: the accepted run's step jobs are never picked up, so it stays active.
        with (
            celery_on(url) as app,
            start_worker(
                app,
                pool="threads",
                concurrency=20,
                queues=["pipeline", "control"],
                perform_ping_check=False,
                shutdown_timeout=30,
            ),
        ):
            answers = race(20, lambda i: app.send_task("firefeed.pipeline.trigger", args=[project]).get(timeout=30))
            statuses = Counter(answer["status"] for answer, _ in answers)
            assert statuses == {"accepted": 1, "busy": 19}, statuses
            accepted = next(a["run_id"] for a, _ in answers if a["status"] == "accepted")
            assert {a["run_id"] for a, _ in answers if a["status"] == "busy"} <= {accepted, None}
            assert [str(r.id) for r in runs_of(project)] == [accepted]
            assert runs_of(project)[0].trigger == "task"
            # Stop the accepted run so the worker's root task ends before the worker does.
            store = RunStore()
            store.request_cancel(accepted)
            deadline = time.monotonic() + 20
            while store.run(accepted).status in ("PENDING", "RUNNING") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.run(accepted).status == "CANCELLED"
    finally:
        if url != MEMORY_BROKER:
            flush_broker(url)


def wait_status(store: RunStore, run_id: str, statuses: tuple[str, ...], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while (status := store.run(run_id).status) not in statuses and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


@requires_shared_broker
def test_a_trigger_by_task_name_is_answered_while_a_run_holds_the_only_pipeline_slot(
    database_url: str, tmp_path: Path
) -> None:
    """SPEC 1: busy at once, by task name too. With PIPELINE_CONCURRENCY=1 the active run's root task holds
    the pipeline worker's only slot for the whole run: the trigger, beat's tick and the maintenance tasks
    are answered by the control worker meanwhile, and no second run starts when the first one ends."""
    _, project, _ = new_project(tmp_path / "feed")
    url = broker_url(TRIGGER_REDIS_URL)
    flush_broker(url)
    env = worker_env(database_url, url, tmp_path, PIPELINE_CONCURRENCY="1")
    store = RunStore()
    try:
        # No import worker: the run's FETCH job waits on its queue, so the run stays RUNNING until cancelled.
        with celery_workers(env, queues=("pipeline", "control"), log_dir=tmp_path), celery_on(url) as app:
            first = app.send_task("firefeed.pipeline.trigger", args=[project]).get(timeout=30)
            assert first["status"] == "accepted"
            run_id = first["run_id"]
            assert wait_status(store, run_id, ("RUNNING",)) == "RUNNING"  # its root task holds the slot
            routed = app.send_task("firefeed.pipeline.trigger", args=[project]).get(timeout=30)
            bare = bare_client_send(url, "firefeed.pipeline.trigger", [project], tmp_path)
            tick = app.send_task("firefeed.schedules.tick").get(timeout=30)
            janitor = app.send_task("firefeed.maintenance.janitor").get(timeout=30)
            assert store.run(run_id).status == "RUNNING"  # answered while the run is still going
            assert routed == bare == {"status": "busy", "run_id": run_id}
            assert isinstance(tick, dict) and isinstance(janitor, list)
            store.request_cancel(run_id)
            assert wait_status(store, run_id, ("CANCELLED", "FAILED", "SUCCEEDED")) == "CANCELLED"
            time.sleep(1.0)  # a trigger that had waited behind the run would start a second one now
            assert [str(r.id) for r in runs_of(project)] == [run_id]
    finally:
        flush_broker(url)
