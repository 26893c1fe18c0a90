"""`firefeed worker [QUEUE...]` and `firefeed trigger PROJECT`: the distributed side of the CLI."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from typing import Any

from firefeed.commands import ACCEPT_INVALID_HELP, FULL_HELP
from firefeed.tasks.queues import ALL_QUEUES, consumed_queues


def worker_argv(queue: str, concurrency: int, loglevel: str = "INFO") -> list[str]:
    """The celery worker arguments for one queue: its own pool, sized by `Concurrency.pool_size`."""
    from firefeed.config import get_settings
    from firefeed.tasks.queues import fleet_tag, worker_name

    settings = get_settings()
    return [
        "worker",
        "--queues",
        consumed_queues(queue),
        "--concurrency",
        str(concurrency),
        "--hostname",
        worker_name(queue, fleet_tag(settings.database_url, str(settings.data_dir))),
        "--loglevel",
        loglevel,
        "--events",
    ]


def cmd_worker(args: argparse.Namespace) -> int:
    from firefeed.concurrency import load_concurrency

    concurrency = load_concurrency()
    queues = args.queues or list(ALL_QUEUES)
    unknown = [q for q in queues if q not in ALL_QUEUES]
    if unknown:
        print(f"firefeed: unknown queue(s) {', '.join(unknown)}; queues are {', '.join(ALL_QUEUES)}", file=sys.stderr)
        return 2
    if len(queues) == 1:
        from firefeed.celery_app import app
        from firefeed.db.engine import keep_idle_in_workers
        from firefeed.tasks.queues import Queue

        # A driver holds its wakeups connection beside the one its statements use (engine.worker_pool_process).
        keep_idle_in_workers(2 if queues[0] == Queue.PIPELINE.value else 1)
        app.worker_main(worker_argv(queues[0], concurrency.pool_size(queues[0]), args.loglevel))
        return 0
    # One worker process per queue, so each queue's pool bound holds exactly.
    procs = [
        subprocess.Popen([sys.executable, "-m", "firefeed.cli", "worker", q, "--loglevel", args.loglevel])
        for q in queues
    ]

    def stop(signum: int, frame: Any) -> None:
        for p in procs:
            p.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [p.wait() for p in procs]
    return max(codes, default=0)


def cmd_trigger(args: argparse.Namespace) -> int:
    from firefeed.config import get_settings
    from firefeed.runs.requests import start_run

    if get_settings().broker_url is None:
        # Celery's in-memory broker would take the message and lose it with this process: the run would
        # stay PENDING and hold its project.
        print(
            "firefeed: trigger needs a broker (FIREFEED_BROKER_URL) and workers; "
            "without them run the project here with `firefeed run`, or start `firefeed fleet`",
            file=sys.stderr,
        )
        return 2
    run_id = start_run(
        args.project, "cli", accept_drop=args.accept_drop, accept_invalid=args.accept_invalid, full=args.full
    )
    print(run_id)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="a Celery worker for those queues (default: all five, one process each; "
        "`control` answers triggers, beat's tick and maintenance while runs hold the pipeline slots)",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help=f"queues to consume: {', '.join(ALL_QUEUES)}")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("trigger", help="request a run through the lock and the queues; prints the run id")
    p.add_argument("project", metavar="PROJECT")
    p.add_argument(
        "--accept-drop",
        action="store_true",
        help="publish even when an export loses more of its items than its max_drop (the drop guard)",
    )
    p.add_argument("--accept-invalid", action="store_true", help=ACCEPT_INVALID_HELP)
    p.add_argument("--full", action="store_true", help=FULL_HELP)
    p.set_defaults(func=cmd_trigger)
