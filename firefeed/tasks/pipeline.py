"""Public pipeline tasks: `firefeed.pipeline.trigger(project_id)` and `firefeed.pipeline.run(run_id)`.

Both names are a wire contract for other services (`send_task` by name).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from firefeed.celery_app import app
from firefeed.errors import NotFoundError, PipelineBusyError
from firefeed.tasks.dispatch import RUN_TASK, TRIGGER_TASK

log = logging.getLogger(__name__)


@app.task(name=TRIGGER_TASK, ignore_result=False)
def trigger(
    project_id: str, accept_drop: bool = False, accept_invalid: bool = False, full: bool = False
) -> dict[str, Any]:
    """Request a run through the project lock; {"status": "accepted"|"busy"|"unknown_project", "run_id"}.

    `accept_drop=True` (keyword or second argument): the run may publish exports that lose more than max_drop;
    `accept_invalid=True` (keyword or third): exports with more items in channel error than max_invalid (C3);
    `full=True` (keyword or fourth): recompute every item even when no input changed (SPEC 11 I2).
    """
    from firefeed.runs.requests import start_run

    try:
        run_id = start_run(
            str(project_id),
            "task",
            accept_drop=accept_drop is True,
            accept_invalid=accept_invalid is True,
            full=full is True,
        )
    except PipelineBusyError as err:
        return {"status": "busy", "run_id": err.run_id}
    except NotFoundError:
        return {"status": "unknown_project", "run_id": None}
    return {"status": "accepted", "run_id": run_id}


@app.task(name=RUN_TASK, ignore_result=False, bind=True)
def run(self: Task, run_id: str) -> dict[str, Any]:
    """The root task: drive one run through FETCH, PARSE, MERGE, RULES, EXPORT; returns the RunReport.

    Its dispatcher is made for this run from the queues this worker consumes: jobs of
    those run in place, and RULES fans out only when another worker takes the rules queue.
    A client that sends it by name without a queue reaches the control worker, whose
    two slots must stay free for triggers: there it hands itself on to the `pipeline`
    queue under the same task id and reply queue (RabbitMQ's rpc:// results go to the
    caller's own queue), so the caller's result and a cancel still find it.
    """
    from firefeed.pipeline.driver import drive_run
    from firefeed.tasks.dispatch import CeleryDispatcher, worker_queues
    from firefeed.tasks.queues import Queue

    known_run(str(run_id))
    consumed = worker_queues(self.app)
    if Queue.PIPELINE.value not in consumed:
        handed = self.app.signature(RUN_TASK, args=[run_id], queue=Queue.PIPELINE.value, reply_to=self.request.reply_to)
        raise self.replace(handed)
    return drive_run(str(run_id), dispatcher=CeleryDispatcher(consumed))


def known_run(run_id: str) -> None:
    """NotFoundError, saying the likely cause, when this fleet's database has no such run.

    A root task names a run its trigger recorded; a worker that cannot find it most
    likely shares its broker with another fleet that has another database (the two
    take each other's tasks from the same queues).
    """
    from firefeed.runs.service import RunStore

    try:
        RunStore().run(run_id)
    except NotFoundError:
        raise NotFoundError(
            f"unknown run {run_id!r} in this fleet's database: another fleet, with another database, may be "
            "using this broker; give each fleet its own broker (a Redis database or a RabbitMQ virtual host)"
        ) from None
