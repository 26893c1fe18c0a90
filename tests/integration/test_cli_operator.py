"""The operator's CLI: `firefeed projects` and `firefeed cancel`, as the API has them (#48)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from firefeed.cli import EXIT_OK, EXIT_UNKNOWN
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from tests.integration.conftest import cli, new_company
from tests.integration.test_api import add_project

pytestmark = pytest.mark.integration


def test_projects_lists_each_project_with_its_latest_run(run_env: Path, tmp_path: Path) -> None:
    company, _ = new_company()
    ran = add_project(company, tmp_path / "a")
    idle = add_project(company, tmp_path / "b")
    run_id = RunStore().request_run(ran, "cli")
    assert execute_run(run_id)["status"] == "SUCCEEDED"

    code, out = cli("projects", "--company", company)
    assert code == EXIT_OK
    lines = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert set(lines) == {ran, idle}
    assert "SUCCEEDED" in lines[ran] and run_id in lines[ran]
    assert "never run" in lines[idle]

    code, out = cli("projects", "--company", company, "--json")
    listed = {p["project"]: p for p in json.loads(out)}
    assert listed[ran]["latest_run"]["run_id"] == run_id and listed[idle]["latest_run"] is None

    code, out = cli("projects")  # every company's
    assert ran in out and idle in out
    assert cli("projects", "--company", "no_such_company_" + uuid.uuid4().hex[:6])[0] == EXIT_UNKNOWN


def test_cancel_ends_a_pending_run_and_leaves_a_finished_one(run_env: Path, tmp_path: Path) -> None:
    company, _ = new_company()
    project = add_project(company, tmp_path)
    store = RunStore()
    pending = store.request_run(project, "cli")
    code, out = cli("cancel", pending)
    assert (code, store.run(pending).status) == (EXIT_OK, "CANCELLED")
    assert "cancelled" in out

    done = store.request_run(project, "cli")  # the project is free again
    assert execute_run(done)["status"] == "SUCCEEDED"
    code, out = cli("cancel", done)
    assert (code, store.run(done).status) == (EXIT_OK, "SUCCEEDED")
    assert "already ended (SUCCEEDED)" in out

    assert cli("cancel", str(uuid.uuid4()))[0] == EXIT_UNKNOWN
    assert cli("cancel", "not-a-run-id")[0] == EXIT_UNKNOWN
