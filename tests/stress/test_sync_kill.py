"""kill -9 of the sync worker in the middle of 10,000 inserts to the Merchant API stand-in (SPEC 10 C10, #51).

A real fleet (one `firefeed worker` per queue, beat, Redis) runs a project whose google-xml export has
`sync: {to: google-merchant, ...}`. Once the stand-in holds 2,000 products the `sync` worker is killed
with SIGKILL (its pool too) and replaced. The sync job, no longer beating, is sent again after the
lease; the new attempt takes the account's lock, puts the killed attempt's `sending` rows back to
pending and sends exactly the operations not acked. Every item ends on the stand-in, the run
SUCCEEDED, and the stand-in saw no more repeated requests than rows were in flight at the kill.
The small fast version (a plain process, 1,000 inserts) is tests/integration/test_sync_kill.py.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from firefeed.config import reset_settings
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import company_schema, sync_ledger_table
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import load_spec_file
from tests.services import requires_redis
from tests.standins.merchant_api import MerchantStandIn, running
from tests.stress._fleet import Fleet, fleet_env, running_fleet, wait_status

pytestmark = [requires_redis, pytest.mark.stress]

ITEMS = 10_000
SHOP = "https://www.shoeshop-firenze.it/p"


@pytest.fixture()
def sync_fleet(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Fleet, MerchantStandIn]]:
    key = generate_key()
    with running(latency_ms=5) as standin:
        env = fleet_env(
            database_url,
            tmp_path / "fleet",
            FIREFEED_SECRETS_KEY=key,
            FIREFEED_FETCH_ALLOWED_HOSTS="127.0.0.1",
            FIREFEED_GOOGLE_MERCHANT_URL=standin.url,
            FIREFEED_GOOGLE_MERCHANT_REQUESTS_PER_MINUTE="120000",
        )
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", key)
        reset_settings()
        with running_fleet(env, monkeypatch, tmp_path / "logs") as fleet:
            yield fleet, standin


def test_a_sync_worker_killed_mid_10000_inserts_is_resumed_and_every_item_arrives_with_no_more_repeats_than_in_flight(
    tmp_path: Path, sync_fleet: tuple[Fleet, MerchantStandIn], stress_tally: Any, engine: Any
) -> None:
    fleet, standin = sync_fleet
    company, project = "co_" + uuid.uuid4().hex[:8], "big_sync"
    SecretStore().set(company, "GSA", standin.service_account_json())
    folder = tmp_path / "spec"
    folder.mkdir()
    with (folder / "main.csv").open("w", encoding="utf-8") as f:
        f.write("id,title,description,availability,condition,price,link,image_link,brand\n")
        for i in range(ITEMS):
            f.write(
                f"K{i:05d},Item {i},Item {i} of ours,in stock,new,{i % 90 + 1}.50 EUR,{SHOP}/{i},{SHOP}/{i}.jpg,Acme\n"
            )
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [
            {
                "name": "google",
                "format": "google-xml",
                "path": "google.xml",
                "sync": {
                    "to": "google-merchant",
                    "account": "1234567",
                    "data_source": "7654321",
                    "content_language": "it",
                    "feed_label": "IT",
                    "credentials": "${secret:GSA}",
                },
            }
        ],
    }
    spec_path = folder / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    RunStore().apply_spec(load_spec_file(spec_path), spec_dir=folder)

    run_id = start_run(project, "api")
    deadline = time.monotonic() + 600
    while len(standin.products()) < 2_000:
        assert RunStore().run(run_id).status in ("PENDING", "RUNNING"), RunStore().run(run_id).error
        assert time.monotonic() < deadline, "the sync never got going"
        time.sleep(0.01)
    fleet.kill("sync")  # SIGKILL of the worker and its pool, mid-send
    held_at_kill = len(standin.products())
    table = f'"{company_schema(company)}"."{sync_ledger_table(project, "google")}"'
    with engine.connect() as conn:
        in_flight = int(conn.execute(text(f"SELECT count(*) FROM {table} WHERE status = 'sending'")).scalar_one())
    fleet.restart("sync")

    assert wait_status(run_id, 600) == "SUCCEEDED", RunStore().run(run_id).error
    assert 2_000 <= held_at_kill < ITEMS and in_flight > 0
    assert len(standin.products()) == ITEMS
    sent = Counter(r.offer_id for r in standin.requests if r.method == "POST" and r.offer_id)
    repeated = sum(n - 1 for n in sent.values())
    assert repeated <= in_flight, (repeated, in_flight)
    with engine.connect() as conn:
        attempts = conn.execute(
            text("SELECT attempts FROM pipeline_jobs WHERE run_id = CAST(:r AS uuid) AND kind = 'sync'"),
            {"r": run_id},
        ).scalar_one()
        left = conn.execute(text(f"SELECT count(*) FROM {table} WHERE status <> 'acked'")).scalar_one()
    assert attempts == 2 and left == 0, (attempts, left)
    report = RunStore().run(run_id).report or {}
    doc = report["exports"][0]["sync"]
    assert (doc["failed"], doc["pending"]) == (0, 0), doc
    stress_tally.fault("kill -9 sync worker mid-send")
    stress_tally.run()
