"""The Celery app. `celery -A firefeed.celery_app worker` and `firefeed worker` both use it."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_init

app = Celery("firefeed")
app.config_from_object("celeryconfig")


@worker_init.connect
def _remember_queues(sender: Any, **_: Any) -> None:
    """Record the queues this worker consumes (the one-process mode runs step jobs in place).

    worker_init fires for `celery worker`, `firefeed worker` and Celery's in-process test
    worker alike, after the worker selected its queues and before the pool forks.
    """
    from firefeed.tasks.dispatch import note_worker_queues

    queues = sender.app.amqp.queues
    note_worker_queues(set((queues.consume_from or queues).keys()))


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    """A forked pool process must not reuse its parent's database connections."""
    from firefeed.db.engine import dispose_engines

    dispose_engines()
