"""Worker process hooks: Prometheus metrics that count every prefork child, and run fields on every log line.

Imported by every worker through `imports` in celeryconfig.py, which Celery
loads before it sends `celeryd_init`, so the hooks are connected in time.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger, celeryd_init, worker_process_shutdown

log = logging.getLogger(__name__)


def _queues(options: dict[str, Any]) -> list[str]:
    raw = options.get("queues") or []
    if isinstance(raw, str):
        raw = raw.split(",")
    return [q.strip() for q in raw if q and q.strip()]


@celeryd_init.connect
def _worker_metrics(sender: Any = None, instance: Any = None, conf: Any = None, options: Any = None, **_: Any) -> None:
    """In the worker's main process, before the pool forks: one metrics port for all its children."""
    from firefeed import metrics
    from firefeed.config import get_settings

    settings = get_settings()
    metrics.start_worker_exposition(
        _queues(options or {}),
        address=settings.metrics_address,
        base_port=settings.worker_metrics_port,
        metrics_dir=settings.metrics_dir or settings.data_dir / "metrics",
    )


@worker_process_shutdown.connect
def _child_exited(pid: int | None = None, **_: Any) -> None:
    from firefeed import metrics

    if pid is not None:
        metrics.mark_process_dead(pid)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _run_fields(logger: logging.Logger, **_: Any) -> None:
    """Celery replaces the root handlers: give its handlers the run fields and FireFeed's format back."""
    from firefeed.config import get_settings
    from firefeed.logging import TEXT_FORMAT, JsonFormatter, RunContextFilter

    json_lines = get_settings().log_json
    for handler in logger.handlers:
        if not any(isinstance(f, RunContextFilter) for f in handler.filters):
            handler.addFilter(RunContextFilter())
        handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
