"""Worker process hooks: Prometheus metrics that count every prefork child, and run fields on every log line.

A task of a run carries the run's fields from before it starts until Celery has logged its
outcome (`task_prerun` to `task_postrun`), so Celery's own "succeeded"/"failed" lines of a step
job name the run and the job too, not only the lines FireFeed writes while the job works.

Imported by every worker through `imports` in celeryconfig.py, which Celery
loads before it sends `celeryd_init`, so the hooks are connected in time.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    celeryd_init,
    task_postrun,
    task_prerun,
    worker_process_shutdown,
)

log = logging.getLogger(__name__)


def _queues(options: dict[str, Any]) -> list[str]:
    raw = options.get("queues") or []
    if isinstance(raw, str):
        raw = raw.split(",")
    return [q.strip() for q in raw if q and q.strip()]


@celeryd_init.connect
def _worker_metrics(sender: Any = None, instance: Any = None, conf: Any = None, options: Any = None, **_: Any) -> None:
    """In the worker's main process, before the pool forks: one metrics port for all its children."""
    from firefeed import metrics
    from firefeed.config import get_settings

    settings = get_settings()
    metrics.start_worker_exposition(
        _queues(options or {}),
        address=settings.metrics_address,
        base_port=settings.worker_metrics_port,
        metrics_dir=settings.metrics_dir or settings.data_dir / "metrics",
    )


@worker_process_shutdown.connect
def _child_exited(pid: int | None = None, **_: Any) -> None:
    from firefeed import metrics

    if pid is not None:
        metrics.mark_process_dead(pid)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _run_fields(logger: logging.Logger, **_: Any) -> None:
    """Celery replaces the root handlers: give its handlers the run fields and FireFeed's format back."""
    from firefeed.config import get_settings
    from firefeed.logging import TEXT_FORMAT, JsonFormatter, RunContextFilter

    json_lines = get_settings().log_json
    for handler in logger.handlers:
        if not any(isinstance(f, RunContextFilter) for f in handler.filters):
            handler.addFilter(RunContextFilter())
        handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))


#: the run fields entered for each task this process is running, left at its postrun
_task_contexts: dict[str, contextlib.ExitStack] = {}


def task_run_fields(task_name: str, args: Any) -> dict[str, str] | None:
    """The run fields of a task about to run: a root task names its run, a step task its job row."""
    from firefeed.tasks.dispatch import RUN_TASK
    from firefeed.tasks.steps import STEP_TASK_NAMES

    if not args:
        return None
    if task_name == RUN_TASK:
        return {"run_id": str(args[0])}
    if task_name not in STEP_TASK_NAMES:
        return None
    from firefeed.runs.jobs import JobStore

    job = JobStore().get(int(args[0]))
    fields = {"job": str(args[0])}
    return fields if job is None else {**fields, "run_id": str(job.run_id), "step": str(job.step)}


@task_prerun.connect
def _enter_run_fields(task_id: str | None = None, task: Any = None, args: Any = None, **_: Any) -> None:
    from firefeed.logging import run_context

    if task_id is None or task is None:
        return
    try:
        fields = task_run_fields(task.name, args)
    except Exception:  # a log field must never stop a task: the job reports its own errors
        log.debug("no run fields for task %s", task_id, exc_info=True)
        return
    if fields:
        stack = contextlib.ExitStack()
        stack.enter_context(run_context(**fields))
        _task_contexts[task_id] = stack


@task_postrun.connect
def _leave_run_fields(task_id: str | None = None, **_: Any) -> None:
    stack = _task_contexts.pop(task_id or "", None)
    if stack is not None:
        stack.close()
