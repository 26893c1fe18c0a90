"""Faults on a real fleet: kill -9 of a worker in each step, Redis restarted, Postgres connections killed.

After each fault the run must end within the lease: a killed step worker's jobs
are sent again and the run succeeds; a killed driver's run is failed by the reaper;
after a broker restart or killed connections it ends either way. The published
exports must be whole (byte for byte the reference), no unpublished export file and
no run table may be left once the janitor has passed, and the project must run again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.spec.loader import load_spec_file
from tests.integration.test_distributed import _spec
from tests.redis_server import session_redis
from tests.services import requires_redis
from tests.stress._feeds import FeedServer, feed_server
from tests.stress._fleet import (
    FLEET_APP_NAME,
    Fleet,
    count_rows,
    database_backends,
    describe_backends,
    export_rows,
    fleet_env,
    run_tables,
    running_fleet,
    unpublished_files,
    wait_backends_at_most,
    wait_status,
    wait_step,
)

pytestmark = requires_redis

ITEMS = 2000
# A killed worker's job is sent again after FIREFEED_STALE_RUN_S (5 s); a dead root is reaped
# after the same lease by beat's reaper (every second). This bounds how long a run may take to end.
END_WITHIN_S = 90


@pytest.fixture(scope="module")
def fleet(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("faults")
    env = fleet_env(database_url, base, FIREFEED_CHUNK_ROWS="100", FIREFEED_WEB_POOL_SIZE="2")
    with pytest.MonkeyPatch.context() as mp, running_fleet(env, mp, base / "logs") as running:
        yield running
    # Killed workers, killed connections, a restarted broker: once the fleet stops, no connection is left.
    assert wait_backends_at_most(database_url, 0) == 0, describe_backends(database_url)


@pytest.fixture()
def live_fleet(fleet: Fleet) -> Fleet:
    """Every queue has a live worker before the test starts (a previous test may have killed one)."""
    dead = [q for q, p in fleet.workers.items() if p.poll() is not None]
    for q in dead:
        fleet.restart(q)
    return fleet


class Project:
    """A project whose primary source is served by a local feed server; its published exports, checked."""

    def __init__(self, folder: Path, name: str, server: FeedServer, export_dir: Path, padding: int = 0) -> None:
        self.name, self.server = name, server
        spec_path = _spec(folder, "faulty", name, items=ITEMS)
        lines = (folder / "main.csv").read_text(encoding="utf-8").splitlines()
        if padding:  # a long text column: more bytes to parse, the same items
            lines = [lines[0] + ",blurb"] + [f"{line},{'p' * padding}" for line in lines[1:]]
        server.body = ("\n".join(lines) + "\n").encode()
        spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        spec["sources"][0]["url"] = server.url()
        spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        RunStore().apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
        self.dir = export_dir / "faulty" / name
        self.published: dict[str, bytes] = {}

    def run_ok(self, tally: Any) -> None:
        """A clean run; its exports become the reference every later state is compared with."""
        run_id = start_run(self.name, "api")
        assert wait_status(run_id, END_WITHIN_S) == "SUCCEEDED", RunStore().run(run_id).error
        tally.run()
        self.published = {p.name: p.read_bytes() for p in self.files()}
        assert len(self.published) == 3

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if not p.name.startswith("."))

    def lost_rows(self) -> int:
        """Rows missing from the published exports, against the reference (a torn file counts whole)."""
        lost = 0
        for path in self.files():
            expected = count_rows(path.name, self.published[path.name])
            try:
                found = export_rows(path)
            except (OSError, EOFError, ValueError):
                found = 0
            lost += max(expected - found, 0)
        return lost

    def check_whole(self, tally: Any) -> None:
        """The published exports are the reference's bytes; nothing unpublished or run-scoped is left."""
        tally.lose(self.lost_rows())
        assert {p.name: p.read_bytes() for p in self.files()} == self.published, "a published export changed"
        deadline = time.monotonic() + 15
        while (unpublished_files(self.dir) or run_tables()) and time.monotonic() < deadline:
            time.sleep(0.2)  # the reaper and the janitor run every second
        assert unpublished_files(self.dir) == [], "an unpublished export file was left behind"
        assert run_tables() == [], "a run table was left behind"


