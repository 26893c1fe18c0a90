"""The Celery app. `celery -A firefeed.celery_app worker` and `firefeed worker` both use it."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import celeryd_after_setup, worker_process_init

app = Celery("firefeed")
app.config_from_object("celeryconfig")


@celeryd_after_setup.connect
def _remember_queues(sender: Any, instance: Any, conf: Any, **_: Any) -> None:
    """Record the queues this worker consumes (the one-process mode runs step jobs in place)."""
    from firefeed.tasks.dispatch import note_worker_queues

    note_worker_queues(set(instance.app.amqp.queues.consume_from.keys()))


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    """A forked pool process must not reuse its parent's database connections."""
    from firefeed.db.engine import dispose_engines

    dispose_engines()
