"""The processes worker as real OS processes: many claimers, kill -9, SIGTERM, a missing workspace.

Rows use `firefeed.ping` (optionally sleeping), the built-in trivial runnable,
so these tests measure the claiming machinery and not the pipeline.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from firefeed.db.engine import raw_connection

pytestmark = pytest.mark.integration

CLAIMED = re.compile(r"process (\d+): claimed ")


def insert_many(engine: Engine, rows: list[tuple[str, str, str, dict[str, Any]]]) -> list[int]:
    """Insert (worker_type, workspace_id, function, input_data) rows in one transaction; their ids in order."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        ids = []
        for worker_type, workspace, function, data in rows:
            cur.execute(
                "INSERT INTO processes (worker_type, workspace_id, function, input_data) VALUES (%s, %s, %s, %s) "
                "RETURNING id",
                (worker_type, workspace, function, json.dumps(data)),
            )
            ids.append(int(cur.fetchone()[0]))
        return ids


def rows(engine: Engine, ids: list[int]) -> dict[int, dict[str, Any]]:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM processes WHERE id = ANY(%s)", (ids,))
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def wait_for(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log = proc, log

    @property
    def name(self) -> str:
        return f"{os.uname().nodename}:{self.proc.pid}"

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def wait_serving(self, timeout: float = 20) -> None:
        wait_for(lambda: "serving worker_type" in self.output() or self.proc.poll() is not None, timeout)
        assert self.proc.poll() is None, self.output()

    def terminate(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.fixture()
def workspace() -> str:
    return f"ws{uuid.uuid4().hex[:10]}"


@pytest.fixture()
def spawn(database_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(workspace: str | None, **env: str) -> WorkerProcess:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("FIREFEED_")}
        environ |= {"FIREFEED_DATABASE_URL": database_url, "FIREFEED_LOG_LEVEL": "INFO", **env}
        if workspace is not None:
            environ["FIREFEED_WORKSPACE_ID"] = workspace
        log = tmp_path / f"worker{len(started)}.log"
        with log.open("wb") as out:
            # cwd=tmp_path: the worker must not pick up a developer's .env.
            proc = subprocess.Popen(
                [sys.executable, "-m", "firefeed.cli", "processes-worker"],
                env=environ,
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(proc, log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)


def test_four_workers_claim_every_row_of_their_scope_exactly_once(
    engine: Engine, workspace: str, spawn: Callable[..., WorkerProcess]
) -> None:
    workers = [spawn(workspace, FIREFEED_PROCESS_POLL_S="30") for _ in range(4)]
    for w in workers:
        w.wait_serving()
    scopes = [("etl", workspace)] * 120 + [("etl", workspace + "_other")] * 40 + [("media", workspace)] * 40
    random.Random(6).shuffle(scopes)
    ids = insert_many(engine, [(t, ws, "firefeed.ping", {"sleep_s": 0.02}) for t, ws in scopes])
    mine = [i for i, scope in zip(ids, scopes, strict=True) if scope == ("etl", workspace)]
    others = sorted(set(ids) - set(mine))
    wait_for(lambda: all(r["status"] == "completed" for r in rows(engine, mine).values()), timeout=30)
    for w in workers:
        assert w.terminate() == 0, w.output()

    claims = Counter(int(m) for w in workers for m in CLAIMED.findall(w.output()))
    assert sorted(claims) == sorted(mine)
    assert set(claims.values()) == {1}
    by_worker = {int(m): w.name for w in workers for m in CLAIMED.findall(w.output())}
    done = rows(engine, mine)
    assert all(done[i]["claimed_by"] == by_worker[i] and done[i]["attempts"] == 0 for i in mine)
    assert len({r["claimed_by"] for r in done.values()}) >= 2  # the work was shared
    untouched = rows(engine, others)
    assert {(r["status"], r["claimed_by"], r["claimed_at"]) for r in untouched.values()} == {("pending", None, None)}


def test_a_row_of_a_killed_worker_is_recovered_after_the_lease_and_completes_elsewhere(
    engine: Engine, workspace: str, spawn: Callable[..., WorkerProcess]
) -> None:
    env = {"FIREFEED_PROCESS_LEASE_S": "1", "FIREFEED_PROCESS_POLL_S": "30"}
    doomed = spawn(workspace, **env)
    doomed.wait_serving()
    (pid,) = insert_many(engine, [("etl", workspace, "firefeed.ping", {"sleep_s": 2})])
    wait_for(lambda: rows(engine, [pid])[pid]["status"] == "running", timeout=10)
    assert rows(engine, [pid])[pid]["claimed_by"] == doomed.name
    doomed.proc.kill()  # SIGKILL: no release, no last word
    doomed.proc.wait(10)

    rescuer = spawn(workspace, **env)
    wait_for(lambda: rows(engine, [pid])[pid]["status"] == "completed", timeout=20)
    r = rows(engine, [pid])[pid]
    assert (r["claimed_by"], r["attempts"]) == (rescuer.name, 1)
    assert f"process {pid}: worker {doomed.name} stopped heartbeating; back to pending" in rescuer.output()
    assert rescuer.terminate() == 0


def test_sigterm_lets_short_rows_finish_hands_long_ones_back_and_exits_cleanly(
    engine: Engine, workspace: str, spawn: Callable[..., WorkerProcess]
) -> None:
    worker = spawn(workspace, FIREFEED_PROCESS_GRACE_S="1", FIREFEED_PROCESS_CONCURRENCY="2")
    worker.wait_serving()
    long, short = insert_many(
        engine,
        [("etl", workspace, "firefeed.ping", {"sleep_s": 60}), ("etl", workspace, "firefeed.ping", {"sleep_s": 0.5})],
    )
    wait_for(lambda: {r["status"] for r in rows(engine, [long, short]).values()} == {"running"}, timeout=10)
    started = time.monotonic()
    assert worker.terminate() == 0, worker.output()
    assert time.monotonic() - started < 8
    after = rows(engine, [long, short])
    assert after[short]["status"] == "completed"
    assert (after[long]["status"], after[long]["claimed_by"], after[long]["attempts"]) == ("pending", None, 0)
    assert f"process {long}: released back to pending" in worker.output()


def test_the_worker_refuses_to_start_without_a_workspace(spawn: Callable[..., WorkerProcess]) -> None:
    worker = spawn(None)
    assert worker.proc.wait(30) == 2
    assert "FIREFEED_WORKSPACE_ID is required" in worker.output()


def test_a_bad_process_setting_stops_the_worker_naming_the_variable(
    workspace: str, spawn: Callable[..., WorkerProcess]
) -> None:
    worker = spawn(workspace, FIREFEED_PROCESS_CONCURRENCY="abc")
    assert worker.proc.wait(30) == 2
    assert "FIREFEED_PROCESS_CONCURRENCY: Input should be a valid integer" in worker.output()
