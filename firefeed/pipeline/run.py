"""The batch driver: one process runs one run (`firefeed run`, the demo, the processes worker, tests).

It is the same orchestrator the root Celery task uses, with every job run in
this process: one core, two drivers.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine
from firefeed.pipeline.orchestrator import InlineDispatcher, StepHook, drive_run


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
