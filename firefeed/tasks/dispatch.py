"""Sending tasks by name, so callers need not import the task modules (or Celery workers' code)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from firefeed.tasks.queues import Queue

RUN_TASK = "firefeed.pipeline.run"
TRIGGER_TASK = "firefeed.pipeline.trigger"


def enqueue_run(run_id: str) -> None:
    """Send the root task of a committed run to the `pipeline` queue."""
    from firefeed.celery_app import app

    # The task id is the run id, so a cancel can revoke the root task without storing anything.
    # No result: the RunReport is in the database. On RabbitMQ's rpc:// backend an unread result
    # would wait in this sender's reply queue for a day, one per run (a caller by name still gets it).
    app.send_task(RUN_TASK, args=[run_id], queue=Queue.PIPELINE.value, task_id=run_id, ignore_result=True)


_consumed_queues: set[str] = set()


def note_worker_queues(queues: set[str]) -> None:
    """Remember which queues this worker process consumes (set once at worker start-up)."""
    _consumed_queues.clear()
    _consumed_queues.update(queues)


class CeleryDispatcher:
    """Sends each job to its queue by task name.

    When this very worker also consumes the job's queue (the one-process mode of
    the demo and tests, or one worker for every queue), the job runs right here:
    the root already holds a pool slot, and a job queued behind it could wait
    for that slot forever.
    """

    def __init__(self, settings: Any = None, engine: Any = None) -> None:
        self.settings, self.engine = settings, engine

    def submit(self, kind: str, job_ids: Sequence[int]) -> None:
        from firefeed.celery_app import app
        from firefeed.pipeline.orchestrator import TASK_FOR_KIND, run_job

        task, queue = TASK_FOR_KIND[kind]
        if queue.value in _consumed_queues:
            for job_id in job_ids:
                run_job(job_id, settings=self.settings, engine=self.engine)
            return
        for job_id in job_ids:
            app.send_task(task, args=[job_id], queue=queue.value)

    def fans_out(self, kind: str) -> bool:
        from firefeed.pipeline.orchestrator import TASK_FOR_KIND

        return TASK_FOR_KIND[kind][1].value not in _consumed_queues
