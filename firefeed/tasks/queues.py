"""The queues, as one enum: routes in celeryconfig.py and workers use these names.

`pipeline`, `import`, `rules` and `export` carry a run's root task and its step
jobs (SPEC 1). `control` carries the short tasks that must be answered while
every pipeline slot drives a run: the trigger by task name (busy "at once",
SPEC 1), beat's schedule tick and the maintenance tasks (the janitor that finds
lost runs must not wait behind a run). Its worker also takes Celery's default
queue, where a client that names no queue sends.
"""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    PIPELINE = "pipeline"
    IMPORT = "import"
    RULES = "rules"
    EXPORT = "export"
    CONTROL = "control"


ALL_QUEUES = tuple(q.value for q in Queue)
#: Celery's own default queue: where a plain client that names no queue sends (the control worker consumes it)
CELERY_DEFAULT_QUEUE = "celery"


def consumed_queues(queue: str) -> str:
    """The --queues a worker for `queue` consumes: the control worker also answers plain clients."""
    return f"{queue},{CELERY_DEFAULT_QUEUE}" if queue == Queue.CONTROL.value else queue
