"""Workers on several machines: one `firefeed worker` per queue, each in its own folder with its own data dir.

Each worker process stands in for a machine: its own working folder (`cwd`), a
relative FIREFEED_DATA_DIR and FIREFEED_EXPORT_DIR that therefore land in that
folder, and nothing shared with the others but Postgres, Redis and the storage.
The sources are http downloads, the rules fan out in chunks to the rules machine,
the export machine writes the files and the pipeline machine publishes them. A
run succeeds and publishes the bytes `firefeed run` writes in one process.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.tasks.queues import ALL_QUEUES
from tests.integration.celery_workers import (
    flush_redis,
    spawn_worker,
    stop_worker,
    use_broker,
    wait_answering,
)
from tests.integration.conftest import run_json, write_csv
from tests.integration.moto_s3 import S3_ENV, bucket_objects, moto_s3_server, new_bucket
from tests.services import redis_db
from tests.stress._fleet import wait_status
from tests.stress.conftest import StressTally
from tests.unit.test_fetch import FeedServer, body

QUEUES = ALL_QUEUES  # the control worker too: triggers, beat's tick and maintenance
# Its own Redis database: other suites flush theirs (8-13) while this one runs.
MACHINES_REDIS_URL = redis_db(14)
ITEMS = 600

RULES = [
    {
        "name": "out of stock",
        "when": {"field": "quantity", "op": "lte", "value": "0"},
        "then": [{"set": "availability", "value": "out of stock"}],
    },
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {"name": "drop cheap", "when": {"field": "price", "op": "lt", "value": "2"}, "then": [{"exclude": "true"}]},
]
EXPORTS = [
    {"name": "csv", "format": "csv", "path": "out.csv"},
    {"name": "jsonl", "format": "jsonl", "path": "feeds/out.jsonl", "gzip": "true"},
    # C3: these items are not Google-complete (no description, no image); the test reads what the fleet writes.
    {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
]


@pytest.fixture(scope="module")
def feeds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The source feeds on an http server: every machine downloads, none reads a shared file."""
    folder = tmp_path_factory.mktemp("feeds")
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity"],
        [[f"K{i}", f"item number {i}", f"{i}.50 EUR", str(i % 4)] for i in range(ITEMS)],
    )
    extra = "".join(json.dumps({"id": f"K{i}", "color": ["red", "blue"][i % 2]}) + "\n" for i in range(0, ITEMS, 2))
    server = FeedServer()
    server.routes["/main.csv"] = body((folder / "main.csv").read_bytes())
    server.routes["/extra.jsonl.gz"] = body(gzip.compress(extra.encode(), mtime=0))
    try:
        yield {"main": server.url("/main.csv"), "extra": server.url("/extra.jsonl.gz")}
    finally:
        server.close()


