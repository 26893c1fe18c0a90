"""The four queues, as one enum: routes in celeryconfig.py and workers use these names."""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    PIPELINE = "pipeline"
    IMPORT = "import"
    RULES = "rules"
    EXPORT = "export"


ALL_QUEUES = tuple(q.value for q in Queue)
