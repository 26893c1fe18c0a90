"""A real FireFeed fleet for the stress and fault suites: one `firefeed worker` per queue, plus beat.

Built on tests/integration/celery_workers.py (spawn, ping, stop, kill -9). The fleet
runs on its own Redis database, so a `make test` running at the same time (which
flushes its own database) never eats its messages. Leases and timeouts are small
(`FLEET_TIMINGS`) so a crash is noticed in seconds instead of minutes.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from firefeed.config import reset_settings
from firefeed.dataplane.run_tables import RunTables
from firefeed.tasks.queues import ALL_QUEUES
from tests.integration.celery_workers import (
    FIREFEED,
    flush_redis,
    kill_worker,
    spawn_worker,
    stop_worker,
    use_broker,
    wait_answering,
)
from tests.services import redis_db

QUEUES = ALL_QUEUES  # the control worker too: triggers, beat's tick and maintenance
FLEET_REDIS_URL = redis_db(6)
# libpq names every connection the fleet's processes open, so the leak check counts theirs alone.
FLEET_APP_NAME = "firefeed-stress-fleet"

# Small on purpose: a dead worker's job is sent again after STALE_RUN_S without a heartbeat,
# and beat runs the janitor and the reaper every second.
FLEET_TIMINGS = {
    "FIREFEED_HEARTBEAT_S": "0.5",
    "FIREFEED_STALE_RUN_S": "5",
    "FIREFEED_JOB_PICKUP_TIMEOUT_S": "30",
    "FIREFEED_MAINTENANCE_INTERVAL_S": "1",
    "FIREFEED_SCHEDULE_TICK_S": "3600",
    "FIREFEED_PRUNE_INTERVAL_S": "3600",
    "FIREFEED_FETCH_RETRIES": "0",
}


def fleet_env(database_url: str, base: Path, **overrides: str) -> dict[str, str]:
    """The environment every fleet process (and this test process) shares."""
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=FLEET_REDIS_URL,
        PGAPPNAME=FLEET_APP_NAME,
        FIREFEED_EXPORT_DIR=str(base / "exports"),
        FIREFEED_DATA_DIR=str(base / "var"),
        FIREFEED_WORKER_METRICS_PORT="0",
        FIREFEED_FETCH_ALLOW_PRIVATE="true",
        PIPELINE_CONCURRENCY="2",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="2",
        EXPORT_CONCURRENCY="2",
        FIREFEED_CHUNK_ROWS="50",
        **FLEET_TIMINGS,
    )
    env.update(overrides)
    return env


@dataclass
class Fleet:
    """The worker processes by queue, and beat; a killed worker can be replaced like systemd would."""

    env: dict[str, str]
    log_dir: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    beat: subprocess.Popen[bytes] | None = None
    _logs: list[IO[bytes]] = field(default_factory=list)

    def _log(self, name: str) -> IO[bytes]:
        log = (self.log_dir / f"{name}.log").open("ab")
        self._logs.append(log)
        return log

    def start(self, queues: tuple[str, ...] = QUEUES) -> None:
        for q in queues:
            self.workers[q] = spawn_worker(self.env, q, self._log(f"worker-{q}"))
        wait_answering(self.env, queues, [self.workers[q] for q in queues])

    def start_beat(self) -> None:
        log = self._log("beat")
        self.beat = subprocess.Popen(
            [FIREFEED, "beat", "--loglevel", "INFO"], env=self.env, stdout=log, stderr=log, start_new_session=True
        )

    def kill(self, queue: str) -> None:
        """kill -9 of one queue's worker with its whole pool."""
        kill_worker(self.workers[queue])

    def restart(self, queue: str) -> None:
        """A replacement worker for the queue (the old one is dead or stopped)."""
        self.start((queue,))

    def stop(self) -> None:
        # Beat first: once the workers are gone, whatever it sends would wait in the broker.
        procs = [*([self.beat] if self.beat else []), *self.workers.values()]
        for p in procs:
            stop_worker(p)
        self.workers.clear()
        self.beat = None
        for log in self._logs:
            log.close()
        self._logs.clear()

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log")))


