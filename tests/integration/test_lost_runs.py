"""No run lost (issue 17): a PENDING run whose root message the broker lost still starts.

The maintenance tick (beat's `firefeed.maintenance.reap`) sends the root task of a run PENDING
for longer than a lease again; the PENDING -> RUNNING claim makes a duplicate a no-op, so a run
that was only queued behind others is not started twice.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.db.engine import get_engine
from firefeed.runs.maintenance import resend_pending_runs
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.spec.loader import parse_spec
from firefeed.tasks.dispatch import enqueue_run
from tests.integration.celery_workers import celery_workers, flush_broker, use_broker
from tests.integration.conftest import write_csv
from tests.integration.test_api import spec_of
from tests.services import broker_url, redis_db, requires_shared_broker

pytestmark = [pytest.mark.integration, requires_shared_broker]

LOST_REDIS_URL = redis_db(7)
LEASE_S = 2.0


class _SlowFeed(BaseHTTPRequestHandler):
    """A feed that answers after 4 s, so a run of it holds the only pipeline slot for a while."""

    def do_GET(self) -> None:
        time.sleep(4)
        body = b"id,title,quantity\nS1,slow,1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/csv")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def fleet_env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    broker = broker_url(LOST_REDIS_URL)
    values = {
        "FIREFEED_DATABASE_URL": database_url,
        "FIREFEED_BROKER_URL": broker,
        "FIREFEED_EXPORT_DIR": str(tmp_path / "exports"),
        "FIREFEED_DATA_DIR": str(tmp_path / "var"),
        "FIREFEED_FETCH_ALLOWED_HOSTS": "127.0.0.1",
        "PIPELINE_CONCURRENCY": "1",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    reset_settings()
    use_broker(broker)
    flush_broker(broker)
    try:
        yield dict(os.environ)
    finally:
        use_broker("memory://")
        reset_settings()


def _project(folder: Path, url: str = "main.csv") -> str:
    company, project = "lost_" + uuid.uuid4().hex[:6], "p_" + uuid.uuid4().hex[:10]
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "main.csv", ["id", "title", "quantity"], [["A1", "Shoe", "0"], ["A2", "Boot", "4"]])
    RunStore().apply_spec(parse_spec(spec_of(company, project, url)), spec_dir=folder)
    return project


def _wait(run_ids: list[str], timeout: float, tick: bool) -> list[str]:
    """Wait for the runs to end, calling the maintenance tick's resend every half second when `tick`."""
    store, resent = RunStore(), []
    deadline = time.monotonic() + timeout
    while any(store.run(r).status in ("PENDING", "RUNNING") for r in run_ids):
        assert time.monotonic() < deadline, [store.run(r).status for r in run_ids]
        if tick:
            resent += resend_pending_runs(enqueue_run, stale_after_s=LEASE_S)
        time.sleep(0.5)
    return resent


@pytest.mark.stress  # slow (moved out of `make test` to keep it under 10 minutes): `make stress`
def test_a_run_whose_root_message_was_lost_starts_once_a_worker_is_up(
    fleet_env: dict[str, str], tmp_path: Path
) -> None:
    project = _project(tmp_path / "lost")
    run_id = start_run(project, "api")  # no worker is up yet
    flush_broker(fleet_env["FIREFEED_BROKER_URL"])  # the broker restarts without persistence
    assert RunStore().run(run_id).status == "PENDING"
    with celery_workers(fleet_env):
        resent = _wait([run_id], timeout=60, tick=True)
    assert RunStore().run(run_id).status == "SUCCEEDED"
    assert run_id in resent


@pytest.mark.stress  # 8-21 s: `make stress` (make test stays under 10 minutes)
def test_a_run_queued_behind_another_is_sent_again_but_started_once(fleet_env: dict[str, str], tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowFeed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        slow = _project(tmp_path / "slow", f"http://127.0.0.1:{server.server_address[1]}/feed.csv")
        queued = _project(tmp_path / "queued")
        with celery_workers(fleet_env):
            first = start_run(slow, "api")
            second = start_run(queued, "api")  # waits for the one pipeline slot for about 4 s
            resent = _wait([first, second], timeout=60, tick=True)
    finally:
        server.shutdown()
    store = RunStore()
    assert [store.run(first).status, store.run(second).status] == ["SUCCEEDED", "SUCCEEDED"]
    assert second in resent  # it was PENDING past the lease, so it got a second root message
    with get_engine().connect() as conn:
        jobs = conn.execute(
            text("SELECT kind, count(*) FROM pipeline_jobs WHERE run_id = :r GROUP BY kind ORDER BY kind"),
            {"r": second},
        ).all()
    # One driver: one job per source, one merge, one export (a second driver would have made its own).
    counts = dict(jobs)
    assert counts["source"] == 1 and counts["merge"] == 1 and counts["export"] == 1, counts
