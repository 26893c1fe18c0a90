"""kill -9 of the worker delivering a 200 MB file mid-upload (SPEC 10 C7, #50 acceptance).

A real fleet (one `firefeed worker` per queue, beat) runs a project whose ~200 MB csv export is
delivered to an asyncssh SFTP server on 127.0.0.1. Once the upload's temporary file holds some
of it, the export worker is killed with SIGKILL and replaced; the deliver job, no longer beating,
is sent again after the lease, and the target must end with the whole published file and no
temporary file (the new attempt removes the killed one's leftover), the run SUCCEEDED.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import yaml
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import load_spec_file
from tests.integration.file_servers import USER, SFTPServer
from tests.services import requires_redis
from tests.stress._fleet import Fleet, fleet_env, running_fleet, wait_status

pytestmark = requires_redis

ROWS = 100_000
BLURB = 2_000  # characters per row: about 200 MB of csv


@pytest.fixture()
def sftp_target(tmp_path: Path) -> Iterator[SFTPServer]:
    root = tmp_path / "sftp"
    (root / "in").mkdir(parents=True)
    server = SFTPServer(root, password="pw-" + uuid.uuid4().hex)
    server.start(asyncssh.generate_private_key("ssh-ed25519"))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def delivery_fleet(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Fleet, dict[str, str]]]:
    key = generate_key()
    env = fleet_env(
        database_url, tmp_path / "fleet", FIREFEED_SECRETS_KEY=key, FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1"
    )
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", key)
    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    reset_settings()
    with running_fleet(env, monkeypatch, tmp_path / "logs") as fleet:
        yield fleet, env


def _parts(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_a_worker_killed_mid_upload_of_200_mb_leaves_the_target_with_the_whole_new_file_and_no_temporary_file(
    tmp_path: Path,
    sftp_target: SFTPServer,
    delivery_fleet: tuple[Fleet, dict[str, str]],
    stress_tally: object,
    engine: Any,
) -> None:
    fleet, env = delivery_fleet
    company, project = "co_" + uuid.uuid4().hex[:8], "big_delivery"
    SecretStore().set(company, "SFTP_PW", sftp_target.password)
    folder = tmp_path / "spec"
    folder.mkdir()
    with (folder / "main.csv").open("w", encoding="utf-8") as f:
        f.write("id,title,blurb\n")
        pad = "x" * BLURB
        for i in range(ROWS):
            f.write(f"K{i},item {i},{pad}\n")
    target = f"sftp://{USER}@127.0.0.1:{sftp_target.port}/in/feed.csv"
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [
            {
                "name": "csv",
                "format": "csv",
                "path": "feed.csv",
                "deliver": [{"url": target, "password": "${secret:SFTP_PW}"}],
            }
        ],
    }
    spec_path = folder / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=folder)

    run_id = start_run(project, "api")
    inbox = sftp_target.root / "in"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        parts = _parts(inbox)
        if parts and parts[0].stat().st_size > 20 * 1024 * 1024:
            break
        assert RunStore().run(run_id).status in ("PENDING", "RUNNING"), RunStore().run(run_id).error
        time.sleep(0.005)
    else:
        raise AssertionError("the upload never started")
    fleet.kill("export")  # SIGKILL of the worker and its pool, mid-upload
    killed_part = parts[0].name
    fleet.restart("export")

    assert wait_status(run_id, 600) == "SUCCEEDED", RunStore().run(run_id).error
    published = Path(env["FIREFEED_EXPORT_DIR"]) / company / project / "feed.csv"
    assert published.stat().st_size > 190 * 1024 * 1024
    delivered = inbox / "feed.csv"
    assert delivered.stat().st_size == published.stat().st_size
    assert delivered.read_bytes() == published.read_bytes()
    assert _parts(inbox) == [], f"a temporary file was left: {_parts(inbox)} (killed: {killed_part})"
    with engine.connect() as conn:
        attempts = conn.execute(
            text("SELECT attempts FROM pipeline_jobs WHERE run_id = CAST(:r AS uuid) AND kind = 'deliver'"),
            {"r": run_id},
        ).scalar_one()
    assert attempts == 2, "the killed delivery was not sent again"
    stress_tally.fault("kill -9 export worker mid-upload")  # type: ignore[attr-defined]
    stress_tally.run()  # type: ignore[attr-defined]
    report = RunStore().run(run_id).report or {}
    (delivery,) = report["exports"][0]["deliveries"]
    assert (delivery["status"], delivery["bytes"]) == ("delivered", published.stat().st_size)
