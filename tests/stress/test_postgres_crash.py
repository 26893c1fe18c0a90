"""The drop guard survives a Postgres crash (issue 17): its baselines are WAL-logged tables.

An immediate shutdown (no checkpoint: crash recovery at the next start) between two runs. Crash
recovery empties UNLOGGED tables, so a baseline kept in one would come back empty and the run
after the crash would publish a feed that lost 60% of its items without a word.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration import conftest as integration
from tests.integration.conftest import run_json
from tests.integration.test_quality_diff import _items, _write

pytestmark = pytest.mark.stress
run_env = integration.run_env  # exports and downloads under tmp_path (a fixture)


def _crash_and_restart_postgres() -> None:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[0]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "stop", "-m", "immediate"],
        check=True,
        timeout=60,
    )
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"], check=True, timeout=120)
    deadline = time.monotonic() + 60
    while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode != 0:
        assert time.monotonic() < deadline, "Postgres did not come back within 60 s"
        time.sleep(0.5)


def test_the_drop_guard_still_blocks_after_a_postgres_crash_between_runs(
    run_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    spec = _write(tmp_path, "crash_guard", _items(range(1000)))
    assert run_json(spec)[0] == 0
    folder = run_env / "acme" / "crash_guard"
    before = (folder / "t.csv").read_bytes()

    _crash_and_restart_postgres()
    stress_tally.fault("postgres immediate shutdown")

    _write(tmp_path, "crash_guard", _items(range(400)))
    code, report = run_json(spec)
    assert (code, report["status"]) == (1, "FAILED"), report.get("error")
    assert "600 of 1000 items would be dropped" in report["error"]["message"]
    assert (folder / "t.csv").read_bytes() == before
