"""Without a broker, `firefeed api` drives the runs it accepts itself, one at a time (issue 17).

Before, it answered 202 and the root task went to Celery's in-memory broker of the API's own
process, where no worker listens: the run stayed PENDING and its project was locked for good.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from firefeed.runs.service import RunStore
from tests.integration.conftest import cli, new_company
from tests.integration.test_api import add_project
from tests.ports import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture()
def no_broker(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    monkeypatch.delenv("FIREFEED_BROKER_URL", raising=False)
    yield {k: v for k, v in os.environ.items() if k != "FIREFEED_BROKER_URL"}


def _api(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "firefeed.cli", "api", "--port", str(port), "--no-access-log"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("firefeed api did not answer /healthz within 30 s")


def _stop(proc: subprocess.Popen[bytes]) -> bytes:
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    return err


def _finished(client: httpx.Client, run_id: str, auth: dict[str, str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{run_id}", headers=auth).json()
        if run["status"] not in ("PENDING", "RUNNING"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} is still {run['status']} after {timeout} s")


def test_runs_requested_from_an_api_without_a_broker_run_in_its_process_one_at_a_time(
    no_broker: dict[str, str], tmp_path: Path
) -> None:
    company, auth = new_company()
    first, second = (add_project(company, tmp_path / name) for name in ("one", "two"))
    port = free_ports()
    proc = _api(no_broker, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            ids = [
                client.post(f"/api/projects/{first}/pipeline/run", headers=auth),
                client.post(f"/api/projects/{second}/pipeline/run-now", headers=auth),  # the web page's Run now
            ]
            assert [r.status_code for r in ids] == [202, 202], [r.text for r in ids]
            runs = [_finished(client, r.json()["run_id"], auth) for r in ids]
            assert [r["status"] for r in runs] == ["SUCCEEDED", "SUCCEEDED"], runs
            # One at a time: the second started after the first finished.
            assert datetime.fromisoformat(runs[1]["started_at"]) >= datetime.fromisoformat(runs[0]["finished_at"])
            # The project is free again: the next request is accepted and runs too.
            again = client.post(f"/api/projects/{first}/pipeline/run", headers=auth)
            assert again.status_code == 202 and _finished(client, again.json()["run_id"], auth)["status"] == "SUCCEEDED"
    finally:
        err = _stop(proc)
    assert b"runs requested here run in this process" in err


def test_an_api_without_a_broker_takes_up_the_runs_left_pending(no_broker: dict[str, str], tmp_path: Path) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path / "left")
    run_id = RunStore().request_run(project, "api", company=company)  # accepted by an API that then stopped
    port = free_ports()
    proc = _api(no_broker, port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            assert _finished(client, run_id, auth)["status"] == "SUCCEEDED"
    finally:
        _stop(proc)


def test_trigger_without_a_broker_is_refused_and_leaves_the_project_free(
    no_broker: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    company, _ = new_company()
    project = add_project(company, tmp_path / "trig")
    code, _ = cli("trigger", project)
    assert code == 2
    assert "FIREFEED_BROKER_URL" in capsys.readouterr().err
    assert RunStore().runs_of_project(project) == []
