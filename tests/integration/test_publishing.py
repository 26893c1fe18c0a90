"""A driver killed with -9 at each moment of publishing (#47): the published files are all the previous run's
or all the new run's, and the run's status after recovery says which.

`firefeed run` runs in a subprocess with FIREFEED_TEST_PUBLISH_PAUSE_DIR, so it stops at the chosen moment
(before the commit point, then after 0, 1, 2 and all 3 of its files are switched) until it is killed.
Recovery is what finds a run without a driver: the stale-run reaper, whose takeover (`runs/stale.py`, the same
as an entry point's) calls `firefeed.pipeline.publishing.recover_publish` before it would fail the run.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from firefeed.config import get_settings, reset_settings
from firefeed.export.paths import project_prefix
from firefeed.runs.maintenance import reap_stale_runs
from firefeed.runs.service import RunStore
from firefeed.storage import export_storage
from tests.integration.conftest import cli, write_csv
from tests.integration.moto_s3 import new_bucket

pytestmark = pytest.mark.integration

FIREFEED = str(Path(sys.executable).with_name("firefeed"))
#: the lease recovery is given: a killed driver's heartbeat is older than this a moment after the kill
LEASE_S = 1.0
#: how long a subprocess run may take to reach its pause (imports, the steps of a small project)
REACH_S = 120.0
#: (moment the driver is killed at, the status recovery must end the run with)
MOMENTS = [
    ("unrecorded", "FAILED"),
    ("switched-0", "SUCCEEDED"),
    ("switched-1", "SUCCEEDED"),
    ("switched-2", "SUCCEEDED"),
    ("switched-3", "SUCCEEDED"),
]
#: the other moments of a local publish, slow (4 s each): `make stress` runs them, `make test` the first and one more
_SLOW_MOMENTS = [pytest.param(*m, marks=pytest.mark.stress) for m in (MOMENTS[1], MOMENTS[3], MOMENTS[4])]


@pytest.fixture()
def exports_env(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("FIREFEED_STORAGE_URL", raising=False)
    monkeypatch.delenv("FIREFEED_TEST_PUBLISH_PAUSE_DIR", raising=False)
    reset_settings()
    yield
    reset_settings()


def _write_feed(folder: Path, version: int) -> None:
    """The primary feed; every item's title and price differ between versions, so every export does."""
    rows = [[f"A{i}", f"Shoe {i} v{version}", f"{i + version}.50", str(i % 4)] for i in range(1, 40)]
    write_csv(folder / "main.csv", ["id", "title", "price", "quantity"], rows)


