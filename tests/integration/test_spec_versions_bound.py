"""A company's stored spec versions stay within FIREFEED_SPEC_VERSIONS_MAX(_BYTES) at every moment (#47).

Two PUTs at a time of a large spec stored 148 versions, 131 MB, in 20 s; only the hourly pruner cut
them back. Now the apply that stores a version cuts the company's back in the same transaction, and
never a version a project, an active run or a project's latest succeeded run needs.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from firefeed.config import reset_settings
from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from tests.integration.conftest import new_company

pytestmark = pytest.mark.integration

MAX_VERSIONS = 12
MAX_BYTES = 1536 * 1024
PAD = 100 * 1024  # each stormed version is a little over 100 KiB: the byte bound binds before the count


@pytest.fixture()
def bounded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FIREFEED_SPEC_VERSIONS_MAX", str(MAX_VERSIONS))
    monkeypatch.setenv("FIREFEED_SPEC_VERSIONS_MAX_BYTES", str(MAX_BYTES))
    reset_settings()
    yield
    reset_settings()


def spec_of(company: str, project: str, n: int = 0, pad: int = 0) -> dict[str, Any]:
    return {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": f"https://feeds.example.test/{n}.csv"}],
        "rules": [{"name": "note", "then": [{"set": "note", "value": "x" * pad + str(n)}]}],
        "exports": [{"name": "csv", "format": "csv", "path": "out.csv"}],
    }


def apply(company: str, project: str, n: int = 0, pad: int = 0) -> None:
    RunStore().apply_spec(parse_spec(spec_of(company, project, n, pad)), spec_dir=None)


def held(engine: Engine, company: str) -> tuple[int, int]:
    """(count, bytes) of the company's stored versions, measured from the documents themselves."""
    with engine.connect() as conn:
        count, size = conn.execute(
            text(
                "SELECT count(*), coalesce(sum(octet_length(v.spec::text) + coalesce(octet_length(v.spec_dir), 0)), 0) "
                "FROM spec_versions v JOIN projects p ON p.id = v.project_id WHERE p.company_id = :c"
            ),
            {"c": company},
        ).one()
    return int(count), int(size)


def version_of_run(engine: Engine, run_id: str) -> int | None:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT spec_version_id FROM pipeline_runs WHERE id = :r"), {"r": run_id}).scalar()
    return None if found is None else int(found)


def exists(engine: Engine, version: int) -> bool:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM spec_versions WHERE id = :v"), {"v": version}).scalar() == 1


@pytest.mark.stress  # 8-21 s: `make stress` (make test stays under 10 minutes)
def test_concurrent_puts_of_a_large_spec_keep_the_companys_versions_bounded_at_every_moment(
    http: httpx.Client, engine: Engine, bounded: None
) -> None:
    company, auth = new_company()
    store = RunStore()
    # A run in progress: its version is no longer the project's current one, and must stay.
    running_project = "run_" + uuid.uuid4().hex[:8]
    apply(company, running_project, 1)
    running = store.request_run(running_project, "api")
    assert store.mark_running(running)
    apply(company, running_project, 2)
    # A project whose latest succeeded run is on an older version than its current one (`values` reads it).
    done_project = "done_" + uuid.uuid4().hex[:8]
    apply(company, done_project, 1)
    cancelled = store.request_run(done_project, "api")
    store.request_cancel(cancelled)
    apply(company, done_project, 2)
    succeeded = store.request_run(done_project, "api")
    assert store.mark_running(succeeded)
    store.finish_run(succeeded, "SUCCEEDED", report=None, error=None)
    apply(company, done_project, 3)
    needed = {version_of_run(engine, running), version_of_run(engine, succeeded)}
    old = version_of_run(engine, cancelled)
    assert None not in needed and old is not None

    stormed = "storm_" + uuid.uuid4().hex[:8]
    largest: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch() -> None:  # what any reader sees while the PUTs go on: every committed state
        while not stop.is_set():
            largest.append(held(engine, company))

    def put(n: int) -> int:
        body = json.dumps(spec_of(company, stormed, n, PAD))
        for _ in range(50):  # a 429 (both of the company's places taken) is retried, as a client would
            r = http.put(f"/api/projects/{stormed}", headers=auth, content=body)
            if r.status_code != 429:
                return r.status_code
            time.sleep(0.01)
        return 429

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(2) as pool:  # two at a time: the per-company bound of spec writes
            statuses = list(pool.map(put, range(200)))
    finally:
        stop.set()
        watcher.join()

    assert set(statuses) <= {200, 201} and statuses.count(201) == 1, statuses
    count, size = held(engine, company)
    assert count <= MAX_VERSIONS and size <= MAX_BYTES, (count, size)
    assert largest and max(c for c, _ in largest) <= MAX_VERSIONS and max(b for _, b in largest) <= MAX_BYTES
    # Never pruned: the running run's version and the latest succeeded run's, which still read their specs.
    assert all(exists(engine, v) for v in needed if v is not None)
    assert {version_of_run(engine, running), version_of_run(engine, succeeded)} == needed
    assert store.run_spec(running)[0].sources[0].url == "https://feeds.example.test/1.csv"
    assert store.run_spec(succeeded)[0].sources[0].url == "https://feeds.example.test/2.csv"
    # An old cancelled run lost its version and kept its row: it reads its project's current spec.
    assert not exists(engine, old) and version_of_run(engine, cancelled) is None
    assert store.run(cancelled).status == "CANCELLED"
    # The same document again stores nothing: its version is found by its digest and reused.
    again = json.dumps(http.get(f"/api/projects/{stormed}", headers=auth).json())
    assert http.put(f"/api/projects/{stormed}", headers=auth, content=again).status_code == 200
    assert held(engine, company) == (count, size)


def test_an_apply_that_what_is_needed_alone_would_take_past_the_bound_is_refused_and_stores_nothing(
    http: httpx.Client, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each project's current version is needed: past FIREFEED_SPEC_VERSIONS_MAX projects there is no room."""
    monkeypatch.setenv("FIREFEED_SPEC_VERSIONS_MAX", "3")
    reset_settings()
    try:
        company, auth = new_company()
        projects = [f"full{n}_" + uuid.uuid4().hex[:8] for n in range(3)]
        apply(company, projects[0])
        apply(company, projects[1])
        apply(company, projects[1], 1)  # an update needs one place more while it runs (the version it replaces)
        apply(company, projects[0], 1)  # the version projects[1] replaced goes to make room
        apply(company, projects[2])
        body = json.dumps(spec_of(company, "over_" + uuid.uuid4().hex[:8]))
        refused = http.put(f"/api/projects/{json.loads(body)['project']}", headers=auth, content=body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "company_limit"
        assert "FIREFEED_SPEC_VERSIONS_MAX=3" in refused.json()["message"]
        assert http.get(f"/api/projects/{json.loads(body)['project']}", headers=auth).status_code == 404
        assert held(engine, company)[0] == 3
    finally:
        reset_settings()
