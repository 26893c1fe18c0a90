"""Metrics and logs of a real run: every metric moves, the exposition passes promtool, every log line has run_id."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import Engine

from firefeed import metrics
from firefeed.errors import PipelineBusyError
from firefeed.logging import JsonFormatter, RunContextFilter
from firefeed.pipeline.run import execute_run
from firefeed.runs.service import RunStore
from firefeed.schema.service import SchemaService
from firefeed.spec.loader import load_spec_file
from tests.integration.conftest import write_csv
from tests.services import redis_db, requires_redis
from tests.unit.test_metrics import promtool_check

pytestmark = pytest.mark.integration

# Redis database of these tests (the distributed tests use 13, the trigger tests 12).
METRICS_REDIS_URL = redis_db(11)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(body: bytes) -> Samples:
    return {(n, tuple(sorted(lbl.items()))): v for n, lbl, v in metrics.iter_samples(body.decode())}


def value(s: Samples, name: str, **labels: str) -> float:
    return s.get((name, tuple(sorted(labels.items()))), 0.0)


def batch_spec(folder: Path, project: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity"],
        [[f"K{i}", f"item {i}", f"{i}.50", str(i % 3)] for i in range(30)],
    )
    spec = {
        "company": "ops_metrics",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {
                "name": "out of stock",
                "when": {"field": "quantity", "op": "lte", "value": "0"},
                "then": [{"set": "availability", "value": "out of stock"}],
            },
            {"name": "drop cheap", "when": {"field": "price", "op": "lt", "value": "3"}, "then": [{"exclude": "true"}]},
        ],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(RunContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def finished_run(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One batch run, with the metrics before and after it and every log record written inside it."""
    import os

    from firefeed.config import reset_settings

    base = tmp_path_factory.mktemp("ops_metrics")
    old = {k: os.environ.get(k) for k in ("FIREFEED_EXPORT_DIR", "FIREFEED_DATA_DIR")}
    os.environ.update(FIREFEED_EXPORT_DIR=str(base / "exports"), FIREFEED_DATA_DIR=str(base / "var"))
    reset_settings()
    project = "m_" + uuid.uuid4().hex[:10]
    spec_path = batch_spec(base / "project", project)
    store = RunStore()
    store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    before = samples(metrics.render(fleet=False)[0])
    run_id = store.request_run(project, "cli")
    capture = _Capture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        report = execute_run(run_id)
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_settings()
    after = samples(metrics.render(fleet=False)[0])
    yield {"project": project, "run_id": run_id, "report": report, "before": before, "after": after, "logs": capture}


def test_the_run_succeeded(finished_run: dict[str, Any]) -> None:
    assert finished_run["report"]["status"] == "SUCCEEDED", finished_run["report"]


def test_every_run_and_step_metric_moves_when_a_run_happens(finished_run: dict[str, Any]) -> None:
    b, a = finished_run["before"], finished_run["after"]

    def moved(name: str, by: float = 1, **labels: str) -> None:
        assert value(a, name, **labels) - value(b, name, **labels) == by, (name, labels)

    moved("firefeed_runs_started_total", trigger="cli")
    moved("firefeed_runs_finished_total", status="SUCCEEDED", trigger="cli")
    moved("firefeed_run_duration_seconds_count", status="SUCCEEDED")
    assert value(a, "firefeed_run_duration_seconds_sum", status="SUCCEEDED") > value(
        b, "firefeed_run_duration_seconds_sum", status="SUCCEEDED"
    )
    for step in ("FETCH", "PARSE", "MERGE", "RULES", "EXPORT"):
        moved("firefeed_step_duration_seconds_count", step=step, status="SUCCEEDED")
    steps = {s["step"]: s for s in finished_run["report"]["steps"]}
    for step in ("PARSE", "MERGE", "RULES", "EXPORT"):
        moved("firefeed_step_rows_total", by=steps[step]["rows_out"], step=step, direction="out")
    assert steps["RULES"]["rows_out"] < steps["RULES"]["rows_in"]  # the rows moved are the report's


