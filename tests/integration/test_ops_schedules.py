"""Schedules from the database: each due slot starts one run, edits count without a restart, busy is said once."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from firefeed import metrics
from firefeed.logging import RunContextFilter
from firefeed.runs.maintenance import db_now, latest_slot, tick
from firefeed.runs.service import RunStore
from firefeed.spec.cron import parse_cron
from firefeed.spec.loader import parse_spec

pytestmark = pytest.mark.integration


def spec_of(company: str, project: str, schedule: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "https://feeds.example.test/main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    if schedule is not None:
        spec["schedule"] = schedule
    return spec


def scheduled_project(schedule: str | None, company: str | None = None) -> str:
    project = "sched_" + uuid.uuid4().hex[:10]
    RunStore().apply_spec(parse_spec(spec_of(company or "ops_sched", project, schedule)), spec_dir=None)
    return project


def request_only(project: str) -> str:
    """Start a run without a broker: the lock and the run row are what the tick is about."""
    return RunStore().request_run(project, "beat")


def runs_of(project: str) -> list[Any]:
    return RunStore().runs_of_project(project)


def sample(name: str, **labels: str) -> float:
    body, _ = metrics.render(fleet=False)
    for n, lbl, value in metrics.iter_samples(body.decode()):
        if n == name and lbl == labels:
            return value
    return 0.0


def test_the_latest_slot_of_a_cron_is_found_at_or_before_a_time() -> None:
    at = datetime(2026, 11, 30, 12, 7, 30, tzinfo=UTC)  # a Monday
    assert latest_slot(parse_cron("*/5 * * * *"), at) == datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    assert latest_slot(parse_cron("7 12 * * *"), at) == datetime(2026, 11, 30, 12, 7, tzinfo=UTC)
    assert latest_slot(parse_cron("0 3 * * 1"), at) == datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    assert latest_slot(parse_cron("0 3 * * 0"), at) == datetime(2026, 11, 29, 3, 0, tzinfo=UTC)  # Sunday
    assert latest_slot(parse_cron("30 23 31 * *"), at) == datetime(2026, 10, 31, 23, 30, tzinfo=UTC)
    assert latest_slot(parse_cron("0 0 1 1 *"), at) == datetime(2026, 1, 1, tzinfo=UTC)


def test_a_due_project_gets_exactly_one_run_from_two_beat_ticks(engine: Engine) -> None:
    project = scheduled_project("*/5 * * * *")
    later = db_now(engine) + timedelta(minutes=6)
    started_before = sample("firefeed_scheduled_runs_total", outcome="started")

    first = tick(engine, now=later, start=request_only)
    second = tick(engine, now=later, start=request_only)

    assert project in first.started
    assert project not in second.started and project not in second.busy
    assert [r.trigger for r in runs_of(project)] == ["beat"]
    assert sample("firefeed_scheduled_runs_total", outcome="started") >= started_before + 1


def test_two_beats_ticking_at_once_start_one_run(engine: Engine) -> None:
    project = scheduled_project("* * * * *")
    later = db_now(engine) + timedelta(minutes=2)
    barrier = threading.Barrier(2)
    results = []

    def beat() -> None:
        barrier.wait()
        results.append(tick(engine, now=later, start=request_only))

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(runs_of(project)) == 1
    assert sum(project in r.started for r in results) == 1


def test_a_scheduled_start_through_the_queues_enqueues_a_beat_run(engine: Engine) -> None:
    project = scheduled_project("*/10 * * * *")
    result = tick(engine, now=db_now(engine) + timedelta(minutes=11))
    assert project in result.started, result
    (run,) = runs_of(project)
    assert (str(run.id), run.trigger) == (result.started[project], "beat")


def test_a_busy_project_skips_its_slot_counted_and_logged_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    project = scheduled_project("*/5 * * * *")
    active = RunStore().request_run(project, "api")
    later = db_now(engine) + timedelta(minutes=6)
    busy_before = sample("firefeed_scheduled_runs_total", outcome="busy")
    refused_before = sample("firefeed_lock_refusals_total", trigger="beat")

    caplog.handler.addFilter(RunContextFilter())
    with caplog.at_level(logging.INFO, logger="firefeed.runs.maintenance"):
        first = tick(engine, now=later, start=request_only)
        second = tick(engine, now=later, start=request_only)

    assert project in first.busy and project not in second.busy
    assert [str(r.id) for r in runs_of(project)] == [active]
    said = [r for r in caplog.records if project in r.getMessage() and "busy" in r.getMessage()]
    assert len(said) == 1
    assert active in said[0].getMessage()
    assert getattr(said[0], "project", None) == project
    assert sample("firefeed_scheduled_runs_total", outcome="busy") == busy_before + 1
    assert sample("firefeed_lock_refusals_total", trigger="beat") == refused_before + 1


def test_a_schedule_edited_through_the_api_changes_the_next_run_without_a_restart(
    engine: Engine, tmp_path: Path
) -> None:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread
    from firefeed.runs.tokens import TokenStore

    company = "ops_" + uuid.uuid4().hex[:8]
    project = scheduled_project("0 0 1 1 *", company=company)  # once a year
    soon = db_now(engine) + timedelta(minutes=6)
    assert project not in tick(engine, now=soon, start=request_only).started

    auth = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    with ServerThread(create_app()) as base, httpx.Client(base_url=base, timeout=20) as http:
        r = http.put(
            f"/api/projects/{project}", headers=auth, content=json.dumps(spec_of(company, project, "*/5 * * * *"))
        )
        assert r.status_code in (200, 201), r.text

    soon = db_now(engine) + timedelta(minutes=6)
    assert project in tick(engine, now=soon, start=request_only).started
    # And back: a schedule moved to next year does not fire at the next five-minute slot.
    RunStore().request_cancel(str(runs_of(project)[0].id))
    RunStore().apply_spec(parse_spec(spec_of(company, project, "0 0 1 1 *")), spec_dir=None)
    assert project not in tick(engine, now=soon + timedelta(minutes=5), start=request_only).started


def test_a_schedule_that_does_not_parse_is_reported_not_run(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    project = scheduled_project("*/5 * * * *")
    with engine.begin() as conn:
        conn.execute(text("UPDATE projects SET schedule = 'every day' WHERE id = :p"), {"p": project})
    with caplog.at_level(logging.DEBUG, logger="firefeed.runs.maintenance"):
        first = tick(engine, now=db_now(engine) + timedelta(minutes=6), start=request_only)
        tick(engine, now=db_now(engine) + timedelta(minutes=6), start=request_only)
    assert project in first.invalid and "every day" in first.invalid[project]
    warned = [r for r in caplog.records if project in r.getMessage() and r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert runs_of(project) == []


def test_beat_sends_the_tick_and_the_maintenance_tasks_by_their_registered_names() -> None:
    import importlib

    from firefeed.celery_app import app

    for module in app.conf.imports:
        importlib.import_module(module)
    entries = app.conf.beat_schedule
    assert {e["task"] for e in entries.values()} == {
        "firefeed.schedules.tick",
        "firefeed.maintenance.janitor",
        "firefeed.maintenance.reap",
        "firefeed.maintenance.prune",
        "firefeed.alerts.sweep",
    }
    for entry in entries.values():
        assert entry["task"] in app.tasks
        assert entry["options"]["expires"] == entry["schedule"]
