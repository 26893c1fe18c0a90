"""The pipeline through real Celery workers (one process per queue) on Redis, or on FIREFEED_TEST_BROKER.

Without a shared broker the same tests run against Celery's in-memory broker and one in-process
worker for every queue; the few that need separate worker processes are `requires_shared_broker`.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.runs.report import build_report
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from tests.integration.celery_workers import (
    REDIS_URL,
    bare_client_send,
    celery_workers,
    flush_broker,
    in_process_worker,
    worker_env,
)
from tests.integration.conftest import run_json, write_csv
from tests.integration.file_servers import USER, SFTPServer
from tests.services import broker_url, is_amqp, redis_db, requires_shared_broker, shared_broker_available

pytestmark = pytest.mark.integration

RULES = [
    {
        "name": "out of stock",
        "when": {"field": "quantity", "op": "lte", "value": "0"},
        "then": [{"set": "availability", "value": "out of stock"}],
    },
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {"name": "drop cheap", "when": {"field": "price", "op": "lt", "value": "2"}, "then": [{"exclude": "true"}]},
    {"name": "title", "then": [{"capitalize": "title"}, {"append": "title", "value": " | {brand}"}]},
]


# Reads the title the last rule of RULES writes: a pass of its own that only excludes.
LAST_EXCLUSION = {
    "name": "drop brand1",
    "when": {"field": "title", "op": "ends_with", "value": "| brand1"},
    "then": [{"exclude": "true"}],
}


def _spec(folder: Path, company: str, project: str, items: int = 40, rules: list[Any] = RULES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "brand", "price", "quantity"],
        [[f"K{i}", f"item number {i}", f"brand{i % 3}", f"{i}.50 EUR", str(i % 4)] for i in range(items)],
    )
    (folder / "extra.jsonl").write_text(
        "\n".join(
            json.dumps({"id": f"K{i}", "color": ["red", "blue"][i % 2], "quantity": str(i)}) for i in range(0, items, 2)
        )
        + "\n",
        encoding="utf-8",
    )
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}, {"name": "extra", "url": "extra.jsonl", "mode": "append"}],
        "rules": rules,
        "exports": [
            {"name": "csv", "format": "csv", "path": "out.csv"},
            {"name": "jsonl", "format": "jsonl", "path": "out.jsonl", "gzip": "true"},
            # C3: these items are not Google-complete; the tests read what the fleet writes.
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
        ],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def workers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    base = tmp_path_factory.mktemp("dist")
    env = worker_env(
        database_url,
        broker_url(REDIS_URL),
        base,
        PIPELINE_CONCURRENCY="3",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="2",
        EXPORT_CONCURRENCY="2",
        FIREFEED_CHUNK_ROWS="10",
        # The delivery test's SFTP server lives on 127.0.0.1, its password in a company secret.
        FIREFEED_SECRETS_KEY=generate_key(),
        FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1",
    )
    if not shared_broker_available():
        yield env  # no worker processes: `client_env` starts an in-process worker per test
        return
    flush_broker(env["FIREFEED_BROKER_URL"])
    with celery_workers(env, log_dir=base):
        yield env


@pytest.fixture()
def client_env(workers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This test process sends to the same broker and writes to the same folders as the workers."""
    for key in (
        "FIREFEED_BROKER_URL",
        "FIREFEED_EXPORT_DIR",
        "FIREFEED_DATA_DIR",
        "FIREFEED_CHUNK_ROWS",
        "FIREFEED_SECRETS_KEY",
        "FIREFEED_FETCH_ALLOWED_HOSTS",
    ):
        monkeypatch.setenv(key, workers[key])
    reset_settings()
    from tests.integration.celery_workers import use_broker

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


def wait_finished(run_id: str, timeout: float = 60) -> dict[str, Any]:
    store = RunStore()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = store.run(run_id)
        if run.status not in ("PENDING", "RUNNING"):
            return build_report(store, run_id)
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not finish in {timeout}s (status {store.run(run_id).status})")