def _wait_job(run_id: str, kind: str, timeout: float = 60) -> None:
    """Wait until a job of `kind` of the run is RUNNING on a worker ("parse": a source job past its download)."""
    from firefeed.db.engine import raw_connection

    fetched = kind == "parse"
    kind = "source" if fetched else kind
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with raw_connection() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pipeline_jobs WHERE run_id = %s AND kind = %s AND status = 'RUNNING'"
                " AND (NOT %s OR result ? 'fetch_finished')",
                (run_id, kind, fetched),
            )
            if cur.fetchone()[0]:
                return
        time.sleep(0.005)
    raise AssertionError(f"no {kind} job of run {run_id} ran within {timeout:.0f}s")


KILLS = [
    # (queue whose worker dies, step it dies in, what to wait for before the kill)
    ("import", "FETCH", "source"),
    ("import", "PARSE", "parse"),
    ("import", "MERGE", "merge"),
    ("rules", "RULES", "rules_chunk"),
    ("export", "EXPORT", "export"),
    ("pipeline", "RULES", "rules_chunk"),
    ("pipeline", "EXPORT", "export"),
]


@pytest.mark.parametrize(("queue", "step", "wait_for"), KILLS, ids=[f"{q}-in-{s}" for q, s, _ in KILLS])
def test_a_worker_killed_in_a_step_ends_the_run_in_time_and_loses_nothing(
    queue: str, step: str, wait_for: str, live_fleet: Fleet, tmp_path: Path, stress_tally: Any
) -> None:
    export_dir = Path(live_fleet.env["FIREFEED_EXPORT_DIR"])
    with feed_server() as server:
        # PARSE must last long enough to be caught running (a few hundred ms), even on a loaded machine.
        padding = 20_000 if step == "PARSE" else 0
        project = Project(tmp_path, f"kill_{queue}_{step.lower()}", server, export_dir, padding=padding)
        project.run_ok(stress_tally)
        if step == "FETCH":
            server.mode, server.slow_s = "slow", 4.0
        run_id = start_run(project.name, "api", full=True)  # the same inputs: else `unchanged`
        if step != "PARSE":  # PARSE's step row starts when every download is done; its job is what we wait for
            wait_step(run_id, step)
        _wait_job(run_id, wait_for)
        live_fleet.kill(queue)
        started = time.monotonic()
        stress_tally.fault(f"kill -9 {queue} worker")
        live_fleet.restart(queue)  # what systemd's Restart=always or compose's restart policy does
        server.mode = "ok"
        status = wait_status(run_id, END_WITHIN_S)
        stress_tally.run()
        print(f"kill -9 {queue} in {step}: run {status} after {time.monotonic() - started:.1f}s")
        error = RunStore().run(run_id).error or {}
        if queue == "pipeline":
            # The driver is gone: the reaper ends the run after the lease, with a message that says so.
            assert (status, error.get("type")) == ("FAILED", "StaleRun"), (status, error)
        else:
            # The dead worker's job (and whatever it had prefetched) was sent again and another worker did it.
            assert status == "SUCCEEDED", error
        assert time.monotonic() - started < END_WITHIN_S
        project.check_whole(stress_tally)
        # The project is free and runs again, with the same exports.
        project.run_ok(stress_tally)
        project.check_whole(stress_tally)


def test_step_messages_the_broker_lost_are_sent_again_and_the_run_succeeds(
    live_fleet: Fleet, tmp_path: Path, stress_tally: Any
) -> None:
    """Regression: queued jobs whose messages vanished (a flushed broker, a killed worker's prefetch) are re-sent."""
    from tests.integration.celery_workers import stop_worker

    export_dir = Path(live_fleet.env["FIREFEED_EXPORT_DIR"])
    broker = redis.Redis.from_url(live_fleet.env["FIREFEED_BROKER_URL"])
    with feed_server() as server:
        project = Project(tmp_path, "lost_messages", server, export_dir)
        project.run_ok(stress_tally)
        stop_worker(live_fleet.workers["rules"])  # the rules jobs now wait in the broker
        run_id = start_run(project.name, "api", full=True)  # the same inputs: else `unchanged`
        wait_step(run_id, "RULES")
        deadline = time.monotonic() + 30
        while not broker.llen("rules") and time.monotonic() < deadline:
            time.sleep(0.01)
        lost = sum(int(broker.delete(key)) for key in broker.scan_iter(match="rules*"))
        assert lost, "no rules message was queued"
        stress_tally.fault("broker lost queued messages")
        live_fleet.restart("rules")
        started = time.monotonic()
        status = wait_status(run_id, END_WITHIN_S)
        stress_tally.run()
        print(f"queued rules messages lost: run {status} after {time.monotonic() - started:.1f}s")
        # Before the re-send this failed after FIREFEED_JOB_PICKUP_TIMEOUT_S ("is a worker consuming ...?").
        assert status == "SUCCEEDED", RunStore().run(run_id).error
        project.check_whole(stress_tally)
    broker.close()


