"""Statement bounds (issue 15): a statement_timeout on every statement, and a cancel that reaches the backends.

The slow statement is a `matches` pattern Postgres' regex engine needs a minute for
on a few long values: `(a[ab]{254}){150}d` has ~38,000 NFA states, and on a random
string of `a`s and `b`s (no `d`, so no match) the engine builds a new DFA state
for nearly every character. Measured in psql on PostgreSQL 15 on this machine: 14 s
for one value of 100,000 characters, so SLOW_ITEMS of them take well over a minute.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg2
import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.db.engine import get_engine, raw_connection, session_state
from firefeed.pipeline.run import execute_run
from firefeed.runs.backends import application_name
from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.celery_workers import celery_workers, flush_broker, in_process_worker, use_broker, worker_env
from tests.integration.conftest import run_json, write_csv
from tests.services import broker_url, redis_db, shared_broker_available

pytestmark = pytest.mark.integration

SLOW_PATTERN = "(a[ab]{254}){150}d"
LONG_CHARS = 100_000
SLOW_ITEMS = 6
#: "within seconds": from the cancel request to CANCELLED, and to the backend being free
CANCELLED_WITHIN_S = 10.0
#: how long a statement must have run to count as the slow one (the pipeline's others take milliseconds)
LONG_RUNNING_S = 2.0
# Its own Redis database: other tests use 10 to 13 and flush theirs.
BOUNDS_REDIS_URL = os.environ.get("FIREFEED_TEST_BOUNDS_REDIS_URL", redis_db(9))


def long_value(seed: int) -> str:
    return "".join(random.Random(seed).choices("ab", k=LONG_CHARS))


def spec_of(company: str, project: str, *, slow: bool) -> dict[str, Any]:
    """A project over main.csv; `slow`: its rule matches SLOW_PATTERN against the long titles."""
    when = (
        {"field": "title", "op": "matches", "value": SLOW_PATTERN}
        if slow
        else {"field": "title", "op": "eq", "value": "x"}
    )
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [{"name": "slow" if slow else "quick", "when": when, "then": [{"set": "label", "value": "hit"}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def new_project(folder: Path, *, slow: bool = True, items: int = SLOW_ITEMS) -> tuple[str, str]:
    """(company, project), applied, with `items` long titles in main.csv."""
    company, project = "sb_" + uuid.uuid4().hex[:10], "p_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "main.csv", ["id", "title"], [[f"K{i}", long_value(i)] for i in range(items)])
    RunStore().apply_spec(parse_spec(spec_of(company, project, slow=slow)), spec_dir=folder)
    return company, project


def active_backends(where: str = "TRUE", params: tuple[Any, ...] = ()) -> list[tuple[int, str]]:
    """(pid, application_name) of the other backends of the test database that run a statement now."""
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()"
            f" AND pid <> pg_backend_pid() AND state = 'active' AND ({where})",
            params,
        )
        return [(int(pid), str(name)) for pid, name in cur.fetchall()]


def still_active(pids: set[int]) -> set[int]:
    return {pid for pid, _ in active_backends()} & pids


def wait_long_statements(run_id: str, timeout: float = 120) -> set[int]:
    """The backends that have run one statement for LONG_RUNNING_S while the run is RUNNING (the slow rule)."""
    store = RunStore()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = active_backends("now() - query_start > make_interval(secs => %s)", (LONG_RUNNING_S,))
        if found:
            return {pid for pid, _ in found}
        assert store.run(run_id).status in ("PENDING", "RUNNING"), store.run(run_id).error
        time.sleep(0.1)
    raise AssertionError(f"no statement of run {run_id} ran for {LONG_RUNNING_S} s within {timeout} s")


def wait_run_backends(run_id: str, timeout: float = 120) -> set[int]:
    """The run's backends (by their name) once one of them has run a statement for LONG_RUNNING_S."""
    deadline = time.monotonic() + timeout
    prefix = application_name(run_id) + ":"
    while time.monotonic() < deadline:
        found = active_backends(
            "left(application_name, char_length(%s)) = %s AND now() - query_start > make_interval(secs => %s)",
            (prefix, prefix, LONG_RUNNING_S),
        )
        if found:
            return {pid for pid, _ in found}
        time.sleep(0.1)
    raise AssertionError(f"no backend named {prefix}… ran a statement for {LONG_RUNNING_S} s within {timeout} s")


def wait_status(run_id: str, within: float) -> str:
    store = RunStore()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        status = store.run(run_id).status
        if status not in ("PENDING", "RUNNING"):
            return status
        time.sleep(0.05)
    return store.run(run_id).status


