"""Alert tasks on the `control` queue: one attempt at one alert, and beat's sweep of the due ones.

Thin: each calls firefeed/alerts/sender.py. A failed attempt sends the task again with the backoff as
its countdown; the sweep is the net under that (a lost message, a worker that died mid-attempt).
"""

from __future__ import annotations

from firefeed.alerts.sender import SEND_TASK, SWEEP_TASK
from firefeed.celery_app import app
from firefeed.tasks.queues import Queue


@app.task(name=SEND_TASK, ignore_result=True)
def send(alert_id: int) -> str:
    """One attempt; another task after the backoff when it may be retried. Returns the state it left."""
    from firefeed.alerts.sender import Attempted, attempt
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine

    result = attempt(int(alert_id), settings=get_settings(), engine=get_engine())
    if result.state is Attempted.RETRY:
        app.send_task(
            SEND_TASK, args=[alert_id], queue=Queue.CONTROL.value, countdown=result.wait_s, ignore_result=True
        )
    return result.state.value


@app.task(name=SWEEP_TASK, ignore_result=True)
def sweep() -> int:
    """Send a task for each due pending alert; returns how many."""
    from firefeed.alerts import outbox
    from firefeed.db.engine import get_engine

    due = outbox.due(get_engine())
    for alert_id in due:
        app.send_task(SEND_TASK, args=[alert_id], queue=Queue.CONTROL.value, ignore_result=True)
    return len(due)
