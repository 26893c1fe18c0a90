"""The batch driver: one process runs one run (`firefeed run`, the demo, the processes worker, tests).

It is the same driver the root Celery task uses (pipeline/driver.py), with a
dispatcher that runs every job right here: one core, two drivers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine
from firefeed.pipeline.driver import StepHook, drive_run
from firefeed.pipeline.jobs import run_job, run_source_jobs_phased
from firefeed.runs.contract import JobKind


class InlineDispatcher:
    """Runs each job at once in this process; RULES never fans out (there is no one to fan out to)."""

    fans_out_rules = False
    runs_elsewhere = False

    def __init__(self, settings: Settings | None = None, engine: Engine | None = None) -> None:
        self.settings, self.engine = settings, engine

    def submit(self, kind: JobKind, job_ids: Sequence[int]) -> None:
        if kind is JobKind.SOURCE:
            # Every FETCH, then every PARSE: the timeline shows the two steps apart.
            run_source_jobs_phased(job_ids, settings=self.settings, engine=self.engine)
            return
        for job_id in job_ids:
            run_job(job_id, settings=self.settings, engine=self.engine)

    def hint(self, kind: JobKind) -> str:
        return "the jobs run in this process"


def execute_run(
    run_id: str,
    *,
    engine: Engine | None = None,
    settings: Settings | None = None,
    hook: StepHook | None = None,
) -> dict[str, Any]:
    """Drive a PENDING run to its end in this process and return its RunReport."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    return drive_run(run_id, dispatcher=InlineDispatcher(settings, engine), hook=hook, settings=settings, engine=engine)
