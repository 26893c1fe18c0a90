"""The queues, as one enum: routes in celeryconfig.py and workers use these names.

`pipeline`, `import`, `rules` and `export` carry a run's root task and its step
jobs (SPEC 1). `control` carries the short tasks that must be answered while
every pipeline slot drives a run: the trigger by task name (busy "at once",
SPEC 1), beat's schedule tick and the maintenance tasks (the janitor that finds
lost runs must not wait behind a run). `sync` carries the sync jobs (SPEC 10 C9-C10):
paced by a channel's quota, a sync may send for many minutes, and must not hold an
export slot that another run's file is waiting for. Its worker also takes Celery's default
queue, where a client that names no queue sends.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum


class Queue(StrEnum):
    PIPELINE = "pipeline"
    IMPORT = "import"
    RULES = "rules"
    EXPORT = "export"
    CONTROL = "control"
    SYNC = "sync"  # an export's changes to a channel's API (SPEC 10 C9-C10): minutes at a channel's pace


ALL_QUEUES = tuple(q.value for q in Queue)
#: Celery's own default queue: where a plain client that names no queue sends (the control worker consumes it)
CELERY_DEFAULT_QUEUE = "celery"


def consumed_queues(queue: str) -> str:
    """The --queues a worker for `queue` consumes: the control worker also answers plain clients."""
    return f"{queue},{CELERY_DEFAULT_QUEUE}" if queue == Queue.CONTROL.value else queue


def fleet_tag(database_url: str | None, data_dir: str) -> str:
    """Six hex digits that name the fleet: every worker of one database gets the same, another fleet another.

    Two fleets on one broker took each other's root tasks under identical worker names
    (`pipeline@host` in both); with the tag in the name Flower and `celery inspect` tell
    them apart. The database is what makes a fleet one (the embedded one: its folder).
    """
    where = database_url if database_url else f"embedded:{data_dir}"
    return hashlib.sha256(where.encode("utf-8")).hexdigest()[:6]


def worker_name(queue: str, tag: str) -> str:
    """A worker's Celery node name: `<queue>.<fleet tag>@<host>` (`%h` is filled in by Celery)."""
    return f"{queue}.{tag}@%h"


def queue_of_worker(node: str) -> str:
    """The queue a worker named by `worker_name` serves (`pipeline.1a2b3c@host` -> `pipeline`)."""
    return node.split("@", 1)[0].split(".", 1)[0]
