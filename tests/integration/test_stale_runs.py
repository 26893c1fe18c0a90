"""No dead run locks a project (#47): every entry point takes over a run whose driver was killed.

Real processes killed with -9 by pid: `firefeed run`, `firefeed api` without a broker, the processes
worker. Once the dead run's heartbeat is older than FIREFEED_STALE_RUN_S (small here) the next request
fails it as StaleRun and proceeds, with no beat anywhere; a run whose driver still beats is never taken.
And a job whose worker was killed during a statement: the attempt that takes it over ends the killed
attempt's backend before it runs (Postgres would run that statement on, holding its locks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from firefeed.config import reset_settings
from firefeed.errors import PipelineBusyError
from firefeed.pipeline.run import execute_run
from firefeed.runs.contract import JobKind, JobSpec, JobStatus
from firefeed.runs.jobs import JobStore
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import company_schema, staging_table
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import new_company, write_csv
from tests.integration.test_api import spec_of
from tests.integration.test_processes_workers import insert_many, rows, wait_for
from tests.ports import free_ports

pytestmark = pytest.mark.integration

LEASE_S = 4.0  # small, so a test waits for it; four times longer than a beat, so a live run never looks dead
BEAT_S = 0.5


class _Feed(ThreadingHTTPServer):
    """A CSV feed over HTTP that can be held: while it is, a request waits (so its run stays in FETCH)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FeedHandler)
        self.open = threading.Event()
        self.arrived = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/feed.csv"

    def hold(self) -> None:
        self.open.clear()
        self.arrived.clear()


class _FeedHandler(BaseHTTPRequestHandler):
    server: _Feed

    def do_GET(self) -> None:
        self.server.arrived.set()
        self.server.open.wait(120)
        body = b"id,title,quantity\nA1,Shoe,0\nA2,Boot,4\n"
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/csv")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client was killed while it waited

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def feed() -> Iterator[_Feed]:
    server = _Feed()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.open.set()
        server.shutdown()
        server.server_close()


