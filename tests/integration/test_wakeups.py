"""The run's wakeups: a job's change of status or result, and a cancel, wake the driver; a heartbeat does not."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import Engine

from firefeed.runs.contract import JobKind, JobSpec
from firefeed.runs.jobs import JobStore
from firefeed.runs.service import RunStore
from firefeed.runs.wakeups import RunWakeups
from firefeed.spec.loader import parse_spec

pytestmark = pytest.mark.integration


def running_run() -> str:
    project = "wake_" + uuid.uuid4().hex[:10]
    spec: dict[str, Any] = {
        "company": "wakeups",
        "project": project,
        "sources": [{"name": "main", "url": "https://feeds.example.test/main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    store = RunStore()
    store.apply_spec(parse_spec(spec), spec_dir=None)
    run_id = store.request_run(project, "api")
    assert store.mark_running(run_id)
    return run_id


def test_a_job_s_changes_wake_the_run_s_listener_and_no_other(engine: Engine) -> None:
    run_id, other = running_run(), running_run()
    jobs = JobStore(engine)
    (job,) = jobs.create(run_id, [JobSpec(JobKind.EXPORT)])
    (other_job,) = jobs.create(other, [JobSpec(JobKind.EXPORT)])
    with RunWakeups(engine, run_id) as wakeups:
        assert wakeups.live
        assert wakeups.wait(0.05) is False  # nothing happened yet

        jobs.claim(other_job, lease_s=30)
        assert wakeups.wait(0.2) is False  # another run's job

        assert jobs.claim(job, lease_s=30) is not None
        assert wakeups.wait(2.0) is True  # PENDING -> RUNNING
        jobs.heartbeat(job)
        assert wakeups.wait(0.2) is False  # a heartbeat changes neither status nor result
        jobs.save_partial(job, {"fetched": True})
        assert wakeups.wait(2.0) is True  # a result (a source's FETCH part)
        jobs.succeed(job, {"rows": 1})
        assert wakeups.wait(2.0) is True
        assert wakeups.wait(0.05) is False  # each notification wakes once


def test_a_change_made_while_nobody_waits_is_kept_for_the_next_wait(engine: Engine) -> None:
    run_id = running_run()
    jobs = JobStore(engine)
    (job,) = jobs.create(run_id, [JobSpec(JobKind.EXPORT)])
    with RunWakeups(engine, run_id) as wakeups:
        jobs.claim(job, lease_s=30)  # before anyone waits: sending jobs, then waiting, misses nothing
        time.sleep(0.1)
        started = time.monotonic()
        assert wakeups.wait(5.0) is True
        assert time.monotonic() - started < 1.0


def test_a_recorded_cancel_wakes_the_listener(engine: Engine) -> None:
    run_id = running_run()
    store = RunStore()
    with RunWakeups(engine, run_id) as wakeups:
        timer = threading.Timer(0.2, lambda: store.request_cancel(run_id))
        timer.start()
        try:
            assert wakeups.wait(5.0) is True
        finally:
            timer.join()


def test_a_lost_listener_connection_turns_the_wakeups_off_instead_of_failing(engine: Engine) -> None:
    run_id = running_run()
    with RunWakeups(engine, run_id) as wakeups:
        with wakeups._conn.cursor() as cur:  # type: ignore[union-attr]
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
        with engine.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
        assert wakeups.wait(2.0) is False
        assert wakeups.live is False
        assert wakeups.wait(0.01) is False
