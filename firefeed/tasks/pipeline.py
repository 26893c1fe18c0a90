"""Public pipeline tasks: `firefeed.pipeline.trigger(project_id)` and `firefeed.pipeline.run(run_id)`.

Both names are a wire contract for other services (`send_task` by name).
"""

from __future__ import annotations

import logging
from typing import Any

from firefeed.celery_app import app
from firefeed.errors import NotFoundError, PipelineBusyError

log = logging.getLogger(__name__)


@app.task(name="firefeed.pipeline.trigger", ignore_result=False)
def trigger(project_id: str, accept_drop: bool = False) -> dict[str, Any]:
    """Request a run through the project lock; {"status": "accepted"|"busy"|"unknown_project", "run_id"}.

    `accept_drop=True` (keyword or second argument): the run may publish exports that lose more than max_drop.
    """
    from firefeed.runs.requests import start_run

    try:
        run_id = start_run(str(project_id), "task", accept_drop=accept_drop is True)
    except PipelineBusyError as err:
        return {"status": "busy", "run_id": err.run_id}
    except NotFoundError:
        return {"status": "unknown_project", "run_id": None}
    return {"status": "accepted", "run_id": run_id}


@app.task(name="firefeed.pipeline.run", ignore_result=False)
def run(run_id: str) -> dict[str, Any]:
    """The root task: drive one run through FETCH, PARSE, MERGE, RULES, EXPORT; returns the RunReport."""
    from firefeed.pipeline.orchestrator import drive_run

    return drive_run(str(run_id))