def _restart_redis() -> None:
    """Stop the session's own Redis (the fleet's broker) and start it again on its port: its queues are lost."""
    server = session_redis()
    assert server is not None
    server.restart()


def _start_redis() -> None:
    """Start the session's Redis again if a restart left it stopped: later tests use it."""
    server = session_redis()
    if server is not None and server.pid is None:
        server.start()


@pytest.mark.skipif(
    session_redis() is None, reason="restarts the session's own Redis: FIREFEED_TEST_REDIS_URL names another one"
)
def test_redis_restarted_mid_run_the_run_ends_and_the_fleet_recovers(
    live_fleet: Fleet, tmp_path: Path, stress_tally: Any
) -> None:
    from tests.integration.celery_workers import wait_answering

    export_dir = Path(live_fleet.env["FIREFEED_EXPORT_DIR"])
    with feed_server() as server:
        project = Project(tmp_path, "redis_restart", server, export_dir)
        project.run_ok(stress_tally)
        run_id = start_run(project.name, "api", full=True)  # the same inputs: else `unchanged`
        wait_step(run_id, "RULES")
        _wait_job(run_id, "rules_chunk")
        try:
            _restart_redis()
            stress_tally.fault("redis restart")
        finally:
            _start_redis()
        status = wait_status(run_id, END_WITHIN_S)
        stress_tally.run()
        print(f"redis restart in RULES: run {status}, {RunStore().run(run_id).error}")
        assert status in ("SUCCEEDED", "FAILED"), status
        project.check_whole(stress_tally)
        # Every worker reconnects by itself: nobody restarts them.
        deadline = time.monotonic() + 60
        while True:
            try:
                wait_answering(live_fleet.env, tuple(live_fleet.workers), list(live_fleet.workers.values()), 10)
                break
            except (redis.RedisError, OSError, RuntimeError):
                # This process's own broker connections died with Redis too; they reconnect on the next try.
                if time.monotonic() > deadline:
                    raise
        assert all(p.poll() is None for p in live_fleet.workers.values())
        project.run_ok(stress_tally)
        project.check_whole(stress_tally)


def _terminate_fleet_backends(database_url: str) -> int:
    import psycopg2

    name = database_url.rsplit("/", 1)[1].split("?")[0]
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                # A connection in a run's use is named for the run (firefeed:<run>:<step>...), idle ones for the fleet.
                "WHERE datname = %s AND (application_name = %s OR application_name LIKE 'firefeed:%%')",
                (name, FLEET_APP_NAME),
            )
            return int(cur.fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("step", ["MERGE", "RULES", "EXPORT"])
def test_postgres_connections_killed_mid_run_the_run_ends_and_the_project_runs_again(
    step: str, live_fleet: Fleet, database_url: str, tmp_path: Path, stress_tally: Any
) -> None:
    export_dir = Path(live_fleet.env["FIREFEED_EXPORT_DIR"])
    with feed_server() as server:
        project = Project(tmp_path, f"pg_kill_{step.lower()}", server, export_dir)
        project.run_ok(stress_tally)
        run_id = start_run(project.name, "api", full=True)  # the same inputs: else `unchanged`
        wait_step(run_id, step)
        killed = 0
        for _ in range(3):
            killed += _terminate_fleet_backends(database_url)
            time.sleep(0.2)
        assert killed > 0
        stress_tally.fault("pg_terminate_backend", killed)
        status = wait_status(run_id, END_WITHIN_S)
        stress_tally.run()
        error = RunStore().run(run_id).error
        print(f"{killed} connections killed in {step}: run {status}, {error}")
        assert status in ("SUCCEEDED", "FAILED"), status
        if status == "FAILED":  # the driver's message, not SQLAlchemy's echo of the statement and its values
            assert error and error["message"] and "[SQL:" not in error["message"], error
            # Its driver never died: the run's own error, not the reaper's (it beats while its jobs drain).
            assert error["type"] != "StaleRun", error
        project.check_whole(stress_tally)
        project.run_ok(stress_tally)
        project.check_whole(stress_tally)
    assert all(p.poll() is None for p in live_fleet.workers.values()), "a worker died of a lost connection"
    # The pools replaced the killed connections; they did not pile up new ones.
    limit = 40
    assert wait_backends_at_most(database_url, limit) <= limit, describe_backends(database_url)
    assert database_backends(database_url) <= limit