def test_a_run_through_the_queues_writes_the_same_exports_as_firefeed_run(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "acme", "dist_same")
    code, batch = run_json(spec)
    assert code == 0, batch["error"]
    # full: the same inputs again would reuse the batch run (SPEC 11 I2); the fleet must compute them
    report = wait_finished(start_run("dist_same", "api", full=True))
    assert report["status"] == "SUCCEEDED", report["error"]
    assert [s["step"] for s in report["steps"]] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    assert {e["name"]: e["sha256"] for e in report["exports"]} == {e["name"]: e["sha256"] for e in batch["exports"]}
    assert report["rules"] == batch["rules"]


def test_a_catalog_run_through_the_queues_matches_firefeed_run(client_env: dict[str, str], tmp_path: Path) -> None:
    """Lookups (loaded by the MERGE job), grouped passes (one chunk job each) and channel rules (in the
    export jobs) through the fleet give the batch run's files and counts (SPEC 9)."""
    spec = _spec(tmp_path, "acme", "dist_catalog", items=60)
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    write_csv(tmp_path / "brands.csv", ["code", "label"], [["brand0", "first"], ["brand2", "third"]])
    doc["group"] = "brand"
    doc["lookups"] = [{"name": "brands", "url": "brands.csv", "key": "code"}]
    doc["rules"] = [
        *RULES[:2],
        {"name": "label", "then": [{"lookup": "brands", "match": "brand", "set": {"label": "label"}}]},
        {"name": "low", "then": [{"aggregate": "low", "op": "min", "of": "price"}]},
    ]
    doc["exports"][0]["rules"] = [
        {"name": "one per brand", "when": {"not": {"group_first": "true"}}, "then": [{"exclude": "true"}]}
    ]
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, batch = run_json(spec)
    assert code == 0, batch["error"]
    report = wait_finished(start_run("dist_catalog", "api", full=True), timeout=120)
    assert report["status"] == "SUCCEEDED", report["error"]
    assert {e["name"]: e["sha256"] for e in report["exports"]} == {e["name"]: e["sha256"] for e in batch["exports"]}
    assert report["rules"] == batch["rules"] and report["rules"]["lookups"][0]["matched"] == 40
    assert report["exports"][0]["rules"] == batch["exports"][0]["rules"]
    assert report["exports"][0]["rows"] == 3  # one item per brand (the append source's keys are all in main)
    assert report["lookups"] == batch["lookups"]


def test_channel_rules_viewed_over_the_fleets_chunk_tables_match_firefeed_run(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    """Through the fleet the project's result is the view of its chunk jobs' tables (a pass per chunk);
    an export's rules that count nothing are a view over that view, which its file and diagnostics read
    in feed order: the same bytes and counts as the batch run, whose result is one table."""
    spec = _spec(tmp_path, "acme", "dist_channel_view", items=60, rules=[*RULES, LAST_EXCLUSION])
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["exports"][0]["rules"] = [
        {"name": "tag", "then": [{"set": "label", "value": "{brand}-{id}"}]},
        {"name": "web", "then": [{"append": "title", "value": " (web)"}]},
    ]
    doc["exports"][1]["rules"] = [{"name": "upper", "then": [{"uppercase": "brand"}]}]
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, batch = run_json(spec)
    assert code == 0, batch["error"]
    report = wait_finished(start_run("dist_channel_view", "api", full=True), timeout=120)
    assert report["status"] == "SUCCEEDED", report["error"]
    assert [p["step"] for p in report["steps"]] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    assert {e["name"]: e["sha256"] for e in report["exports"]} == {e["name"]: e["sha256"] for e in batch["exports"]}
    for got, want in zip(report["exports"], batch["exports"], strict=True):
        assert got.get("rules") == want.get("rules") and got.get("diagnostics") == want.get("diagnostics")
        assert got["rows"] == want["rows"]
    kept = report["exports"][0]["rows"]
    assert report["exports"][0]["rules"]["matched"] == {"tag": kept, "web": kept}
    out = Path(client_env["FIREFEED_EXPORT_DIR"]) / "acme" / "dist_channel_view" / "out.csv"
    with out.open(newline="", encoding="utf-8") as f:
        items = list(csv.DictReader(f))
    ids = [int(i["id"][1:]) for i in items]
    assert len(items) == kept and ids == sorted(ids), ids  # feed order across the chunks
    assert all(i["title"].endswith(" (web)") and i["label"] == f"{i['brand']}-{i['id']}" for i in items), items[:2]


def _wait_fleet_idle(timeout: float = 60) -> None:
    """Until no worker of the fleet runs a task (or the timeout: the test then says what it saw)."""
    from firefeed.celery_app import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = app.control.inspect(timeout=1.0).active() or {}
        if not any(active.values()):
            return
        time.sleep(0.2)


def test_three_projects_of_two_companies_run_at_once(client_env: dict[str, str], tmp_path: Path) -> None:
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    store = RunStore()
    names = [("acme", "par_a"), ("acme", "par_b"), ("beta", "par_c")]
    for company, project in names:
        # Enough items that a run outlasts the others' pickup on a warm fleet (400 took 0.8 s: no overlap).
        spec_path = _spec(tmp_path / project, company, project, items=8000)
        store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    _wait_fleet_idle()  # three free pipeline slots: a slot still busy with an earlier test's run would serialise two
    run_ids = [start_run(project, "api") for _, project in names]
    reports = [wait_finished(r, timeout=120) for r in run_ids]
    assert [r["status"] for r in reports] == ["SUCCEEDED"] * 3, [r["error"] for r in reports]
    starts = [datetime.fromisoformat(r["started_at"]) for r in reports]
    ends = [datetime.fromisoformat(r["finished_at"]) for r in reports]
    # Runs of different projects overlap. (All three at once is what PIPELINE_CONCURRENCY=3 allows, but after the
    # catalog fleet test the third run repeatedly started only when the first ended: see the session notes.)
    spans = sorted(zip(starts, ends, strict=True))
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), f"no two runs overlapped: {spans}"
    rows = {r["project"]: r["exports"][0]["rows"] for r in reports}
    assert len(set(rows.values())) == 1 and next(iter(rows.values())) > 0


