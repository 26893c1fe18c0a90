"""The Celery app. `celery -A firefeed.celery_app worker` and `firefeed worker` both use it."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_process_init

app = Celery("firefeed")
app.config_from_object("celeryconfig")


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    """A forked pool process must not reuse its parent's database connections, and keeps few while idle."""
    from firefeed.db.engine import worker_pool_process

    worker_pool_process()
