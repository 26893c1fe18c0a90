"""Hostile feed servers: one that never answers, one that trickles, one that resets, one that offers 10 GB.

Each fails the run in FETCH, in bounded time, with a message naming the source;
the previous exports stay published byte for byte and no download is left behind.
The batch driver runs these (the fetch code is the same on a worker), so no fleet is needed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import reset_settings
from tests.integration.conftest import run_json
from tests.integration.test_distributed import _spec
from tests.stress._feeds import TEN_GB, feed_server
from tests.stress._fleet import unpublished_files

CAP = 1024 * 1024
TIMEOUT_S = 1.0
STEP_LIMIT_S = 3


@pytest.fixture()
def feed_env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Small fetch timeout and size cap, one retry, local servers allowed; yields the export folder."""
    for key, value in {
        "FIREFEED_EXPORT_DIR": str(tmp_path / "exports"),
        "FIREFEED_DATA_DIR": str(tmp_path / "var"),
        "FIREFEED_FETCH_TIMEOUT_S": str(TIMEOUT_S),
        "FIREFEED_FETCH_RETRIES": "1",
        "FIREFEED_FETCH_BACKOFF_S": "0.1",
        "FIREFEED_FETCH_MAX_BYTES": str(CAP),
        "FIREFEED_FETCH_ALLOW_PRIVATE": "true",
        "FIREFEED_STEP_TIME_LIMIT_S": str(STEP_LIMIT_S),
    }.items():
        monkeypatch.setenv(key, value)
    reset_settings()
    yield tmp_path / "exports"
    reset_settings()


# mode -> words the run's error message must contain
FAULTS = {
    "hang": "timed out",
    "drip": "sent too slowly",
    "reset": "could not fetch",
    "reset_mid_body": "connection lost",
    "huge_declared": "size cap",
    "endless": "size cap",
}


@pytest.mark.parametrize("mode", list(FAULTS))
def test_a_hostile_feed_server_fails_the_run_in_fetch_and_keeps_the_published_exports(
    mode: str, feed_env: Path, tmp_path: Path, stress_tally: Any
) -> None:
    project = f"feed_{mode}"
    with feed_server() as server:
        spec_path = _spec(tmp_path / "p", "feeds", project, items=200)
        server.body = (tmp_path / "p" / "main.csv").read_bytes()
        spec = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
        spec["sources"][0]["url"] = server.url()
        spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        code, report = run_json(spec_path)
        assert code == 0, report["error"]
        stress_tally.run()
        folder = feed_env / "feeds" / project
        published = {p.name: p.read_bytes() for p in folder.iterdir()}

        server.mode, server.sent, server.slow_s = mode, 0, TIMEOUT_S / 4
        started = time.monotonic()
        code, report = run_json(spec_path)
        took = time.monotonic() - started
        stress_tally.run()
        stress_tally.fault(f"feed server {mode}")

    assert code == 1 and report["status"] == "FAILED"
    assert report["error"]["step"] == "FETCH"
    assert "main" in report["error"]["message"] and FAULTS[mode] in report["error"]["message"], report["error"]
    # Two tries (FIREFEED_FETCH_RETRIES=1) of at most the timeout each, plus the backoff and the rest of the run;
    # a trickle is not retried, it ends at the step's time limit.
    assert took < max(2 * TIMEOUT_S, STEP_LIMIT_S) + 10, took
    if mode in ("huge_declared", "endless"):
        # 10 GB offered; the cap stopped the download after about CAP bytes (plus what socket buffers took).
        assert server.sent < 64 * CAP, server.sent
        assert server.sent < TEN_GB
    now = {p.name: p.read_bytes() for p in folder.iterdir()}
    stress_tally.lose(sum(1 for name in published if now.get(name) != published[name]))
    assert now == published
    assert unpublished_files(feed_env) == []
    assert [p for p in (tmp_path / "var").rglob("*") if p.is_file() and "fetch" in p.name] == []