def _spec(folder: Path, project: str, feeds: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "company": "acme",
        "project": project,
        "name": "Multi machine",
        "sources": [
            {"name": "main", "url": feeds["main"], "format": "csv"},
            {"name": "extra", "url": feeds["extra"], "format": "jsonl", "mode": "append"},
        ],
        "rules": RULES,
        "exports": EXPORTS,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def _expected(tmp_path: Path, feeds: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """What `firefeed run` publishes in one process on local folders: relative path -> bytes."""
    project = f"mm_batch_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(tmp_path / "batch" / "exports"))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "batch" / "var"))
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    for name in ("FIREFEED_STORAGE_URL", "FIREFEED_STORAGE_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    code, report = run_json(_spec(tmp_path / "batch", project, feeds))
    assert code == 0, report["error"]
    return _files(tmp_path / "batch" / "exports" / "acme" / project)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@contextmanager
def machines(base: Path, env: dict[str, str]) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """One worker per queue, each in `base/<queue>/` with relative data and export folders."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs: list[IO[bytes]] = []
    try:
        for q in QUEUES:
            home = base / q
            home.mkdir(parents=True)
            log = (home / "worker.log").open("wb")
            logs.append(log)
            procs[q] = spawn_worker(env, q, log, cwd=home)
        wait_answering(env, QUEUES, list(procs.values()))
        yield procs
    finally:
        for p in procs.values():
            stop_worker(p)
        for log in logs:
            log.close()


def _pool_pids(worker: subprocess.Popen[bytes]) -> set[str]:
    """The worker's pool children: the processes that claim its jobs."""
    children = Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
    return set(children)


def _drive(
    spec: Path, env: dict[str, str], procs: dict[str, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> str:
    """Request a run of `spec` through the broker, wait for it, check which machine ran which job."""
    from sqlalchemy import select

    from firefeed.db.engine import session_factory
    from firefeed.db.models import PipelineJob
    from firefeed.runs.requests import start_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    for name in ("FIREFEED_BROKER_URL", "FIREFEED_STORAGE_URL", "FIREFEED_STORAGE_ENDPOINT_URL"):
        if name in env:
            monkeypatch.setenv(name, env[name])
        else:
            monkeypatch.delenv(name, raising=False)
    reset_settings()
    use_broker(env["FIREFEED_BROKER_URL"])
    try:
        spec_obj = load_spec_file(spec)
        RunStore().apply_spec(spec_obj, spec_dir=spec.parent)
        run_id = start_run(spec_obj.project, "api")
        assert wait_status(run_id, timeout=180) == "SUCCEEDED", RunStore().run(run_id).error
    finally:
        use_broker("memory://")
    pids = {q: _pool_pids(p) for q, p in procs.items()}
    with session_factory()() as s:
        jobs = s.execute(
            select(PipelineJob.kind, PipelineJob.claimed_by).where(PipelineJob.run_id == uuid.UUID(run_id))
        ).all()
    machine_of = {"source": "import", "merge": "import", "rules_chunk": "rules", "rules": "rules", "export": "export"}
    kinds = {kind for kind, _ in jobs}
    assert {"source", "merge", "rules_chunk", "export"} <= kinds, kinds
    for kind, claimed_by in jobs:
        assert claimed_by.rsplit(":", 1)[1] in pids[machine_of[kind]], (kind, claimed_by, pids)
    return run_id


def _machine_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=MACHINES_REDIS_URL,
        # Relative on purpose: each machine's folders are under its own working folder.
        FIREFEED_DATA_DIR="var",
        FIREFEED_EXPORT_DIR="exports",
        FIREFEED_WORKER_METRICS_PORT="0",
        FIREFEED_FETCH_ALLOW_PRIVATE="true",
        FIREFEED_JOB_PICKUP_TIMEOUT_S="60",
        FIREFEED_CHUNK_ROWS="100",
        PIPELINE_CONCURRENCY="1",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="2",
        EXPORT_CONCURRENCY="2",
    )
    for name in ("FIREFEED_STORAGE_URL", "FIREFEED_STORAGE_ENDPOINT_URL"):
        env.pop(name, None)
    env.update(extra)
    return env


def _left_on_machines(base: Path) -> list[Path]:
    """Files a run left in any machine's data dir (its downloads) or local export folder."""
    found: list[Path] = []
    for q in QUEUES:
        for area in ("var/runs", "var/spool", "exports"):
            found += [p for p in (base / q / area).rglob("*") if p.is_file()]
    return found


def test_workers_on_four_machines_run_a_project_through_s3_storage(
    database_url: str,
    feeds: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stress_tally: StressTally,
) -> None:
    expected = _expected(tmp_path, feeds, monkeypatch)
    assert sorted(expected) == ["feeds/out.jsonl.gz", "google.xml", "out.csv"]
    flush_redis(MACHINES_REDIS_URL)
    with moto_s3_server(tmp_path / "moto.log") as endpoint:
        for name, value in S3_ENV.items():
            monkeypatch.setenv(name, value)
        bucket = new_bucket(endpoint)
        env = _machine_env(
            database_url, FIREFEED_STORAGE_URL=f"s3://{bucket}/ff", FIREFEED_STORAGE_ENDPOINT_URL=endpoint, **S3_ENV
        )
        project = f"mm_s3_{uuid.uuid4().hex[:8]}"
        with machines(tmp_path / "machines", env) as procs:
            _drive(_spec(tmp_path / "spec", project, feeds), env, procs, monkeypatch)
        stress_tally.run()
        objects = bucket_objects(endpoint, bucket)
    prefix = f"ff/exports/acme/{project}/"
    assert sorted(objects) == sorted(prefix + rel for rel in expected)  # no partial, no download left behind
    published = {key.removeprefix(prefix): data for key, data in objects.items()}
    lost = [rel for rel in expected if published.get(rel) != expected[rel]]
    stress_tally.lose(len(lost))
    assert not lost
    assert _left_on_machines(tmp_path / "machines") == []


@pytest.mark.parametrize("share", ["export_dir", "file_url"])
def test_workers_on_four_machines_share_only_a_folder_with_local_storage(
    share: str,
    database_url: str,
    feeds: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stress_tally: StressTally,
) -> None:
    """The default storage with FIREFEED_EXPORT_DIR on a shared mount, or a `file://` storage URL on it."""
    expected = _expected(tmp_path, feeds, monkeypatch)
    flush_redis(MACHINES_REDIS_URL)
    shared = tmp_path / "shared"
    if share == "export_dir":
        env, published_dir = _machine_env(database_url, FIREFEED_EXPORT_DIR=str(shared)), shared
    else:
        env, published_dir = _machine_env(database_url, FIREFEED_STORAGE_URL=shared.as_uri()), shared / "exports"
    project = f"mm_local_{uuid.uuid4().hex[:8]}"
    with machines(tmp_path / "machines", env) as procs:
        _drive(_spec(tmp_path / "spec", project, feeds), env, procs, monkeypatch)
    stress_tally.run()
    published = _files(published_dir / "acme" / project)
    assert sorted(published) == sorted(expected)  # no partial left behind
    lost = [rel for rel in expected if published.get(rel) != expected[rel]]
    stress_tally.lose(len(lost))
    assert not lost
    assert _left_on_machines(tmp_path / "machines") == []
    assert [p for p in (shared / "runs").rglob("*") if p.is_file()] == []
