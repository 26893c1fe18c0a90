"""API sync repairs and refreshes are bounded per company (#51): each lists a channel, which can take minutes.

They run on threads of their own (preview/pool.py's BoundedPool), one per company by default: a second call
of the same company while the first lists the channel is refused at once (429, Retry-After), a plain status
read is not held, and another company is not refused. A real API server and the Merchant API stand-in
answering each request in 1 s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from firefeed.config import reset_settings
from firefeed.runs.tokens import TokenStore
from firefeed.secrets.crypto import generate_key
from tests.integration.conftest import eventually, new_company
from tests.integration.test_sync_google import GOOD_GTIN, new_project, run, write_project
from tests.standins.merchant_api import MerchantStandIn, running

pytestmark = pytest.mark.integration


@pytest.fixture()
def slow_merchant(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MerchantStandIn]:
    with running(latency_ms=1000) as standin:
        monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
        monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", standin.url)
        monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
        monkeypatch.setenv("FIREFEED_SYNC_MAX_S", "60")
        reset_settings()
        yield standin
    reset_settings()


def test_a_companys_second_repair_while_its_first_lists_the_channel_is_refused_at_once(
    slow_merchant: MerchantStandIn, tmp_path: Path, base_url: str
) -> None:
    company, project, _ = new_project(slow_merchant)
    run(write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR", GOOD_GTIN)}))
    own = {"Authorization": f"Bearer {TokenStore().create(company)}"}
    _other, theirs = new_company()
    repair = f"/api/projects/{project}/exports/google/sync/repair"
    status = f"/api/projects/{project}/exports/google/sync"
    first: list[httpx.Response] = []
    with httpx.Client(base_url=base_url, timeout=90) as http:
        before = len(slow_merchant.requests)
        thread = threading.Thread(target=lambda: first.append(http.post(repair, headers=own, json={})))
        thread.start()
        try:
            with httpx.Client(base_url=base_url, timeout=30) as other:
                # The first repair is admitted, has its token (answered at once) and now lists the channel (1 s).
                assert eventually(lambda: len(slow_merchant.requests) > before, 30)
                again = other.post(repair, headers=own, json={})
                assert again.status_code == 429, again.text
                assert again.json()["error"] == "too_many_sync_calls"
                assert int(again.headers["retry-after"]) >= 1
                assert "FIREFEED_SYNC_API_PER_COMPANY=1" in again.json()["message"]
                refreshed = other.get(status, headers=own, params={"refresh": "true"})
                assert refreshed.status_code == 429, refreshed.text
                plain = other.get(status, headers=own)  # a read of the ledger holds no channel call
                assert plain.status_code == 200, plain.text
                assert other.post(repair, headers=theirs, json={}).status_code == 404  # admitted, then not found
                assert thread.is_alive(), "the first repair ended before the others were asked: nothing was tested"
        finally:
            thread.join(90)
    (done,) = first
    assert done.status_code == 200, done.text
    assert done.json()["missing"] == 0
