"""`firefeed doctor`, `firefeed beat` and `firefeed flower`: running the fleet and checking it is sound."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What one worker process holds, measured: ~76 MB RSS once Celery, SQLAlchemy, lxml and the
# pipeline are imported; rounded up for the connection pool and a job's working set.
BASE_PROCESS_MB = 100
# A chunk of rows in flight (COPY buffer, rules chunk); generous for wide feeds.
ROW_KB = 4


def _mask(url: str) -> str:
    """The URL without its password, for printing."""
    from sqlalchemy.engine import make_url

    try:
        if url.startswith(("postgres", "postgresql")):
            return make_url(url).render_as_string(hide_password=True)
    except Exception:
        pass
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{host}" if ":" in creds else url
    return url


@dataclass
class Report:
    """The doctor's findings: each line, and the fixes for the problems."""

    lines: list[tuple[str, str, str]] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    def ok(self, name: str, detail: str) -> None:
        self.lines.append(("ok", name, detail))

    def info(self, name: str, detail: str) -> None:
        self.lines.append(("info", name, detail))

    def warn(self, name: str, detail: str, fix: str | None = None) -> None:
        self.lines.append(("warn", name, detail))
        if fix:
            self.fixes.append(f"{name}: {fix}")

    def fail(self, name: str, detail: str, fix: str) -> None:
        self.lines.append(("FAIL", name, detail))
        self.fixes.append(f"{name}: {fix}")

    @property
    def failed(self) -> bool:
        return any(status == "FAIL" for status, _, _ in self.lines)

    def render(self) -> str:
        out = [f"  {status:<5} {name:<12} {detail}" for status, name, detail in self.lines]
        if self.fixes:
            out += ["", "to fix:"] + [f"  - {fix}" for fix in self.fixes]
        problems = sum(status == "FAIL" for status, _, _ in self.lines)
        out += ["", f"{problems} problem(s)" if problems else "all checks passed"]
        return "\n".join(out)


def budget_fix(pipeline: int, per_run: int, web_pool: int, usable: int) -> str:
    """Which variable to change so PIPELINE x (IMPORT + RULES + EXPORT) + web pool fits in `usable` connections."""
    room = usable - web_pool
    fits = room // per_run if per_run else 0
    raise_it = f"or raise max_connections in postgresql.conf to at least {pipeline * per_run + web_pool} plus reserved"
    if fits >= 1 and pipeline > fits:
        return f"lower PIPELINE_CONCURRENCY from {pipeline} to {fits}, {raise_it}"
    return (
        f"lower IMPORT_CONCURRENCY + RULES_CONCURRENCY + EXPORT_CONCURRENCY + SYNC_CONCURRENCY (now {per_run}) or "
        f"FIREFEED_WEB_POOL_SIZE (now {web_pool}) so that the budget fits in {usable}, {raise_it}"
    )