def _spec(folder: Path) -> tuple[Path, str, str]:
    company, project = "pub_" + uuid.uuid4().hex[:6], "p_" + uuid.uuid4().hex[:10]
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [{"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]}],
        "exports": [
            {"name": "csv", "format": "csv", "path": "feed.csv"},
            {"name": "json", "format": "json", "path": "sub/feed.json"},
            # C3: these items are not Google-complete; the tests read which run's files are published.
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
        ],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path, company, project


def _files(company: str, project: str) -> tuple[dict[str, bytes], list[str]]:
    """The project's published files ({key: bytes}) and any other file left in its folder (partials)."""
    storage = export_storage(get_settings())
    keys = storage.list(project_prefix(company, project))
    published = {k: storage.read_bytes(k) for k in keys if not k.rsplit("/", 1)[-1].startswith(".")}
    return published, [k for k in keys if k not in published]


def _killed_at(spec: Path, pause: Path, moment: str) -> None:
    """`firefeed run spec` in a subprocess, killed with -9 once it is held at `moment` of publishing."""
    pause.mkdir()
    (pause / f"{moment}.hold").touch()
    env = dict(os.environ, FIREFEED_TEST_PUBLISH_PAUSE_DIR=str(pause))
    proc = subprocess.Popen([FIREFEED, "run", str(spec)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + REACH_S
        while not (pause / f"{moment}.reached").exists():
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise AssertionError(f"the run ended (exit {proc.returncode}) before {moment}: {out[-3000:]}")
            assert time.monotonic() < deadline, f"the run did not reach {moment} within {REACH_S:.0f}s"
            time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


def _recover() -> None:
    """What finds a run whose driver is gone, once its heartbeat is older than the lease: the reaper (it takes
    the run over as an entry point does, `runs/stale.py`, which calls `recover_publish`)."""
    time.sleep(LEASE_S * 1.5)
    reap_stale_runs(stale_after_s=LEASE_S)


def _check_killed_publish(tmp_path: Path, moment: str, expected: str) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    _write_feed(folder, 1)
    spec, company, project = _spec(folder)
    code, out = cli("run", str(spec))
    assert code == 0, out
    previous, _ = _files(company, project)
    assert len(previous) == 3
    _write_feed(folder, 2)

    _killed_at(spec, tmp_path / "pause", moment)
    store = RunStore()
    run = store.runs_of_project(project)[0]
    assert run.status == "RUNNING"  # the driver died holding it
    _recover()

    run = store.run(str(run.id))
    published, leftovers = _files(company, project)
    assert run.status == expected, run.error
    assert leftovers == [], "a partial file was left behind"
    if run.status == "FAILED":
        assert published == previous, "a failed run replaced published files"
    else:
        written = {e["path"]: e["sha256"] for e in (run.report or {})["exports"]}
        assert {k: hashlib.sha256(v).hexdigest() for k, v in published.items()} == written
        assert all(published[k] != previous[k] for k in previous), "the new run's files are all new"
    # The project is free again, and runs.
    code, out = cli("run", str(spec))
    assert code == 0, out


@pytest.mark.parametrize(("moment", "expected"), [MOMENTS[0], MOMENTS[2], *_SLOW_MOMENTS])
def test_a_driver_killed_while_publishing_leaves_one_runs_files_and_a_status_that_says_which(
    exports_env: None, tmp_path: Path, moment: str, expected: str
) -> None:
    _check_killed_publish(tmp_path, moment, expected)


@pytest.mark.parametrize(("moment", "expected"), [MOMENTS[0], pytest.param(*MOMENTS[2], marks=pytest.mark.stress)])
def test_on_s3_a_killed_publish_is_rolled_forward_or_discarded_whole(
    exports_env: None, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str, expected: str
) -> None:
    monkeypatch.setenv("FIREFEED_STORAGE_URL", f"s3://{new_bucket(s3_endpoint)}/ff")
    monkeypatch.setenv("FIREFEED_STORAGE_ENDPOINT_URL", s3_endpoint)
    reset_settings()
    _check_killed_publish(tmp_path, moment, expected)


def test_a_switch_that_fails_after_the_commit_point_leaves_the_run_running_until_recovery_finishes_it(
    exports_env: None, tmp_path: Path
) -> None:
    """The driver alive, a move refused (the next file's name taken by a folder): the run neither fails
    nor discards what it still has to switch; once the name is free, recovery publishes the rest."""
    folder = tmp_path / "project"
    folder.mkdir()
    _write_feed(folder, 1)
    spec, company, project = _spec(folder)
    assert cli("run", str(spec))[0] == 0
    previous, _ = _files(company, project)
    _write_feed(folder, 2)
    pause = tmp_path / "pause"
    pause.mkdir()
    (pause / "switched-1.hold").touch()
    env = dict(os.environ, FIREFEED_TEST_PUBLISH_PAUSE_DIR=str(pause))
    proc = subprocess.Popen([FIREFEED, "run", str(spec)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + REACH_S
    while not (pause / "switched-1.reached").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not reach switched-1"
        time.sleep(0.02)
    blocker = Path(get_settings().export_dir) / company / project / "sub" / "feed.json"
    blocker.unlink()
    blocker.mkdir()
    (blocker / "in-the-way").touch()
    (pause / "switched-1.hold").unlink()
    out, _ = proc.communicate(timeout=REACH_S)
    assert proc.returncode == 1, out.decode()[-3000:]

    store = RunStore()
    run_id = str(store.runs_of_project(project)[0].id)
    assert store.run(run_id).status == "RUNNING"  # neither FAILED with a mixed set nor SUCCEEDED without it
    _, partials = _files(company, project)
    assert len(partials) == 2, "the files still to switch were kept"

    (blocker / "in-the-way").unlink()
    blocker.rmdir()
    _recover()
    run = store.run(run_id)
    assert run.status == "SUCCEEDED", run.error
    published, leftovers = _files(company, project)
    assert leftovers == []
    written = {e["path"]: e["sha256"] for e in (run.report or {})["exports"]}
    assert {k: hashlib.sha256(v).hexdigest() for k, v in published.items()} == written
    assert all(published[k] != previous[k] for k in previous)