def test_lock_refusals_and_processes_claimed_move(finished_run: dict[str, Any]) -> None:
    store = RunStore()
    body = metrics.render(fleet=False)[0]
    refused = value(samples(body), "firefeed_lock_refusals_total", trigger="api")
    run_id = store.request_run(finished_run["project"], "api")
    with pytest.raises(PipelineBusyError):
        store.request_run(finished_run["project"], "api")
    store.request_cancel(run_id)
    metrics.process_claimed("firefeed.pipeline.run")
    s = samples(metrics.render(fleet=False)[0])
    assert value(s, "firefeed_lock_refusals_total", trigger="api") == refused + 1
    assert value(s, "firefeed_processes_claimed_total", function="firefeed.pipeline.run") >= 1
    assert value(s, "firefeed_runs_finished_total", status="CANCELLED", trigger="api") >= 1


def test_every_log_record_written_inside_the_run_carries_its_run_id(finished_run: dict[str, Any]) -> None:
    records = finished_run["logs"].records
    assert len(records) >= 4
    missing = [r.getMessage() for r in records if getattr(r, "run_id", "-") != finished_run["run_id"]]
    assert missing == []
    assert {getattr(r, "project", None) for r in records} == {finished_run["project"]}
    assert {getattr(r, "company", None) for r in records} == {"ops_metrics"}
    assert {"MERGE", "RULES", "EXPORT"} <= {getattr(r, "step", None) for r in records}
    doc = JsonFormatter().format(records[-1])
    assert f'"run_id": "{finished_run["run_id"]}"' in doc


@requires_redis
def test_the_fleet_gauges_read_active_runs_rules_tmp_tables_and_queue_depth(
    finished_run: dict[str, Any], engine: Engine
) -> None:
    broker = redis.Redis.from_url(METRICS_REDIS_URL)
    broker.delete("import", "import\x06\x163")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.FleetCollector(engine, broker_url=METRICS_REDIS_URL, cache_s=0))
    before = samples(generate_latest(registry))

    store = RunStore(engine)
    run_id = store.request_run(finished_run["project"], "api")
    table = SchemaService(engine).create_rules_tmp("ops_metrics", run_id, 1, ["title"])
    broker.rpush("import", b"{}", b"{}")
    broker.rpush("import\x06\x163", b"{}")
    try:
        during = samples(generate_latest(registry))
    finally:
        store.request_cancel(run_id)
        SchemaService(engine).drop_table("ops_metrics", table)
        broker.delete("import", "import\x06\x163")
        broker.close()

    assert (
        value(during, "firefeed_runs_active", status="PENDING")
        == value(before, "firefeed_runs_active", status="PENDING") + 1
    )
    assert value(during, "firefeed_rules_tmp_tables") == value(before, "firefeed_rules_tmp_tables") + 1
    assert value(during, "firefeed_queue_messages", queue="import") == 3
    assert value(during, "firefeed_queue_messages", queue="pipeline") == 0
    assert value(during, "firefeed_collector_up", source="database") == 1
    assert value(during, "firefeed_collector_up", source="broker") == 1
    promtool_check(generate_latest(registry))


def test_an_unreachable_broker_is_a_zero_not_a_failed_scrape(engine: Engine) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.FleetCollector(engine, broker_url="redis://127.0.0.1:1/0", cache_s=0))
    s = samples(generate_latest(registry))
    assert value(s, "firefeed_collector_up", source="broker") == 0
    assert value(s, "firefeed_collector_up", source="database") == 1


def test_the_api_metrics_and_render_pass_promtool(finished_run: dict[str, Any]) -> None:
    from firefeed.api.app import create_app
    from firefeed.api.serve import ServerThread

    with ServerThread(create_app()) as base:
        r = httpx.get(f"{base}/metrics", timeout=20)
    assert r.status_code == 200
    assert "firefeed_runs_finished_total" in r.text
    promtool_check(r.content)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    assert b"firefeed_runs_active" in body and b"firefeed_runs_started_total" in body
    promtool_check(body)