@contextmanager
def running_fleet(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, log_dir: Path, *, beat: bool = True
) -> Iterator[Fleet]:
    """Workers for every queue (and beat), with this process pointed at the same broker and folders."""
    for key in ("FIREFEED_BROKER_URL", "FIREFEED_EXPORT_DIR", "FIREFEED_DATA_DIR", "FIREFEED_CHUNK_ROWS"):
        monkeypatch.setenv(key, env[key])
    for key, value in FLEET_TIMINGS.items():
        monkeypatch.setenv(key, value)
    reset_settings()
    flush_redis(env["FIREFEED_BROKER_URL"])
    use_broker(env["FIREFEED_BROKER_URL"])
    log_dir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(env, log_dir)
    try:
        fleet.start()
        if beat:
            fleet.start_beat()
        yield fleet
    finally:
        fleet.stop()
        flush_redis(env["FIREFEED_BROKER_URL"])  # leave nothing for the next user of this Redis database
        use_broker("memory://")
        reset_settings()


# -- what the checks read --------------------------------------------------------------------
def _activity(database_url: str, columns: str) -> list[tuple[Any, ...]]:
    import psycopg2

    name = database_url.rsplit("/", 1)[1].split("?")[0]
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT {columns} FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
                (name, FLEET_APP_NAME),
            )
            return list(cur.fetchall())
    finally:
        conn.close()


def database_backends(database_url: str) -> int:
    """Connections the fleet's processes hold to the test database."""
    return int(_activity(database_url, "count(*)")[0][0])


def describe_backends(database_url: str) -> list[tuple[Any, ...]]:
    """(pid, state, backend start, query) of the fleet's connections: for failure messages."""
    return _activity(database_url, "pid, state, backend_start::text, left(query, 120)")


def wait_backends_at_most(database_url: str, limit: int, timeout: float = 15) -> int:
    """Backends of killed clients leave when Postgres notices the closed socket: give it a moment."""
    deadline = time.monotonic() + timeout
    n = database_backends(database_url)
    while n > limit and time.monotonic() < deadline:
        time.sleep(0.2)
        n = database_backends(database_url)
    return n


def run_tables() -> list[str]:
    """Every run-scoped table left in the database (rules passes, export diffs)."""
    from firefeed.schema.service import SchemaService

    service = SchemaService()
    return [
        f"{schema}.{table}"
        for schema, table in RunTables(service).list_rules_tmp() + RunTables(service).list_export_tmp()
    ]


def unpublished_files(export_dir: Path) -> list[Path]:
    """Export files written but never published: a run's `.<name>.<run>.partial` and the storage's
    temporaries around one (`firefeed.storage.leftovers`), which a killed writer leaves for the janitor."""
    from firefeed.storage.leftovers import leftover_run

    if not export_dir.exists():
        return []
    return sorted(p for p in export_dir.rglob("*") if p.name.endswith(".partial") or leftover_run(p.name) is not None)


def export_rows(path: Path) -> int:
    """Items in an export file (csv/tsv, json lines or google-xml, gzip or not); a half-written one comes up short."""
    return count_rows(path.name, path.read_bytes())


def count_rows(name: str, data: bytes) -> int:
    """Items in the bytes of an export called `name`; a torn gzip stream raises (EOFError, OSError)."""
    if name.endswith(".gz"):
        data, name = gzip.decompress(data), name.removesuffix(".gz")
    text = data.decode("utf-8")
    if name.endswith(".jsonl"):
        return sum(1 for line in text.splitlines() if line.strip())
    if name.endswith(".xml"):
        return text.count("<item>") if text.rstrip().endswith("</rss>") else 0
    rows = csv.reader(io.StringIO(text, newline=""), delimiter="\t" if name.endswith(".tsv") else ",")
    return max(sum(1 for _ in rows) - 1, 0)


def export_body(path: Path) -> bytes:
    """An export's items, decompressed; a google-xml channel header (it names the project) is left out."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if path.name.removesuffix(".gz").endswith(".xml"):
        data = data[data.find(b"<item>") :]
    return data


def wait_status(run_id: str, timeout: float) -> str:
    """Wait until the run leaves PENDING/RUNNING; its final status."""
    from firefeed.runs.service import RunStore

    store = RunStore()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = store.run(run_id).status
        if status not in ("PENDING", "RUNNING"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} still {store.run(run_id).status} after {timeout:.0f}s")


def wait_step(run_id: str, step: str, timeout: float = 60) -> None:
    """Wait until the run's `step` is RUNNING (or the run has ended, which the caller then sees)."""
    from firefeed.runs.service import RunStore

    store = RunStore()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {s.step: s.status for s in store.steps(run_id)}.get(step) == "RUNNING":
            return
        if store.run(run_id).status not in ("PENDING", "RUNNING"):
            raise AssertionError(f"run {run_id} ended ({store.run(run_id).status}) before {step} started")
        time.sleep(0.005)
    raise AssertionError(f"run {run_id} did not reach {step} in {timeout:.0f}s")
