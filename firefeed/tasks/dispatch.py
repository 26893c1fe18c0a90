"""Sending tasks by name, so callers need not import the task modules (or Celery workers' code)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from firefeed.runs.contract import JobKind
from firefeed.tasks.queues import Queue
from firefeed.tasks.routing import TASK_FOR_KIND

RUN_TASK = "firefeed.pipeline.run"
TRIGGER_TASK = "firefeed.pipeline.trigger"


def enqueue_run(run_id: str) -> None:
    """Send the root task of a committed run to the `pipeline` queue."""
    from firefeed.celery_app import app

    # The task id is the run id, so a cancel can revoke the root task without storing anything.
    # No result: the RunReport is in the database. On RabbitMQ's rpc:// backend an unread result
    # would wait in this sender's reply queue for a day, one per run (a caller by name still gets it).
    app.send_task(RUN_TASK, args=[run_id], queue=Queue.PIPELINE.value, task_id=run_id, ignore_result=True)


def worker_queues(app: Any) -> frozenset[str]:
    """The queues the worker this code runs in consumes (`-Q`, or every declared queue without it).

    The worker selects them on its app before its pool starts (prefork children
    inherit the selection), so a task reads them from its own app, at run time.
    """
    queues = app.amqp.queues
    return frozenset((queues.consume_from or queues).keys())


class CeleryDispatcher:
    """Sends each job to its queue by task name; constructed by the root task for its run.

    When this very worker also consumes the job's queue (the one-process mode of
    the demo and tests, or one worker for every queue), the job runs right here:
    the root already holds a pool slot, and a job queued behind it could wait
    for that slot forever. For the same reason RULES fans out into chunk jobs
    only when another worker consumes the rules queue.
    """

    def __init__(self, consumed: Iterable[str], *, settings: Any = None, engine: Any = None) -> None:
        self.consumed = frozenset(consumed)
        self.settings, self.engine = settings, engine
        self.fans_out_rules = Queue.RULES.value not in self.consumed
        self.runs_elsewhere = any(queue.value not in self.consumed for _, queue in TASK_FOR_KIND.values())

    def submit(self, kind: JobKind, job_ids: Sequence[int]) -> None:
        task, queue = TASK_FOR_KIND[kind]
        if queue.value in self.consumed:
            from firefeed.pipeline.jobs import run_job

            for job_id in job_ids:
                run_job(job_id, settings=self.settings, engine=self.engine)
            return
        from firefeed.celery_app import app

        for job_id in job_ids:
            app.send_task(task, args=[job_id], queue=queue.value)

    def hint(self, kind: JobKind) -> str:
        task, queue = TASK_FOR_KIND[kind]
        return f"is a worker consuming queue {queue.value!r} (task {task})?"
