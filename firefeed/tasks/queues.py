"""The four queues, as one enum: routes in celeryconfig.py and workers use these names."""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    PIPELINE = "pipeline"
    IMPORT = "import"
    RULES = "rules"
    EXPORT = "export"


ALL_QUEUES = tuple(q.value for q in Queue)
#: Celery's own default queue: where a plain client that names no queue sends (the pipeline worker consumes it)
CELERY_DEFAULT_QUEUE = "celery"


def consumed_queues(queue: str) -> str:
    """The --queues a worker for `queue` consumes: the pipeline worker also answers plain clients."""
    return f"{queue},{CELERY_DEFAULT_QUEUE}" if queue == Queue.PIPELINE.value else queue