@requires_shared_broker
@pytest.mark.parametrize("queue", ["control", None], ids=["queue-named", "celery-defaults"])
def test_a_bare_celery_client_triggers_a_run_by_task_name(
    client_env: dict[str, str], tmp_path: Path, queue: str | None
) -> None:
    """A plain Celery app with default settings (no queue named: Celery's default `celery` queue) is answered too."""
    from firefeed.spec.loader import load_spec_file

    project = f"by_name_{queue or 'default'}"
    spec_path = _spec(tmp_path, "acme", project)
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    answer = bare_client_send(
        client_env["FIREFEED_BROKER_URL"], "firefeed.pipeline.trigger", [project], tmp_path, queue
    )
    assert answer["status"] == "accepted"
    report = wait_finished(answer["run_id"])
    assert report["status"] == "SUCCEEDED", report["error"]
    assert report["trigger"] == "task"


@requires_shared_broker
def test_the_root_task_sent_by_name_to_the_default_queue_runs_on_the_pipeline_worker(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    """`firefeed.pipeline.run(run_id)` from a plain client lands on the control worker, which hands it to the
    `pipeline` queue under the same task id: the caller still gets the RunReport."""
    from firefeed.spec.loader import load_spec_file

    spec_path = _spec(tmp_path, "acme", "root_by_name")
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    run_id = start_run("root_by_name", "task", enqueue=lambda _: None)  # committed, not sent
    report = bare_client_send(client_env["FIREFEED_BROKER_URL"], "firefeed.pipeline.run", [run_id], tmp_path)
    assert report["run_id"] == run_id and report["status"] == "SUCCEEDED", report
    assert wait_finished(run_id)["status"] == "SUCCEEDED"


@requires_shared_broker
def test_a_run_firefeed_sends_leaves_no_result_waiting_on_the_broker(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    """The RunReport is in the database: a result nobody reads would pile up (on rpc://, in the sender's queue)."""
    from firefeed.celery_app import app
    from firefeed.spec.loader import load_spec_file

    spec_path = _spec(tmp_path, "acme", "no_result")
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    run_id = start_run("no_result", "api")
    assert wait_finished(run_id)["status"] == "SUCCEEDED"
    time.sleep(1.0)  # the root task returns just after the run is marked finished
    broker = client_env["FIREFEED_BROKER_URL"]
    if is_amqp(broker):
        from amqp.exceptions import NotFound
        from kombu import Connection
        from kombu.exceptions import OperationalError

        with Connection(broker) as conn:
            try:
                waiting = conn.default_channel.queue_declare(queue=app.thread_oid, passive=True).message_count
            except (NotFound, OperationalError):
                waiting = 0  # the reply queue was never made: nothing was sent to it
        assert waiting == 0
    else:
        import redis

        assert not redis.Redis.from_url(broker).exists(f"celery-task-meta-{run_id}")


def test_a_failed_step_fails_the_run_keeps_exports_and_frees_the_project(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "acme", "dist_fail")
    assert run_json(spec)[0] == 0
    export = Path(client_env["FIREFEED_EXPORT_DIR"]) / "acme" / "dist_fail" / "out.csv"
    before = export.read_bytes()
    (tmp_path / "extra.jsonl").unlink()
    report = wait_finished(start_run("dist_fail", "api"))
    assert report["status"] == "FAILED"
    assert report["error"]["step"] == "FETCH"
    assert "extra" in report["error"]["message"]
    assert export.read_bytes() == before
    _spec(tmp_path, "acme", "dist_fail")
    assert wait_finished(start_run("dist_fail", "api"))["status"] == "SUCCEEDED"


def _stock_spec(
    folder: Path, project: str, quantities: dict[int, str], items: int = 60, rules: list[Any] = RULES
) -> Path:
    """`_spec`'s items with their quantity from an enrich stock source (`quantities` overrides some)."""
    spec = _spec(folder, "acme", project, items=items, rules=rules)
    write_csv(
        folder / "stock.csv", ["id", "quantity"], [[f"K{i}", quantities.get(i, str(i % 5))] for i in range(items)]
    )
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["sources"] = [doc["sources"][0], {"name": "stock", "url": "stock.csv", "mode": "enrich"}]
    doc["exports"] = doc["exports"][:1]
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return spec


#: rules no decision of which reads the stock's quantity (an action does): no count can change, MERGE reads no
#: old row, and its new rows are a view (pipeline/delta.py)
UNCOUNTED_RULES = [*RULES[1:], {"name": "stock note", "then": [{"append": "title", "value": " ({quantity} left)"}]}]


@pytest.mark.parametrize("rules", [RULES, UNCOUNTED_RULES], ids=["counted", "uncounted"])
def test_a_fleet_delta_rules_only_the_changed_items_as_chunk_jobs(
    client_env: dict[str, str], tmp_path: Path, rules: list[Any]
) -> None:
    """SPEC 11 through the fleet (#52): a stock change is a delta there too, its RULES chunk jobs cover only the
    changed items (25 here, more than a chunk of 10), and its file and counts are a fresh batch run's. Where
    MERGE's new rows are a view, the jobs cut a copy of them (a view has no heap pages)."""
    from sqlalchemy import select

    from firefeed.db.engine import session_factory
    from firefeed.db.models import PipelineJob
    from firefeed.spec.loader import load_spec_file

    project = "dist_delta" if rules is RULES else "dist_delta_uncounted"
    spec = _stock_spec(tmp_path / "fleet", project, {}, rules=rules)
    RunStore().apply_spec(load_spec_file(spec), spec_dir=spec.parent)
    first = wait_finished(start_run(project, "api"), timeout=120)
    assert first["status"] == "SUCCEEDED", first["error"]
    changed = {i: "0" if i % 5 else "7" for i in range(0, 50, 2)}  # 25 items' quantity
    _stock_spec(tmp_path / "fleet", project, changed, rules=rules)
    report = wait_finished(start_run(project, "api"), timeout=120)
    assert report["status"] == "SUCCEEDED", report["error"]
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert report["incremental"]["items_changed"] == 25
    code, fresh = run_json(_stock_spec(tmp_path / "fresh", f"{project}_fresh", changed, rules=rules))
    assert code == 0, fresh["error"]
    assert report["rules"] == fresh["rules"]
    assert [(e["rows"], e["sha256"]) for e in report["exports"]] == [(e["rows"], e["sha256"]) for e in fresh["exports"]]
    with session_factory()() as s:
        jobs = s.scalars(
            select(PipelineJob).where(PipelineJob.run_id == report["run_id"], PipelineJob.kind == "rules_chunk")
        ).all()
    if shared_broker_available():  # RULES fans out only when the driver's worker does not take the rules queue
        from firefeed.dataplane.names import rules_tmp_table
        from firefeed.pipeline.delta import NEW_ROWS, NEW_ROWS_COPY

        first_pass = [j.params or {} for j in jobs if j.pass_no == 1]
        # The changed items' new rows, not the items table (the parts are runs of heap pages: one page here).
        source = rules_tmp_table(report["run_id"], NEW_ROWS if rules is RULES else NEW_ROWS_COPY)
        assert {p["src"] for p in first_pass} == {source}, first_pass
        assert sum(int(p["rows"] or 0) for p in first_pass) == 25, first_pass
    else:
        assert jobs == []


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    best = now = 0
    for _, delta in events:
        now += delta
        best = max(best, now)
    return best


@requires_shared_broker
def test_rules_chunk_jobs_run_in_parallel_up_to_the_pool_size_and_not_beyond(
    client_env: dict[str, str], tmp_path: Path
) -> None:
    from sqlalchemy import select

    from firefeed.db.engine import session_factory
    from firefeed.db.models import PipelineJob

    spec = _spec(tmp_path, "acme", "chunky", items=600, rules=[*RULES, LAST_EXCLUSION])
    code, batch = run_json(spec)
    assert code == 0
    run_id = start_run("chunky", "api", full=True)
    report = wait_finished(run_id, timeout=120)
    assert report["status"] == "SUCCEEDED", report["error"]
    assert report["rules"] == batch["rules"]
    assert {e["name"]: e["sha256"] for e in report["exports"]} == {e["name"]: e["sha256"] for e in batch["exports"]}
    with session_factory()() as s:
        jobs = s.scalars(
            select(PipelineJob).where(PipelineJob.run_id == report["run_id"], PipelineJob.kind == "rules_chunk")
        ).all()
    # 600 items with FIREFEED_CHUNK_ROWS=10: at most 16 parts (FIREFEED_RULES_MAX_SLICES), not 60, and no
    # more than the items table's heap pages (the fleet cuts it by pages), one job per part and pass;
    # the rules that only exclude run as a DELETE in each part's own table instead of a copy.
    per_pass = Counter(j.pass_no for j in jobs)
    assert len(per_pass) == 3 and len(set(per_pass.values())) == 1 and 2 < per_pass[1] <= 16, per_pass
    in_place = {j.pass_no for j in jobs if (j.params or {}).get("in_place")}
    assert in_place and all((j.params or {}).get("in_place") for j in jobs if j.pass_no in in_place)
    overlap = _max_overlap([(j.claimed_at, j.finished_at) for j in jobs])
    # A rules worker's pool is PIPELINE_CONCURRENCY x RULES_CONCURRENCY (firefeed/concurrency.py): 3 x 2 here.
    pool = int(client_env["PIPELINE_CONCURRENCY"]) * int(client_env["RULES_CONCURRENCY"])
    assert 1 < overlap <= pool, f"the rules pool holds {pool}, and {overlap} chunk job(s) ran at once at most"


def test_a_cancel_stops_a_running_run_and_drops_its_tables(client_env: dict[str, str], tmp_path: Path) -> None:
    from firefeed.db.engine import raw_connection
    from firefeed.spec.loader import load_spec_file

    spec_path = _spec(tmp_path, "acme", "cancel_me", items=2000)
    store = RunStore()
    store.apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    run_id = start_run("cancel_me", "api")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        steps = {s.step: s.status for s in store.steps(run_id)}
        if steps.get("RULES") == "RUNNING":
            break
        time.sleep(0.005)
    assert store.request_cancel(run_id) == "RUNNING"
    report = wait_finished(run_id)
    assert report["status"] == "CANCELLED", report["error"]
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE %s", ("rules_tmp_" + run_id.replace("-", "") + "%",)
        )
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM pipeline_jobs WHERE run_id = %s AND status = 'PENDING'", (run_id,))
        assert cur.fetchone()[0] == 0
    assert not (Path(client_env["FIREFEED_EXPORT_DIR"]) / "acme" / "cancel_me" / "out.csv").exists()
    assert wait_finished(start_run("cancel_me", "api"))["status"] == "SUCCEEDED"


def test_a_redelivered_step_job_does_nothing_the_second_time(client_env: dict[str, str], tmp_path: Path) -> None:
    from sqlalchemy import select

    from firefeed.db.engine import session_factory
    from firefeed.db.models import PipelineJob
    from firefeed.pipeline.jobs import run_job

    spec = _spec(tmp_path, "acme", "redeliver")
    code, report = run_json(spec)
    assert code == 0
    with session_factory()() as s:
        job = s.scalars(
            select(PipelineJob).where(PipelineJob.run_id == report["run_id"], PipelineJob.kind == "export")
        ).first()
    assert job is not None and job.status == "SUCCEEDED"
    export = Path(client_env["FIREFEED_EXPORT_DIR"]) / "acme" / "redeliver" / "out.csv"
    before = (export.stat().st_mtime_ns, export.read_bytes())
    run_job(job.id)
    with session_factory()() as s:
        again = s.get(PipelineJob, job.id)
        assert again is not None and again.status == "SUCCEEDED" and again.attempts == job.attempts
    assert (export.stat().st_mtime_ns, export.read_bytes()) == before
    assert not list(export.parent.glob(".*.partial"))


def _deliver_job(engine: Any, run_id: str) -> Any:
    from sqlalchemy import text

    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, status, attempts, claimed_by, result FROM pipeline_jobs "
                "WHERE run_id = CAST(:r AS uuid) AND kind = 'deliver'"
            ),
            {"r": run_id},
        ).one()