def memory_estimate_mb(concurrency: int, chunk_rows: int) -> int:
    """A worker's main process plus `concurrency` pool children, each with a chunk of rows in flight."""
    return BASE_PROCESS_MB + concurrency * (BASE_PROCESS_MB + chunk_rows * ROW_KB // 1024)


def _check_database(report: Report, settings: Any) -> Any:
    """Reach the database; returns a connected SQLAlchemy engine or None."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    url = settings.sqlalchemy_url
    shown = "embedded default" if settings.database_url is None else _mask(url)
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar()
    except Exception as err:
        from firefeed.db.reachable import explain

        reason = explain(err, url)
        if reason is not None:
            report.fail("database", f"{shown}: {reason.message}", reason.fix)
            return None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        report.fail("database", f"{shown}: {first}", "check FIREFEED_DATABASE_URL and that Postgres is running")
        return None
    report.ok("database", f"{shown} (PostgreSQL {version})")
    return engine


def _check_migrations(report: Report, settings: Any) -> None:
    from firefeed.db.migrate import current_and_head

    current, head = current_and_head(settings.sqlalchemy_url)
    if current == head:
        report.ok("migrations", f"at head {head}")
    elif current is None:
        report.fail("migrations", f"none applied (head is {head})", "run `firefeed migrate`")
    else:
        report.fail(
            "migrations",
            f"database at {current}, this FireFeed ships {head}",
            "run `firefeed migrate` (or upgrade FireFeed if the database is newer than this release)",
        )


def _check_collation(report: Report, engine: Any) -> None:
    from sqlalchemy import text

    with engine.connect() as conn:
        ctype = conn.execute(text("SELECT datctype FROM pg_database WHERE datname = current_database()")).scalar()
    if str(ctype).upper() in ("C", "POSIX"):
        report.warn(
            "collation",
            f"LC_CTYPE is {ctype}: lower(), upper() and case-insensitive rules only fold ASCII letters",
            "create the database with LC_CTYPE 'C.UTF-8' (or another UTF-8 locale) and re-apply the projects",
        )
    else:
        report.ok("collation", f"LC_CTYPE {ctype}")


def _check_budget(report: Report, settings: Any, engine: Any) -> None:
    from sqlalchemy import text

    from firefeed.concurrency import load_concurrency
    from firefeed.errors import ConfigError
    from firefeed.tasks.queues import ALL_QUEUES

    try:
        c = load_concurrency()
    except ConfigError as err:
        report.fail("concurrency", str(err), "set the variable to a whole number >= 1 in the environment or .env")
        return
    web = settings.web_pool_size
    per_run = c.import_ + c.rules + c.export + c.sync
    needed = c.connections_needed(web)
    formula = f"PIPELINE {c.pipeline} x (IMPORT {c.import_} + RULES {c.rules} + EXPORT {c.export} + SYNC {c.sync})"
    formula += f" + web pool {web} = {needed}"
    if engine is None:
        report.info("connections", f"{formula} (max_connections unknown: no database)")
        return
    with engine.connect() as conn:
        max_conn = int(conn.execute(text("SHOW max_connections")).scalar() or 0)
        reserved = int(conn.execute(text("SHOW superuser_reserved_connections")).scalar() or 0)
    usable = max_conn - reserved
    against = f"{formula} of max_connections {max_conn} ({usable} usable, {reserved} reserved for superusers)"
    if needed > usable:
        report.fail("connections", against, budget_fix(c.pipeline, per_run, web, usable))
    else:
        report.ok("connections", against)
    parts = [
        f"{q} ~{memory_estimate_mb(c.pool_size(q), settings.chunk_rows)} MB ({c.pool_size(q)} + 1 processes)"
        for q in ALL_QUEUES
    ]
    report.info("memory", "per worker: " + ", ".join(parts))


def _check_broker(report: Report, settings: Any) -> None:
    if not settings.broker_url:
        report.info(
            "broker",
            "none set: `firefeed run` and `firefeed api` run projects in their own process, and `firefeed fleet` "
            "uses the database as its broker; separate workers, beat and triggers by Celery task name need "
            "FIREFEED_BROKER_URL (redis://… or amqp://…)",
        )
        return
    from kombu import Connection

    shown = _mask(settings.broker_url)
    try:
        with Connection(settings.broker_url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=3)
    except Exception as err:
        report.fail("broker", f"{shown}: {err}", "check FIREFEED_BROKER_URL and that the broker is running")
        return
    report.ok("broker", shown)
    _check_workers(report)


def _check_workers(report: Report) -> None:
    """Which queues' workers answer a ping (node names `<queue>.<fleet tag>@<host>`). Doctor may run before any worker
    starts, so none answering is no problem; workers without a control worker are: a trigger by task
    name, beat's tick and maintenance would wait in its queue."""
    from firefeed.celery_app import app
    from firefeed.tasks.queues import ALL_QUEUES, Queue, queue_of_worker

    try:
        replies = app.control.ping(timeout=1.0) or []
    except Exception as err:  # a transport without broadcasts (the SQL broker) cannot ping
        report.info("workers", f"cannot ping the workers on this broker ({type(err).__name__})")
        return
    names = {name for reply in replies for name in reply}
    roles = [q for q in ALL_QUEUES if any(queue_of_worker(n) == q for n in names)]
    if not names:
        report.info("workers", "none answers a ping yet (`firefeed worker` starts one per queue)")
    elif Queue.CONTROL.value not in roles:
        report.warn(
            "workers",
            f"{len(names)} answer ({', '.join(roles) or 'no FireFeed queue names'}), none of them a control worker",
            "start `firefeed worker control`: triggers by task name, beat's tick and maintenance wait for one",
        )
    else:
        report.ok("workers", f"{len(names)} answer: {', '.join(roles)}")


def _check_storage(report: Report, settings: Any) -> None:
    if not settings.storage_url:
        report.info(
            "storage",
            f"local folders: exports in {Path(settings.export_dir).resolve()}, downloads in "
            f"{Path(settings.data_dir).resolve() / 'runs'} "
            "(several machines: share FIREFEED_EXPORT_DIR or set FIREFEED_STORAGE_URL)",
        )
        return
    from firefeed.storage import probe_storage

    try:
        where = probe_storage(settings)
    except Exception as err:
        report.fail(
            "storage",
            str(err),
            "check FIREFEED_STORAGE_URL, FIREFEED_STORAGE_ENDPOINT_URL and that the credentials may "
            "write, read, list and delete there",
        )
        return
    report.ok("storage", where)


def run_doctor(settings: Any = None) -> Report:
    """Every check of `firefeed doctor`, as a Report."""
    from firefeed.config import get_settings

    settings = settings or get_settings()
    report = Report()
    engine = _check_database(report, settings)
    try:
        if engine is not None:
            _check_migrations(report, settings)
            _check_collation(report, engine)
        _check_budget(report, settings, engine)
    finally:
        if engine is not None:
            engine.dispose()
    _check_broker(report, settings)
    _check_storage(report, settings)
    if not settings.flower_password:
        report.warn("flower", "FIREFEED_FLOWER_PASSWORD is not set: `firefeed flower` refuses to start")
    return report


def cmd_doctor(args: argparse.Namespace) -> int:
    from firefeed.config import get_settings
    from firefeed.errors import ConfigError

    try:
        settings = get_settings()
    except ConfigError as err:
        print(f"  FAIL  settings     {err}\n\nto fix:\n  - settings: correct the variable named above")
        return 1
    report = run_doctor(settings)
    print(report.render())
    return 1 if report.failed else 0


def cmd_beat(args: argparse.Namespace) -> int:
    from firefeed.celery_app import app
    from firefeed.config import get_settings

    settings = get_settings()
    if not settings.broker_url:
        print("firefeed: beat sends tasks to workers: set FIREFEED_BROKER_URL", file=sys.stderr)
        return 2
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Beat keeps only the last send time of each entry here; the projects' schedules live in the database.
    app.Beat(loglevel=args.loglevel, schedule=str(settings.data_dir / "celerybeat-schedule")).run()
    return 0


def flower_argv(settings: Any, port: int | None = None, address: str | None = None) -> list[str]:
    return ["flower", f"--port={port or settings.flower_port}", f"--address={address or settings.flower_address}"]


def cmd_flower(args: argparse.Namespace) -> int:
    from firefeed.celery_app import app
    from firefeed.config import get_settings

    settings = get_settings()
    if not settings.flower_password:
        print(
            "firefeed: set FIREFEED_FLOWER_PASSWORD (and FIREFEED_FLOWER_USER, default admin): "
            "Flower shows every task's arguments and can revoke tasks, so it never runs without a password",
            file=sys.stderr,
        )
        return 2
    if not settings.broker_url:
        print("firefeed: Flower watches the workers through the broker: set FIREFEED_BROKER_URL", file=sys.stderr)
        return 2
    # Through the environment, not argv: a password on the command line is visible to every `ps`.
    os.environ["FLOWER_BASIC_AUTH"] = f"{settings.flower_user}:{settings.flower_password}"
    app.start(flower_argv(settings, args.port, args.address))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check the database, migrations, broker and the connection budget (exit 1: fix)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("beat", help="the scheduler: projects' cron schedules and the maintenance tasks")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_beat)

    p = sub.add_parser("flower", help="the Celery dashboard, with basic auth from FIREFEED_FLOWER_USER/PASSWORD")
    p.add_argument("--port", type=int, default=None, help="default FIREFEED_FLOWER_PORT (5555)")
    p.add_argument("--address", default=None, help="default FIREFEED_FLOWER_ADDRESS (127.0.0.1)")
    p.set_defaults(func=cmd_flower)