def wait_inactive(pids: set[int], within: float) -> set[int]:
    deadline = time.monotonic() + within
    while still_active(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return still_active(pids)


def cancel_everything_left() -> None:
    """After a failed assertion: stop the slow statements, so the next tests do not share the cores with them."""
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'"
        )


class RunThread:
    """The batch driver (`firefeed run`'s) driving one run in a thread of this process."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.report: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.report = execute_run(self.run_id)
        except BaseException as err:
            self.error = err

    def join(self, timeout: float) -> dict[str, Any]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the driver of run {self.run_id} did not return in {timeout} s"
        assert self.error is None, self.error
        assert self.report is not None
        return self.report


# -- a cancel reaches the statement ------------------------------------------------------------------
@pytest.fixture(scope="module")
def workers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Worker processes, one per queue, as on other machines (in-process worker without a shared broker)."""
    base = tmp_path_factory.mktemp("bounds")
    env = worker_env(
        database_url,
        broker_url(BOUNDS_REDIS_URL),
        base,
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="1",
        RULES_CONCURRENCY="2",
        EXPORT_CONCURRENCY="1",
        FIREFEED_CHUNK_ROWS="3",
    )
    if not shared_broker_available():
        yield env
        return
    flush_broker(env["FIREFEED_BROKER_URL"])
    with celery_workers(env, log_dir=base):
        yield env
    flush_broker(env["FIREFEED_BROKER_URL"])


@pytest.fixture()
def client_env(workers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for key in ("FIREFEED_BROKER_URL", "FIREFEED_EXPORT_DIR", "FIREFEED_DATA_DIR", "FIREFEED_CHUNK_ROWS"):
        monkeypatch.setenv(key, workers[key])
    reset_settings()
    use_broker(workers["FIREFEED_BROKER_URL"])
    try:
        if shared_broker_available():
            yield workers
        else:
            with in_process_worker():
                yield workers
    finally:
        use_broker("memory://")
        reset_settings()


def test_a_cancel_through_the_api_stops_a_minute_long_statement_on_a_worker_within_seconds(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread
    from firefeed.runs.requests import start_run
    from firefeed.runs.tokens import TokenStore

    company, project = new_project(tmp_path)
    auth = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    run_id = start_run(project, "api")
    try:
        pids = wait_long_statements(run_id)
        with ServerThread(create_app()) as base_url, httpx.Client(base_url=base_url, timeout=20) as http:
            asked = time.monotonic()
            answer = http.post(f"/api/runs/{run_id}/cancel", headers=auth)
            assert answer.status_code == 202, answer.text
            status = wait_status(run_id, CANCELLED_WITHIN_S)
            took = time.monotonic() - asked
            assert status == "CANCELLED", (status, RunStore().run(run_id).error)
            assert took < CANCELLED_WITHIN_S
            assert wait_inactive(pids, 2.0) == set(), "the cancelled run's statement is still running"
            assert http.get(f"/api/runs/{run_id}", headers=auth).json()["status"] == "CANCELLED"
    finally:
        cancel_everything_left()
    # The project is free and runs again (a quick rule this time).
    RunStore().apply_spec(parse_spec(spec_of(company, project, slow=False)), spec_dir=tmp_path)
    again = start_run(project, "api")
    assert wait_status(again, 120) == "SUCCEEDED", RunStore().run(again).error


def test_cancelling_one_companys_run_leaves_another_companys_statements_running(run_env: Path, tmp_path: Path) -> None:
    store = RunStore()
    _, project_a = new_project(tmp_path / "a")
    _, project_b = new_project(tmp_path / "b")
    run_a, run_b = store.request_run(project_a, "cli"), store.request_run(project_b, "cli")
    driver_a, driver_b = RunThread(run_a), RunThread(run_b)
    try:
        pids_a, pids_b = wait_run_backends(run_a), wait_run_backends(run_b)
        assert not pids_a & pids_b

        asked = time.monotonic()
        assert store.request_cancel(run_a) == "RUNNING"
        assert wait_status(run_a, CANCELLED_WITHIN_S) == "CANCELLED", store.run(run_a).error
        assert time.monotonic() - asked < CANCELLED_WITHIN_S
        assert wait_inactive(pids_a, 2.0) == set()
        report_a = driver_a.join(CANCELLED_WITHIN_S)
        assert report_a["status"] == "CANCELLED"

        # The other company's run never noticed.
        assert store.run(run_b).status == "RUNNING"
        assert still_active(pids_b) == pids_b
        assert store.request_cancel(run_b) == "RUNNING"
        assert wait_status(run_b, CANCELLED_WITHIN_S) == "CANCELLED", store.run(run_b).error
        assert driver_b.join(CANCELLED_WITHIN_S)["status"] == "CANCELLED"
    finally:
        cancel_everything_left()
    # Project A runs again, its slow rule replaced.
    company_a = store.project(project_a).company_id
    store.apply_spec(parse_spec(spec_of(company_a, project_a, slow=False)), spec_dir=tmp_path / "a")
    assert execute_run(store.request_run(project_a, "cli"))["status"] == "SUCCEEDED"


# -- a statement and a step are bounded in time ----------------------------------------------------------
def write_spec(folder: Path, company: str, project: str, *, slow: bool) -> Path:
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_of(company, project, slow=slow)), encoding="utf-8")
    return path


