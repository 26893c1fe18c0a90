"""`firefeed processes-worker`: the processes-table daemon (SPEC section 6)."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from firefeed.errors import ConfigError


def cmd_processes_worker(args: argparse.Namespace) -> int:
    from firefeed.config import get_settings
    from firefeed.db.engine import get_engine
    from firefeed.logging import setup_logging
    from firefeed.processes.config import ProcessConfig
    from firefeed.processes.worker import Worker

    settings = get_settings()
    workspace = (settings.workspace_id or "").strip()
    if not workspace:
        raise ConfigError("FIREFEED_WORKSPACE_ID is required: the company whose rows this worker runs")
    if not settings.worker_type.strip():
        raise ConfigError("FIREFEED_WORKER_TYPE must not be empty (default etl)")
    config = ProcessConfig.from_settings(settings)
    # A daemon logs what it does: INFO by default, not the CLI's quiet WARNING.
    setup_logging(settings.log_level, settings.log_json)
    worker = Worker(
        engine=get_engine(),
        settings=settings,
        workspace_id=workspace,
        worker_type=settings.worker_type,
        config=config,
    )

    def on_signal(signum: int, frame: Any) -> None:
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.run()
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "processes-worker",
        help="the processes-table daemon: runs the rows of FIREFEED_WORKER_TYPE / FIREFEED_WORKSPACE_ID",
        description=(
            "Claims pending rows of the `processes` table whose worker_type is FIREFEED_WORKER_TYPE (default etl) "
            "and whose workspace_id is FIREFEED_WORKSPACE_ID (required: a company id), runs the named function "
            "and writes the outcome back into the row. Wakes on LISTEN/NOTIFY, polls every FIREFEED_PROCESS_POLL_S "
            "as a fallback. Knobs: FIREFEED_PROCESS_TIMEOUT_S, FIREFEED_PROCESS_CONCURRENCY, "
            "FIREFEED_PROCESS_LEASE_S, FIREFEED_PROCESS_MAX_ATTEMPTS, FIREFEED_PROCESS_GRACE_S. "
            "SIGTERM/SIGINT: stop claiming, let running rows finish for the grace period, hand the rest back."
        ),
    )
    p.set_defaults(func=cmd_processes_worker)
