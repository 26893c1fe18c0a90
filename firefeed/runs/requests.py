"""Requesting a run: the one path every trigger takes (API, CLI, beat, task by name, processes worker).

The run row is created and committed through the project lock first; only then
is the root task enqueued, so a worker never sees a run id that is not
committed. If the enqueue fails the run is marked FAILED at once and the
project is free again. A run of the project whose driver stopped beating for
longer than the lease does not refuse the request: `RunStore.request_run` (which
`firefeed run` and the processes worker call directly) takes it over first
(runs/stale.py), so no deployment needs beat to keep its projects free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from firefeed.errors import EnqueueError
from firefeed.runs.service import RunStore

log = logging.getLogger(__name__)


def start_run(
    project_id: str,
    trigger: str,
    *,
    company: str | None = None,
    store: RunStore | None = None,
    accept_drop: bool = False,
    accept_invalid: bool = False,
    full: bool = False,
    enqueue: Callable[[str], object] | None = None,
) -> str:
    """Create a PENDING run (PipelineBusyError when busy) and enqueue its root task; returns the run id.

    `enqueue`: who takes the committed run instead of the broker (the API's own LocalRunner when
    no broker is configured, see runs/local.py).
    """
    store = store or RunStore()
    run_id = store.request_run(
        project_id, trigger, company=company, accept_drop=accept_drop, accept_invalid=accept_invalid, full=full
    )
    try:
        if enqueue is None:
            from firefeed.tasks.dispatch import enqueue_run

            enqueue = enqueue_run
        enqueue(run_id)
    except Exception as err:
        log.error("could not enqueue run %s: %s", run_id, err)
        store.finish_run(
            run_id,
            "FAILED",
            report=None,
            error={"step": None, "type": type(err).__name__, "message": f"could not enqueue the run: {err}"},
        )
        raise EnqueueError(f"run {run_id} could not be handed to the broker: {err}") from err
    return run_id
