"""`firefeed fleet` on a bare machine: no broker configured, the whole fleet from one command, and Ctrl-C
(or the fleet's own death) leaves no process behind."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg2
import pytest

from tests.integration.conftest import new_company
from tests.integration.test_api import add_project
from tests.ports import free_ports

pytestmark = pytest.mark.integration

NAMES = ("fleet", "api", "pipeline", "import", "rules", "export", "beat", "flower")
WORKER_QUEUES = ("pipeline", "import", "rules", "export")


@dataclass
class RunningFleet:
    proc: subprocess.Popen[str]
    base_url: str
    lines: list[str] = field(default_factory=list)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def log(self) -> str:
        return "\n".join(self.lines[-80:])


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _alive(procs)


def _cmdlines(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            out.append(" ".join(p.cmdline()))
    return out


@pytest.fixture()
def fleet(database_url: str, tmp_path: Path) -> Iterator[RunningFleet]:
    """`firefeed fleet` as a subprocess: FIREFEED_BROKER_URL unset, the session database, free ports."""
    port = free_ports()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREFEED_")}
    env.update(
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_DATA_DIR=str(tmp_path / "var"),
        FIREFEED_EXPORT_DIR=str(tmp_path / "exports"),
        FIREFEED_WORKER_METRICS_PORT="0",
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="1",
        RULES_CONCURRENCY="1",
        EXPORT_CONCURRENCY="1",
    )
    argv = [sys.executable, "-m", "firefeed.cli", "fleet", "--port", str(port), "--flower-port", str(free_ports())]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    running = RunningFleet(proc, f"http://127.0.0.1:{port}")

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            running.lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the fleet exited with {proc.returncode}:\n{running.log()}"
            assert time.monotonic() < deadline, f"the API did not answer /healthz:\n{running.log()}"
            try:
                if httpx.get(running.base_url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        seen = running.descendants()
        yield running
    finally:
        # Whatever the test did, take the whole tree down.
        seen += running.descendants()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in _alive(seen):
            p.kill()
        reader.join(timeout=5)


def _wait_for_children(fleet: RunningFleet, timeout: float = 60) -> list[psutil.Process]:
    """The fleet's process tree once every child and every worker's pool is up."""
    deadline = time.monotonic() + timeout
    while True:
        procs = fleet.descendants()
        cmds = _cmdlines(procs)
        direct = [c for c in cmds if "firefeed.cli" in c]
        wanted = [" api ", " beat ", " flower "] + [f" worker {q} " for q in WORKER_QUEUES]
        missing = [w for w in wanted if not any(w in c + " " for c in direct)]
        # Each worker's prefork pool: one child of its own (every concurrency is 1 here).
        if not missing and len(procs) >= 7 + len(WORKER_QUEUES):
            return procs
        assert time.monotonic() < deadline, f"missing {missing} in {cmds}:\n{fleet.log()}"
        time.sleep(0.5)


@pytest.mark.stress  # 8-21 s: `make stress` (make test stays under 10 minutes)
def test_the_fleet_runs_a_run_triggered_through_the_api_and_ctrl_c_leaves_no_process(
    fleet: RunningFleet, tmp_path: Path, database_url: str
) -> None:
    company, auth = new_company("fleet_")
    project = add_project(company, tmp_path / "project")

    with httpx.Client(base_url=fleet.base_url, timeout=30) as http:
        accepted = http.post(f"/api/projects/{project}/pipeline/run", headers=auth)
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        deadline = time.monotonic() + 60
        status = "PENDING"
        while time.monotonic() < deadline:
            report = http.get(f"/api/runs/{run_id}", headers=auth).json()
            status = report["status"]
            if status not in ("PENDING", "RUNNING"):
                break
            time.sleep(0.5)
        assert status == "SUCCEEDED", f"{report.get('error')}\n{fleet.log()}"
        assert report["exports"][0]["rows"] == 3

    procs = _wait_for_children(fleet)
    for name in NAMES:
        assert any(re.match(rf"{name} *\| ", line) for line in fleet.lines), f"no {name} lines:\n{fleet.log()}"
    assert any("generated for this fleet" in line for line in fleet.lines)

    # The broker lived on the session database, in its own schema; the control plane's stays as Alembic made it.
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_name LIKE 'kombu%'")
            assert sorted(cur.fetchall()) == [("firefeed_broker", "kombu_message"), ("firefeed_broker", "kombu_queue")]
    finally:
        conn.close()

    fleet.proc.send_signal(signal.SIGINT)
    try:
        code = fleet.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the fleet did not stop within 20 s of SIGINT:\n{fleet.log()}")
    assert code == 0, fleet.log()
    left = _wait_gone(procs, 5)
    assert left == [], f"left behind: {_cmdlines(left)}\n{fleet.log()}"
    assert any(re.match(r"fleet *\| stopped$", line) for line in fleet.lines), fleet.log()


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_the_children_stop_when_the_fleet_itself_is_killed(fleet: RunningFleet) -> None:
    procs = _wait_for_children(fleet)
    fleet.proc.send_signal(signal.SIGKILL)
    fleet.proc.wait(timeout=10)
    left = _wait_gone(procs, 30)
    assert left == [], f"left behind after kill -9 of the fleet: {_cmdlines(left)}\n{fleet.log()}"
