"""kill -9 of a process in the middle of a sync, then the resume (SPEC 10 C10, #51 acceptance, small and fast).

A sync of 1,000 inserts runs in a process of its own (what a sync job runs) against the Merchant API
stand-in; once the stand-in holds a few hundred products the process is killed with SIGKILL. Its
ledger then has only the in-flight rows `sending`. The resume (the next sync of the export) sends
exactly the operations not acked: every item ends on the stand-in, and no more requests are repeated
than were in flight at the kill. The same with a real Celery sync worker and 10,000 inserts is
tests/stress/test_sync_kill.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from firefeed.config import get_settings, reset_settings
from firefeed.schema.identifiers import company_schema, sync_ledger_table
from firefeed.secrets.crypto import generate_key
from firefeed.sync.jobs import run_sync
from firefeed.sync.service import synced_exports
from tests.integration.conftest import cli
from tests.integration.file_servers import company_with
from tests.standins.merchant_api import MerchantStandIn, running

pytestmark = pytest.mark.integration

ITEMS = 1_000
SHOP = "https://www.shoeshop-firenze.it/p"


@pytest.fixture()
def merchant(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MerchantStandIn]:
    with running(latency_ms=2) as standin:
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
        monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", standin.url)
        monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_REQUESTS_PER_MINUTE", "600000")
        reset_settings()
        yield standin
    reset_settings()


def write_feed(folder: Path, company: str, project: str) -> Path:
    feed = folder / "items.csv"
    with feed.open("w", encoding="utf-8") as f:
        f.write("id,title,description,availability,condition,price,link,image_link,brand\n")
        for i in range(ITEMS):
            f.write(
                f"K{i:05d},Item {i},Item {i} of ours,in stock,new,{i % 90 + 1}.50 EUR,{SHOP}/{i},{SHOP}/{i}.jpg,Acme\n"
            )
    sync = {
        "to": "google-merchant",
        "account": "1234567",
        "data_source": "7654321",
        "content_language": "it",
        "feed_label": "IT",
        "credentials": "${secret:GSA}",
    }
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": str(feed), "format": "csv"}],
        "exports": [{"name": "google", "format": "google-xml", "path": "google.xml", "sync": sync}],
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def sending_rows(company: str, project: str) -> int:
    from firefeed.db.engine import get_engine

    table = f'"{company_schema(company)}"."{sync_ledger_table(project, "google")}"'
    with get_engine().connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table} WHERE status = 'sending'")).scalar_one())


def test_a_sync_killed_mid_send_resumes_with_exactly_the_operations_not_acked(
    merchant: MerchantStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    company, project = company_with(GSA=merchant.service_account_json()), "p_" + uuid.uuid4().hex[:10]
    path = write_feed(tmp_path, company, project)
    # The run publishes; its own sync is refused at once (the host rules do not allow the stand-in's loopback yet).
    _code, out = cli("run", str(path), "--json")
    assert json.loads(out)["status"] == "SUCCEEDED"
    assert merchant.products() == {}

    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    reset_settings()
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.sync_child", project, "google"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(merchant.products()) < 250:
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the sync never got going"
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGKILL)  # no handler runs: the ledger is as the kill left it
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    held_at_kill = len(merchant.products())
    in_flight = sending_rows(company, project)
    # In flight: the requests out (two per sending thread at most) and answers not yet written (0.2 s of them).
    assert 0 < held_at_kill < ITEMS and 0 < in_flight < 400, (held_at_kill, in_flight)

    (item,) = synced_exports(_engine(), project, "google")
    result, _ = run_sync(
        item.spec,
        item.spec_dir,
        item.export,
        item.columns,
        settings=get_settings(),
        engine=_engine(),
        list_status=False,
    )
    assert (result.failed, result.pending, result.error) == (0, 0, None), result
    assert len(merchant.products()) == ITEMS
    sent = Counter(r.offer_id for r in merchant.requests if r.method == "POST" and r.offer_id)
    assert set(sent) == set(merchant.products())
    repeated = sum(n - 1 for n in sent.values())
    assert repeated <= in_flight, (repeated, in_flight)
    assert sending_rows(company, project) == 0


def _engine():  # type: ignore[no-untyped-def]
    from firefeed.db.engine import get_engine

    return get_engine()