@pytest.fixture()
def env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The environment of every process here (this one's settings too): no broker, a short lease."""
    values = {
        "FIREFEED_DATABASE_URL": database_url,
        "FIREFEED_EXPORT_DIR": str(tmp_path / "exports"),
        "FIREFEED_DATA_DIR": str(tmp_path / "var"),
        "FIREFEED_FETCH_ALLOWED_HOSTS": "127.0.0.1",
        "FIREFEED_STALE_RUN_S": str(LEASE_S),
        "FIREFEED_HEARTBEAT_S": str(BEAT_S),
        "FIREFEED_LOG_LEVEL": "INFO",
    }
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FIREFEED_")} | values
    for key in [k for k in os.environ if k.startswith("FIREFEED_")]:
        monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    reset_settings()
    yield environ
    reset_settings()


def _spawn(env: dict[str, str], cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    # cwd: not the checkout, whose .env must not reach the process.
    return subprocess.Popen(
        [sys.executable, "-m", "firefeed.cli", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()  # SIGKILL by pid: no handler runs, nothing is cleaned up
    proc.communicate(timeout=20)


def _status(run_id: str) -> str:
    return RunStore().run(run_id).status


def _wait_running(feed: _Feed, project: str) -> str:
    """The project's run once it is RUNNING and its FETCH waits on the held feed."""
    assert feed.arrived.wait(60), "the run never fetched its feed"
    (run,) = [r for r in RunStore().runs_of_project(project) if r.status == "RUNNING"]
    return str(run.id)


def _wait_stale(engine: Engine, run_id: str) -> None:
    """Until the run's heartbeat is older than the lease (by the database's clock, as the takeover judges)."""
    query = text("SELECT now() - heartbeat_at > make_interval(secs => :lease) FROM pipeline_runs WHERE id = :id")

    def stale() -> bool:
        with engine.connect() as conn:
            return bool(conn.execute(query, {"lease": LEASE_S, "id": run_id}).scalar())

    wait_for(stale, timeout=LEASE_S + 30)


def _assert_taken_over(run_id: str) -> None:
    run = RunStore().run(run_id)
    assert run.status == "FAILED", run.status
    assert run.error is not None and run.error["type"] == "StaleRun", run.error
    assert run.error["step"] == "FETCH" and "no heartbeat" in run.error["message"], run.error


def _project(company: str, feed: _Feed) -> str:
    project = "p_" + uuid.uuid4().hex[:10]
    RunStore().apply_spec(parse_spec(spec_of(company, project, feed.url)), spec_dir=None)
    return project


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_a_killed_firefeed_run_no_longer_locks_its_project_once_its_heartbeat_is_older_than_the_lease(
    env: dict[str, str], engine: Engine, feed: _Feed, tmp_path: Path
) -> None:
    company, project = "stale_" + uuid.uuid4().hex[:6], "p_" + uuid.uuid4().hex[:10]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_of(company, project, feed.url)), encoding="utf-8")
    first = _spawn(env, tmp_path, "run", str(spec))
    try:
        dead = _wait_running(feed, project)
        # Alive for longer than a lease: its heartbeat keeps it, a second run is refused (exit 3, busy).
        time.sleep(LEASE_S + 1)
        busy = _spawn(env, tmp_path, "run", project)
        out, err = busy.communicate(timeout=60)
        assert busy.returncode == 3, err.decode()
        assert out.decode().strip() == dead
        assert _status(dead) == "RUNNING"
    finally:
        _kill(first)
    with pytest.raises(PipelineBusyError):  # within the lease a killed run still holds its project
        RunStore().request_run(project, "cli")
    _wait_stale(engine, dead)
    feed.open.set()
    second = _spawn(env, tmp_path, "run", str(spec), "--json")
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    assert json.loads(out)["status"] == "SUCCEEDED"
    _assert_taken_over(dead)
    assert "a new run request (cli)" in RunStore().run(dead).error["message"]  # type: ignore[index]


@contextmanager
def _api(env: dict[str, str], cwd: Path) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    """A `firefeed api` process without a broker and a client of it; killed at the end if still up."""
    port = free_ports()
    proc = subprocess.Popen(
        [sys.executable, "-m", "firefeed.cli", "api", "--port", str(port), "--no-access-log"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

    def healthy() -> bool:
        assert proc.poll() is None, "firefeed api exited"
        try:
            return client.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, timeout=60)
        yield proc, client
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def _finished(client: httpx.Client, run_id: str, auth: dict[str, str]) -> dict[str, Any]:
    answer: dict[str, Any] = {}

    def ended() -> bool:
        answer.update(client.get(f"/api/runs/{run_id}", headers=auth).json())
        return answer["status"] not in ("PENDING", "RUNNING")

    wait_for(ended, timeout=120)
    return answer


def _kill_api_mid_run(env: dict[str, str], cwd: Path, feed: _Feed, project: str, auth: dict[str, str]) -> str:
    """Start an API, have it drive a run that waits on the held feed, kill -9 the API: the run's id."""
    feed.hold()
    with _api(env, cwd) as (proc, client):
        answer = client.post(f"/api/projects/{project}/pipeline/run", headers=auth)
        assert answer.status_code == 202, answer.text
        run_id = _wait_running(feed, project)
        proc.kill()  # SIGKILL by pid, mid-run
    return run_id


# Four API processes started, two killed mid-run: 35 s, the slowest test of the suite, so it runs with
# `make stress`; the takeover itself is covered here by the CLI and processes-row tests.
@pytest.mark.stress
def test_an_api_without_a_broker_takes_over_the_run_a_killed_api_left_and_can_cancel_it(
    env: dict[str, str], engine: Engine, feed: _Feed, tmp_path: Path
) -> None:
    company, auth = new_company("stale_")
    project = _project(company, feed)

    # A cancel of a run whose API was killed: no driver is left to see the flag, so the cancel ends it.
    dead = _kill_api_mid_run(env, tmp_path, feed, project, auth)
    with _api(env, tmp_path) as (_, client):
        _wait_stale(engine, dead)
        cancelled = client.post(f"/api/runs/{dead}/cancel", headers=auth)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED", cancelled.text
        feed.open.set()
        again = client.post(f"/api/projects/{project}/pipeline/run", headers=auth)
        assert again.status_code == 202, again.text
        assert _finished(client, again.json()["run_id"], auth)["status"] == "SUCCEEDED"

    # A trigger finds the killed API's run stale: it takes it over (StaleRun) and is accepted.
    dead = _kill_api_mid_run(env, tmp_path, feed, project, auth)
    with _api(env, tmp_path) as (_, client):
        _wait_stale(engine, dead)
        feed.open.set()
        accepted = client.post(f"/api/projects/{project}/pipeline/run", headers=auth)
        assert accepted.status_code == 202, accepted.text
        assert _finished(client, accepted.json()["run_id"], auth)["status"] == "SUCCEEDED"
    _assert_taken_over(dead)


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_a_processes_row_takes_over_the_run_of_a_killed_processes_worker(
    env: dict[str, str], engine: Engine, feed: _Feed, tmp_path: Path
) -> None:
    company = "stale_" + uuid.uuid4().hex[:6]
    project = _project(company, feed)
    # The killed worker's own row stays claimed by it through the test (its lease is long): only the new row runs.
    worker_env = env | {"FIREFEED_WORKSPACE_ID": company, "FIREFEED_PROCESS_LEASE_S": "600"}
    (first,) = insert_many(engine, [("etl", company, "firefeed.pipeline.run", {"project": project})])
    doomed = _spawn(worker_env, tmp_path, "processes-worker")
    try:
        dead = _wait_running(feed, project)
    finally:
        _kill(doomed)
    _wait_stale(engine, dead)
    feed.open.set()
    (second,) = insert_many(engine, [("etl", company, "firefeed.pipeline.run", {"project": project})])
    worker = _spawn(worker_env, tmp_path, "processes-worker")
    try:
        wait_for(lambda: rows(engine, [second])[second]["status"] not in ("pending", "running"), timeout=120)
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    row = rows(engine, [second])[second]
    assert row["status"] == "completed", row
    assert row["output_data"]["status"] == "SUCCEEDED"
    _assert_taken_over(dead)
    assert rows(engine, [first])[first]["status"] == "running"  # still the dead worker's: not what freed the project


def _backends(engine: Engine, run_id: str) -> set[int]:
    """The pids of the run's backends that are running a statement."""
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE state <> 'idle' AND left(application_name, :n) = :prefix"),
            {"n": len(f"firefeed:{run_id}:"), "prefix": f"firefeed:{run_id}:"},
        ).scalars()
        return {int(pid) for pid in found}


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_a_job_taken_over_from_a_killed_worker_first_ends_the_statement_its_backend_still_runs(
    env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    company, project = "stale_" + uuid.uuid4().hex[:6], "p_" + uuid.uuid4().hex[:10]
    folder = tmp_path / "spec"
    folder.mkdir()
    write_csv(folder / "main.csv", ["id", "title", "quantity"], [["A1", "Shoe", "0"]])
    store = RunStore()
    store.apply_spec(parse_spec(spec_of(company, project)), spec_dir=folder)
    assert execute_run(store.request_run(project, "cli"))["status"] == "SUCCEEDED"  # the staging table exists
    write_csv(folder / "main.csv", ["id", "title", "quantity"], [["A1", "Shoe", "0"], ["A2", "Boot", "4"]])
    run_id = store.request_run(project, "task")
    assert store.mark_running(run_id)
    (job,) = JobStore().create(run_id, [JobSpec(JobKind.SOURCE)])
    worker = [sys.executable, "-c", f"from firefeed.pipeline.jobs import run_job; run_job({job})"]

    with engine.connect() as lock:
        # The source's PARSE waits on this lock: a statement that runs until the test lets it go.
        lock.execute(
            text(f'LOCK TABLE "{company_schema(company)}"."{staging_table(project, "main")}" IN ACCESS EXCLUSIVE MODE')
        )
        killed = subprocess.Popen(worker, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: bool(_backends(engine, run_id)), timeout=60)
            old = _backends(engine, run_id)
        finally:
            _kill(killed)
        time.sleep(1)
        assert _backends(engine, run_id) >= old  # Postgres runs the dead worker's statement on
        state = JobStore().get(job)
        assert state is not None and state.status is JobStatus.RUNNING

        wait_for(lambda: _job_stale(engine, job), timeout=LEASE_S + 30)
        resent = subprocess.Popen(worker, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # Still under the lock, so the old statement cannot have ended by itself: the new attempt ended it.
            wait_for(lambda: not (_backends(engine, run_id) & old), timeout=60)
            assert JobStore().get(job).attempts == 2  # type: ignore[union-attr]
        except BaseException:
            _kill(resent)
            raise
        finally:
            lock.rollback()  # the lock goes: the new attempt parses
        _, err = resent.communicate(timeout=120)
    assert resent.returncode == 0, err.decode()
    state = JobStore().get(job)
    assert state is not None and state.status is JobStatus.SUCCEEDED, state
    assert state.result is not None and state.result["parse"]["rows"] == 2, state.result


def _job_stale(engine: Engine, job: int) -> bool:
    query = text("SELECT now() - heartbeat_at > make_interval(secs => :lease) FROM pipeline_jobs WHERE id = :id")
    with engine.connect() as conn:
        return bool(conn.execute(query, {"lease": LEASE_S, "id": job}).scalar())


@pytest.mark.parametrize(
    ("moment", "ended"),
    [("unrecorded", "FAILED"), pytest.param("switched-1", "SUCCEEDED", marks=pytest.mark.stress)],  # slow: make stress
)
def test_a_new_run_finishes_or_discards_the_publish_a_killed_run_left_half_done(
    env: dict[str, str], engine: Engine, tmp_path: Path, moment: str, ended: str
) -> None:
    """Killed before its publish's commit point, the run is failed; after it, the takeover finishes it."""
    company, project = "stale_" + uuid.uuid4().hex[:6], "p_" + uuid.uuid4().hex[:10]
    folder = tmp_path / "spec"
    folder.mkdir()
    write_csv(folder / "main.csv", ["id", "title", "quantity"], [["A1", "Shoe", "0"], ["A2", "Boot", "4"]])
    spec = folder / "spec.json"
    spec.write_text(json.dumps(spec_of(company, project)), encoding="utf-8")
    pause = tmp_path / "pause"  # the publish stops at `moment` while its hold file exists (pipeline/publishing.py)
    pause.mkdir()
    (pause / f"{moment}.hold").touch()
    doomed = _spawn(env | {"FIREFEED_TEST_PUBLISH_PAUSE_DIR": str(pause)}, tmp_path, "run", str(spec))
    try:
        wait_for(lambda: (pause / f"{moment}.reached").exists() or doomed.poll() is not None, timeout=120)
        assert doomed.poll() is None, "the run ended before it was held"
    finally:
        _kill(doomed)
    (dead,) = [str(r.id) for r in RunStore().runs_of_project(project)]
    _wait_stale(engine, dead)
    second = _spawn(env, tmp_path, "run", str(spec))
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err.decode()
    run = RunStore().run(dead)
    assert run.status == ended, run.error
    if ended == "FAILED":
        assert run.error is not None and run.error["type"] == "StaleRun", run.error
    else:
        assert run.error is None and run.report is not None and run.report["status"] == "SUCCEEDED"
