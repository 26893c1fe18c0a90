"""accept_drop reaches a run from every entry point: the API body, the trigger task by name, a processes row."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import write_csv
from tests.integration.test_api import add_project, new_company
from tests.integration.test_processes import insert, make_worker, row, workspace  # noqa: F401

pytestmark = pytest.mark.integration


def test_a_run_request_body_may_accept_a_drop_and_a_bare_request_does_not(
    http: httpx.Client,
    tmp_path: Path,
) -> None:
    company, auth = new_company()
    project = add_project(company, tmp_path)
    store = RunStore()
    for body, expected in (({"accept_drop": True}, True), (None, False), ({}, False)):
        answer = http.post(f"/api/projects/{project}/pipeline/run", headers=auth, json=body)
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        assert store.run(run_id).accept_drop is expected
        http.post(f"/api/runs/{run_id}/cancel", headers=auth)
    for bad in ({"accept_drop": "perhaps"}, {"accept": True}):
        refused = http.post(f"/api/projects/{project}/pipeline/run-now", headers=auth, json=bad)
        assert refused.status_code == 422, refused.text
    assert len(store.runs_of_project(project)) == 3


def test_the_trigger_task_takes_accept_drop_by_keyword(database_url: str, tmp_path: Path) -> None:
    from firefeed.tasks.pipeline import trigger

    company, _ = new_company()
    project = add_project(company, tmp_path)
    store = RunStore()
    answer = trigger(project, accept_drop=True)
    assert answer["status"] == "accepted"
    assert store.run(answer["run_id"]).accept_drop is True
    store.request_cancel(answer["run_id"])
    plain = trigger(project)
    assert store.run(plain["run_id"]).accept_drop is False
    store.request_cancel(plain["run_id"])


def test_a_processes_row_may_accept_a_drop_and_must_say_so_with_a_boolean(
    engine: Engine,
    run_env: Path,
    workspace: str,  # noqa: F811
    make_worker,  # noqa: F811
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    project = f"p{uuid.uuid4().hex[:8]}"
    spec = {
        "company": workspace,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    RunStore(engine).apply_spec(parse_spec(spec), spec_dir=tmp_path)
    outcomes = []
    for keys, input_data in (
        (10, {"project": project}),
        (2, {"project": project}),
        (2, {"project": project, "accept_drop": "yes"}),
        (2, {"project": project, "accept_drop": True}),
    ):
        write_csv(tmp_path / "main.csv", ["id", "title"], [[f"K{i}", "x"] for i in range(keys)])
        pid = insert(engine, "firefeed.pipeline.run", input_data, workspace=workspace)
        make_worker().drain()
        outcomes.append(row(engine, pid))
    assert [r["status"] for r in outcomes] == ["completed", "failed", "failed", "completed"]
    assert "8 of 10 items would be dropped (80% > max_drop 50%)" in outcomes[1]["error_message"]
    assert outcomes[1]["output_data"]["error"]["type"] == "DropGuardError"
    assert "input_data.accept_drop must be true or false, got the string 'yes'" in outcomes[2]["error_message"]
    assert outcomes[3]["output_data"]["exports"][0]["diff"]["drop"]["status"] == "accepted"