def _worker_log_says(log: Path, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line not in log.read_text(encoding="utf-8", errors="replace"):
        assert time.monotonic() < deadline, f"{log.name} never said {line!r}"
        time.sleep(0.05)


@requires_shared_broker
def test_a_deliver_job_runs_on_the_export_worker_and_a_redelivered_message_sends_the_file_no_second_time(
    client_env: dict[str, str], tmp_path: Path, sftp: SFTPServer, engine: Any
) -> None:
    """SPEC 10 C7 through the fleet: the run's deliver job (`firefeed.export.deliver`) is taken by the export
    worker, which uploads the file to an SFTP server on 127.0.0.1. Then its message comes again, as a broker
    redelivers one (a lost ack): a delivered job sends nothing, and neither does one whose worker was lost
    after the target got the file and `delivered_files` recorded it, before the job was marked done."""
    from sqlalchemy import text

    from firefeed.celery_app import app
    from firefeed.secrets.store import SecretStore
    from firefeed.spec.loader import parse_spec
    from firefeed.tasks.queues import Queue

    (sftp.root / "in").mkdir()
    SecretStore().set("acme", "SFTP_PW", sftp.password)
    spec = yaml.safe_load(_spec(tmp_path, "acme", "dist_deliver").read_text(encoding="utf-8"))
    spec["exports"][0]["deliver"] = [
        {"url": f"sftp://{USER}@127.0.0.1:{sftp.port}/in/feed.csv", "password": "${secret:SFTP_PW}"}
    ]
    RunStore().apply_spec(parse_spec(spec), spec_dir=tmp_path)

    report = wait_finished(start_run("dist_deliver", "api"))

    assert report["status"] == "SUCCEEDED", report["error"]
    published = (Path(client_env["FIREFEED_EXPORT_DIR"]) / "acme" / "dist_deliver" / "out.csv").read_bytes()
    delivered = sftp.root / "in" / "feed.csv"
    assert delivered.read_bytes() == published
    assert [(d["status"], d["bytes"]) for d in report["exports"][0]["deliveries"]] == [("delivered", len(published))]
    job = _deliver_job(engine, report["run_id"])
    assert (job.status, job.attempts, job.result["status"]) == ("SUCCEEDED", 1, "delivered")
    # A pool child of the export worker took it (its process group is that `firefeed worker export`'s),
    # not this process nor the pipeline worker's driver.
    claimer = int(job.claimed_by.rsplit(":", 1)[1])
    worker_argv = Path(f"/proc/{os.getpgid(claimer)}/cmdline").read_bytes().split(b"\0")
    assert claimer != os.getpid() and worker_argv[2:4] == [b"worker", b"export"], worker_argv
    log = Path(client_env["FIREFEED_EXPORT_DIR"]).parent / "worker-export.log"
    seen = (sftp.connections, sftp.opens, delivered.stat().st_mtime_ns)

    again = app.send_task("firefeed.export.deliver", args=[job.id], queue=Queue.EXPORT.value)
    _worker_log_says(log, f"firefeed.export.deliver[{again.id}] succeeded")
    assert (sftp.connections, sftp.opens, delivered.stat().st_mtime_ns) == seen
    assert tuple(_deliver_job(engine, report["run_id"])[1:3]) == ("SUCCEEDED", 1)

    with engine.begin() as conn:  # its worker lost after the upload was recorded: RUNNING, no heartbeat
        conn.execute(
            text(
                "UPDATE pipeline_jobs SET status = 'RUNNING', result = NULL, finished_at = NULL, "
                "heartbeat_at = now() - interval '1 day' WHERE id = :id"
            ),
            {"id": job.id},
        )
    lost = app.send_task("firefeed.export.deliver", args=[job.id], queue=Queue.EXPORT.value)
    _worker_log_says(log, f"firefeed.export.deliver[{lost.id}] succeeded")
    taken = _deliver_job(engine, report["run_id"])
    assert (taken.status, taken.attempts, taken.result["status"]) == ("SUCCEEDED", 2, "unchanged")
    assert (sftp.connections, sftp.opens, delivered.stat().st_mtime_ns) == seen
    assert [p.name for p in delivered.parent.iterdir()] == ["feed.csv"]  # and no temporary file


def test_one_in_process_worker_for_every_queue_runs_a_project_without_deadlock(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-process mode: Celery's own embedded worker, solo pool, consuming all four queues."""
    from celery.contrib.testing.worker import start_worker

    from firefeed.celery_app import app
    from firefeed.spec.loader import load_spec_file
    from firefeed.tasks.queues import ALL_QUEUES
    from tests.integration.celery_workers import use_broker

    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    reset_settings()
    url = broker_url(redis_db(9))
    flush_broker(url)
    use_broker(url)
    spec_path = _spec(tmp_path, "acme", "one_process")
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=spec_path.parent)
    try:
        with start_worker(app, queues=list(ALL_QUEUES), perform_ping_check=False, shutdown_timeout=30):
            report = wait_finished(start_run("one_process", "api"), timeout=60)
    finally:
        use_broker("memory://")
        reset_settings()
    assert report["status"] == "SUCCEEDED", report["error"]
    assert [s["status"] for s in report["steps"]] == ["SUCCEEDED"] * 5


@pytest.mark.stress  # 8-21 s: `make stress` (make test stays under 10 minutes)
@requires_shared_broker
def test_every_concurrency_set_to_one_with_one_worker_per_queue_does_not_deadlock(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.spec.loader import load_spec_file
    from tests.integration.celery_workers import use_broker

    url = broker_url(redis_db(8))
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=url,
        FIREFEED_EXPORT_DIR=str(tmp_path / "exports"),
        FIREFEED_DATA_DIR=str(tmp_path / "var"),
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="1",
        RULES_CONCURRENCY="1",
        EXPORT_CONCURRENCY="1",
        FIREFEED_CHUNK_ROWS="5",
        FIREFEED_WORKER_METRICS_PORT="0",
    )
    for key in ("FIREFEED_EXPORT_DIR", "FIREFEED_DATA_DIR", "FIREFEED_CHUNK_ROWS"):
        monkeypatch.setenv(key, env[key])
    reset_settings()
    flush_broker(url)
    spec_paths = [_spec(tmp_path / p, "acme", p) for p in ("ones_a", "ones_b")]
    for sp in spec_paths:
        RunStore().apply_spec(load_spec_file(sp), spec_dir=sp.parent)
    use_broker(url)
    try:
        with celery_workers(env, log_dir=tmp_path):
            run_ids = [start_run(p, "api") for p in ("ones_a", "ones_b")]
            reports = [wait_finished(r, timeout=90) for r in run_ids]
    finally:
        use_broker("memory://")
        reset_settings()
    assert [r["status"] for r in reports] == ["SUCCEEDED", "SUCCEEDED"], [r["error"] for r in reports]
