"""A task of a run logs with the run's fields from its start to Celery's line on its outcome (#48)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from celery.signals import task_postrun, task_prerun

from firefeed.logging import TEXT_FORMAT, RunContextFilter
from firefeed.runs.contract import JobKind, JobSpec
from firefeed.runs.jobs import JobStore
from firefeed.runs.service import RunStore
from firefeed.tasks import pipeline, signals, steps
from tests.integration.conftest import new_company
from tests.integration.test_api import add_project

pytestmark = pytest.mark.integration

assert signals  # imported as a worker imports it (celeryconfig `imports`): its handlers are connected


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.addFilter(RunContextFilter())
        self.setFormatter(logging.Formatter(TEXT_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture()
def lines() -> _Lines:
    handler = _Lines()
    logger = logging.getLogger("firefeed.test.task_fields")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)


def _during(task: object, task_id: str, args: list[object]) -> None:
    log = logging.getLogger("firefeed.test.task_fields")
    task_prerun.send(sender=task, task_id=task_id, task=task, args=args)
    log.info("inside")
    task_postrun.send(sender=task, task_id=task_id, task=task, args=args)
    log.info("after")


def test_a_step_jobs_lines_name_its_run_step_and_job(run_env: Path, tmp_path: Path, lines: _Lines) -> None:
    company, _ = new_company()
    run_id = RunStore().request_run(add_project(company, tmp_path), "cli")
    (job_id,) = JobStore().create(run_id, [JobSpec(JobKind.MERGE)])

    _during(steps.merge, "t-merge", [job_id])
    inside, after = lines.lines
    assert f"run_id={run_id}" in inside and "step=MERGE" in inside and f"job={job_id}" in inside
    assert "run_id=- " in after and "job=- " in after  # left at the task's end: the next task is another run's


def test_a_root_tasks_lines_name_its_run(lines: _Lines) -> None:
    _during(pipeline.run, "t-root", ["3f1d1c8e-0000-4000-8000-000000000000"])
    assert "run_id=3f1d1c8e-0000-4000-8000-000000000000" in lines.lines[0]
    assert "run_id=- " in lines.lines[1]
