"""The fleet as an operator sees it: real workers and Flower on Redis (or FIREFEED_TEST_BROKER), metrics, logs."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from firefeed import metrics
from firefeed.runs.service import RunStore
from firefeed.spec.loader import load_spec_file
from tests.integration.celery_workers import FIREFEED, celery_workers, flush_broker
from tests.integration.conftest import write_csv
from tests.ports import free_ports
from tests.services import broker_url, redis_db, requires_shared_broker
from tests.unit.test_metrics import promtool_check

pytestmark = pytest.mark.integration

# Redis database of these tests (the distributed tests use 13, the trigger tests 12, the metrics tests 11).
FLEET_REDIS_URL = os.environ.get("FIREFEED_TEST_FLEET_REDIS_URL", redis_db(10))
FLOWER_AUTH = ("ops", "flower-secret")


def _wait_http(url: str, timeout: float = 30, **kw: Any) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url, timeout=2, **kw)
            if r.status_code < 500:
                return r
        except httpx.HTTPError as err:
            last = err
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout}s: {last}")


@pytest.fixture(scope="module")
def fleet(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Flower first (it only sees events sent while it listens), then one worker per queue, then one run."""
    base = tmp_path_factory.mktemp("fleet")
    metrics_base = free_ports(5)
    flower_port = free_ports(1)
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=broker_url(FLEET_REDIS_URL),
        FIREFEED_EXPORT_DIR=str(base / "exports"),
        FIREFEED_DATA_DIR=str(base / "var"),
        FIREFEED_WORKER_METRICS_PORT=str(metrics_base),
        FIREFEED_FLOWER_USER=FLOWER_AUTH[0],
        FIREFEED_FLOWER_PASSWORD=FLOWER_AUTH[1],
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="1",
        EXPORT_CONCURRENCY="1",
    )
    flush_broker(env["FIREFEED_BROKER_URL"])
    flower_log = (base / "flower.log").open("wb")
    flower = subprocess.Popen(
        [FIREFEED, "flower", "--port", str(flower_port)], env=env, stdout=flower_log, stderr=flower_log
    )
    try:
        flower_url = f"http://127.0.0.1:{flower_port}"
        _wait_http(f"{flower_url}/healthcheck")
        with celery_workers(env, log_dir=base):
            project = "fleet_" + uuid.uuid4().hex[:8]
            folder = base / "project"
            folder.mkdir()
            write_csv(folder / "main.csv", ["id", "title", "quantity"], [[f"F{i}", f"t{i}", str(i)] for i in range(25)])
            spec = {
                "company": "ops_fleet",
                "project": project,
                "sources": [{"name": "main", "url": "main.csv"}],
                "rules": [{"name": "none left", "when": {"field": "quantity", "op": "lte", "value": "0"},
                           "then": [{"exclude": "true"}]}],
                "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
            }  # fmt: skip
            (folder / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
            RunStore().apply_spec(load_spec_file(folder / "spec.yaml"), spec_dir=folder)
            done = subprocess.run([FIREFEED, "trigger", project], env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            run_id = done.stdout.strip().splitlines()[-1]
            deadline = time.monotonic() + 90
            while RunStore().run(run_id).status in ("PENDING", "RUNNING"):
                assert time.monotonic() < deadline, f"run {run_id} did not finish"
                time.sleep(0.1)
            yield {
                "run_id": run_id,
                "project": project,
                "status": RunStore().run(run_id).status,
                "flower": flower_url,
                "metrics_base": metrics_base,
                "logs": base,
                "metrics_dir": base / "var" / "metrics",
            }
    finally:
        flower.terminate()
        try:
            flower.wait(timeout=10)
        except subprocess.TimeoutExpired:
            flower.kill()
        flower_log.close()


@requires_shared_broker
def test_the_run_through_the_fleet_succeeded(fleet: dict[str, Any]) -> None:
    assert fleet["status"] == "SUCCEEDED"


@requires_shared_broker
def test_flowers_api_lists_the_finished_root_task_behind_basic_auth(fleet: dict[str, Any]) -> None:
    url = f"{fleet['flower']}/api/tasks"
    assert httpx.get(url, timeout=5).status_code == 401
    deadline = time.monotonic() + 20
    while True:
        tasks = httpx.get(url, auth=FLOWER_AUTH, params={"taskname": "firefeed.pipeline.run"}, timeout=5).json()
        roots = [t for t in tasks.values() if fleet["run_id"] in str(t.get("args"))]
        if (roots and roots[0]["state"] == "SUCCESS") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert roots, tasks
    assert roots[0]["name"] == "firefeed.pipeline.run"
    assert roots[0]["state"] == "SUCCESS"


def test_flower_refuses_to_start_without_a_password() -> None:
    env = dict(os.environ, FIREFEED_BROKER_URL=FLEET_REDIS_URL, FIREFEED_FLOWER_PASSWORD="")
    done = subprocess.run([FIREFEED, "flower"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "FIREFEED_FLOWER_PASSWORD" in done.stderr


@requires_shared_broker
def test_each_worker_serves_every_childs_metrics_on_its_port_and_passes_promtool(fleet: dict[str, Any]) -> None:
    totals: dict[str, float] = {}
    for offset, queue in enumerate(("pipeline", "import", "rules", "export", "control", "sync")):
        r = _wait_http(f"http://127.0.0.1:{fleet['metrics_base'] + offset}/metrics")
        assert r.status_code == 200, queue
        promtool_check(r.content)
        for name, labels, value in metrics.iter_samples(r.text):
            key = name + str(sorted(labels.items()))
            totals[key] = totals.get(key, 0.0) + value
    assert totals["firefeed_runs_started_total[('trigger', 'cli')]"] >= 1
    assert totals["firefeed_runs_finished_total[('status', 'SUCCEEDED'), ('trigger', 'cli')]"] >= 1
    assert totals["firefeed_step_duration_seconds_count[('status', 'SUCCEEDED'), ('step', 'EXPORT')]"] >= 1
    # One metrics folder per worker port, wiped at start.
    assert sorted(p.name for p in fleet["metrics_dir"].iterdir()) == [
        f"worker-{fleet['metrics_base'] + i}" for i in range(6)
    ]


@requires_shared_broker
def test_the_workers_log_lines_of_the_run_carry_its_run_id(fleet: dict[str, Any]) -> None:
    text = "".join(
        (fleet["logs"] / f"worker-{q}.log").read_text(encoding="utf-8", errors="replace")
        for q in ("pipeline", "import", "rules", "export")
    )
    # FireFeed's format: date time LEVEL logger run_id=… project=… step=… job=… message
    run_lines = [
        line for line in text.splitlines() if len(line.split()) > 4 and line.split()[3].startswith("firefeed.pipeline")
    ]
    assert run_lines, text[-2000:]
    assert all(f"run_id={fleet['run_id']}" in line for line in run_lines), run_lines
    assert any("step=EXPORT" in line for line in run_lines)
    # Where the run began and how it ended, each on a line of its own.
    assert [line for line in run_lines if "run started (trigger cli)" in line]
    assert [line for line in run_lines if "run ended SUCCEEDED in " in line]
    # Celery's own line on each step job's outcome, in the import, rules and export workers, names the run and job.
    outcomes = [line for line in text.splitlines() if "] succeeded in" in line and "firefeed." in line]
    for task in ("firefeed.import.source", "firefeed.import.merge", "firefeed.export.write"):
        mine = [line for line in outcomes if f"Task {task}[" in line]
        assert mine, (task, outcomes)
        assert all(f"run_id={fleet['run_id']}" in line and "job=-" not in line for line in mine), mine
