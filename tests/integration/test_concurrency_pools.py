"""Inter-project concurrency through real `firefeed worker` processes: runs driven at once do not share one run's slots.

A feed server that holds every download until four are in flight (or a generous hold
passes) shows how many the fleet runs at once: two projects of two sources each, with
PIPELINE_CONCURRENCY=2 and IMPORT_CONCURRENCY=2, fetch all four together.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.spec.loader import load_spec_file
from firefeed.tasks.queues import queue_of_worker
from tests.integration.celery_workers import celery_workers, flush_broker, use_broker
from tests.integration.test_distributed import wait_finished
from tests.services import broker_url, redis_db, requires_shared_broker

pytestmark = pytest.mark.integration

# Redis database of these tests (the fleet tests use 10, metrics 11, triggers 12, the distributed tests 13).
POOLS_REDIS_URL = os.environ.get("FIREFEED_TEST_POOLS_REDIS_URL", redis_db(8))
HOLD_S = 10.0


class HoldingFeeds:
    """Answers each GET once `expected` downloads are in flight together, or after HOLD_S; keeps the peak."""

    def __init__(self, expected: int) -> None:
        self.expected, self.in_flight, self.peak = expected, 0, 0
        self.cond = threading.Condition()
        feeds = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with feeds.cond:
                    feeds.in_flight += 1
                    feeds.peak = max(feeds.peak, feeds.in_flight)
                    feeds.cond.notify_all()
                    feeds.cond.wait_for(lambda: feeds.peak >= feeds.expected, timeout=HOLD_S)
                body = ("id,title\n" + "".join(f"{self.path[1:]}-{i},item {i}\n" for i in range(20))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/csv")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with feeds.cond:
                    feeds.in_flight -= 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def fleet_env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    env = dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=broker_url(POOLS_REDIS_URL),
        FIREFEED_EXPORT_DIR=str(tmp_path / "exports"),
        FIREFEED_DATA_DIR=str(tmp_path / "var"),
        FIREFEED_WORKER_METRICS_PORT="0",
        FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1",
        PIPELINE_CONCURRENCY="2",
        IMPORT_CONCURRENCY="2",
        RULES_CONCURRENCY="1",
        EXPORT_CONCURRENCY="1",
    )
    for key in ("FIREFEED_BROKER_URL", "FIREFEED_EXPORT_DIR", "FIREFEED_DATA_DIR", "FIREFEED_FETCH_ALLOWED_HOSTS"):
        monkeypatch.setenv(key, env[key])
    reset_settings()
    use_broker(env["FIREFEED_BROKER_URL"])
    flush_broker(env["FIREFEED_BROKER_URL"])
    try:
        yield env
    finally:
        use_broker("memory://")
        reset_settings()


def pool_sizes(broker: str, timeout: float = 30) -> dict[str, int]:
    """{queue: max-concurrency} of every worker answering `inspect stats` (node names `<queue>.<fleet tag>@<host>`)."""
    from celery import Celery

    client = Celery(broker=broker, backend=broker)
    deadline = time.monotonic() + timeout
    sizes: dict[str, int] = {}
    while time.monotonic() < deadline and len(sizes) < 4:
        for name, stats in (client.control.inspect(timeout=2).stats() or {}).items():
            sizes[queue_of_worker(name)] = int(stats["pool"]["max-concurrency"])
    return sizes


@pytest.mark.stress  # 8-21 s: `make stress` (make test stays under 10 minutes)
@requires_shared_broker
def test_two_runs_driven_at_once_fetch_all_their_sources_together(fleet_env: dict[str, str], tmp_path: Path) -> None:
    feeds = HoldingFeeds(expected=4)
    store = RunStore()
    projects = ["pools_a", "pools_b"]
    try:
        for project in projects:
            folder = tmp_path / project
            folder.mkdir()
            spec = {
                "company": "pools",
                "project": project,
                "sources": [
                    {"name": "main", "url": f"http://127.0.0.1:{feeds.port}/{project}-main.csv"},
                    {"name": "more", "url": f"http://127.0.0.1:{feeds.port}/{project}-more.csv", "mode": "append"},
                ],
                "exports": [{"name": "out", "format": "csv", "path": "out.csv"}],
            }
            (folder / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
            store.apply_spec(load_spec_file(folder / "spec.yaml"), spec_dir=folder)
        with celery_workers(fleet_env, log_dir=tmp_path):
            pools = {"pipeline": 2, "import": 4, "rules": 2, "export": 2, "control": 2, "sync": 2}
            assert pool_sizes(fleet_env["FIREFEED_BROKER_URL"]) == pools
            reports = [wait_finished(r, timeout=120) for r in [start_run(p, "api") for p in projects]]
    finally:
        feeds.close()
    assert [r["status"] for r in reports] == ["SUCCEEDED"] * 2, [r["error"] for r in reports]
    assert [r["exports"][0]["rows"] for r in reports] == [40, 40]
    # Each run fetches its two sources side by side, and the two runs do not wait for each other's slots.
    assert feeds.peak == 4
