"""Which task, on which queue, runs each kind of job: the routing table of the step jobs.

Task names are a wire contract (`firefeed.<area>.<verb>`); celeryconfig.py routes
each area to its queue, and a worker on another machine only needs the queue names.
"""

from __future__ import annotations

from firefeed.runs.contract import JobKind
from firefeed.tasks.queues import Queue

TASK_FOR_KIND: dict[JobKind, tuple[str, Queue]] = {
    JobKind.SOURCE: ("firefeed.import.source", Queue.IMPORT),
    JobKind.MERGE: ("firefeed.import.merge", Queue.IMPORT),
    JobKind.RULES: ("firefeed.rules.apply", Queue.RULES),
    JobKind.RULES_CHUNK: ("firefeed.rules.chunk", Queue.RULES),
    JobKind.EXPORT: ("firefeed.export.write", Queue.EXPORT),
    JobKind.DELIVER: ("firefeed.export.deliver", Queue.EXPORT),
    JobKind.SYNC: ("firefeed.sync.send", Queue.SYNC),
}