def test_a_statement_over_the_statement_timeout_fails_the_run_naming_the_step_and_keeps_the_published_export(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    company, project = new_project(tmp_path, slow=False, items=2)
    code, first = run_json(write_spec(tmp_path, company, project, slow=False))
    assert code == 0 and first["status"] == "SUCCEEDED", first["error"]
    published = run_env / company / project / "out.csv"
    before = published.read_bytes()

    monkeypatch.setenv("FIREFEED_STATEMENT_TIMEOUT_S", "1")
    reset_settings()
    started = time.monotonic()
    code, report = run_json(write_spec(tmp_path, company, project, slow=True))
    assert time.monotonic() - started < 60  # the rule alone would take half a minute
    assert code == 1
    assert report["status"] == "FAILED"
    error = report["error"]
    assert (error["step"], error["type"]) == ("RULES", "StatementTimeoutError"), error
    assert error["message"].startswith("RULES: a statement ran longer than FIREFEED_STATEMENT_TIMEOUT_S=1 s"), error
    assert published.read_bytes() == before
    assert active_backends("now() - query_start > interval '1 second'") == []
    # The project is not locked.
    monkeypatch.delenv("FIREFEED_STATEMENT_TIMEOUT_S")
    reset_settings()
    code, after = run_json(write_spec(tmp_path, company, project, slow=False))
    assert code == 0 and after["status"] == "SUCCEEDED", after["error"]


def test_a_step_job_past_the_step_time_limit_has_its_statement_cancelled_and_fails_the_run(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    company, project = new_project(tmp_path, items=2)
    monkeypatch.setenv("FIREFEED_STEP_TIME_LIMIT_S", "3")
    reset_settings()
    started = time.monotonic()
    try:
        code, report = run_json(write_spec(tmp_path, company, project, slow=True))
    finally:
        cancel_everything_left()
    assert time.monotonic() - started < 3 + CANCELLED_WITHIN_S + 5
    assert (code, report["status"]) == (1, "FAILED")
    error = report["error"]
    assert (error["step"], error["type"]) == ("RULES", "StepTimeLimitError"), error
    assert "FIREFEED_STEP_TIME_LIMIT_S=3 s" in error["message"], error
    assert not (run_env / company / project / "out.csv").exists()


# -- what a connection is called -----------------------------------------------------------------------
def backend_name(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (conn.get_backend_pid(),))
        return str(cur.fetchone()[0])


def test_a_pooled_connection_carries_the_runs_name_only_while_the_run_uses_it(database_url: str) -> None:
    """Outside a run a connection keeps the name it connected with (PGAPPNAME or the URL's): fleets count by it."""
    sep = "&" if "?" in database_url else "?"
    engine = get_engine(f"{database_url}{sep}application_name=my-fleet")
    run_id = str(uuid.uuid4())
    with raw_connection(engine) as conn:
        assert backend_name(conn) == "my-fleet"
        with conn.cursor() as cur:
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone()[0] == "30min"  # FIREFEED_STATEMENT_TIMEOUT_S's default, 1800 s
    with session_state(application_name(run_id, "RULES", 7), 5.0), raw_connection(engine) as conn:
        pid = conn.get_backend_pid()
        assert backend_name(conn) == f"firefeed:{run_id}:RULES:7"
        with conn.cursor() as cur:
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone()[0] == "5s"
    # Back in the pool, idle: its own name again.
    admin = psycopg2.connect(database_url)
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", (pid,))
            assert cur.fetchone()[0] == "my-fleet"
    finally:
        admin.close()
