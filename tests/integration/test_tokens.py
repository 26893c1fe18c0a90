"""API tokens expire, are listed and revoked (CLI and API), and a cached one is refused in bounded time (#47, #48)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from firefeed.config import reset_settings
from firefeed.runs.tokens import TokenStore
from tests.integration.conftest import cli

pytestmark = pytest.mark.integration


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def cache_s(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The API processes trust a verified token for 600 s: only expiry and revocation can stop it sooner."""
    monkeypatch.setenv("FIREFEED_TOKEN_CACHE_S", "600")
    reset_settings()
    yield
    reset_settings()


def company() -> str:
    return "tk_" + uuid.uuid4().hex[:10]


def test_a_token_is_refused_once_it_expires_though_the_api_has_it_cached(http: httpx.Client, cache_s: None) -> None:
    mine = company()
    token = TokenStore().create(mine, timedelta(seconds=3))
    expires_at = TokenStore().list(mine)[0].expires_at
    assert expires_at is not None
    assert http.get("/api/projects", headers=bearer(token)).status_code == 200  # verified, now cached
    time.sleep(max(0.0, (expires_at - TokenStore().list(mine)[0].created_at).total_seconds()) + 0.5)
    refused = http.get("/api/projects", headers=bearer(token))
    assert refused.status_code == 401, refused.text
    assert refused.json()["error"] == "unauthorized"
    assert [t.state for t in TokenStore().list(mine)] == ["expired"]


def test_a_company_lists_and_revokes_its_own_tokens_over_the_api_and_a_revoked_one_is_refused_at_once(
    http: httpx.Client, cache_s: None
) -> None:
    mine, theirs = company(), company()
    first, second = TokenStore().create(mine), TokenStore().create(mine)
    other = TokenStore().create(theirs)
    assert http.get("/api/projects", headers=bearer(second)).status_code == 200  # cached for 600 s

    listed = http.get("/api/tokens", headers=bearer(first))
    assert listed.status_code == 200, listed.text
    tokens = listed.json()["tokens"]
    assert [(t["prefix"], t["state"]) for t in tokens] == [(first[:10], "active"), (second[:10], "active")]
    assert first not in listed.text and second not in listed.text
    assert tokens[1]["last_used_at"] is not None and tokens[1]["expires_at"] is None
    other_id = TokenStore().list(theirs)[0].id

    # Another company's token is as unknown as a missing one, and stays usable.
    assert http.delete(f"/api/tokens/{other_id}", headers=bearer(first)).status_code == 404
    assert http.get("/api/projects", headers=bearer(other)).status_code == 200

    assert http.delete(f"/api/tokens/{tokens[1]['id']}", headers=bearer(first)).status_code == 204
    assert http.get("/api/projects", headers=bearer(second)).status_code == 401
    assert http.delete(f"/api/tokens/{tokens[1]['id']}", headers=bearer(first)).status_code == 204  # again: no change
    states = [t["state"] for t in http.get("/api/tokens", headers=bearer(first)).json()["tokens"]]
    assert states == ["active", "revoked"]
    # A token may revoke itself; then nothing it sends is accepted.
    assert http.delete(f"/api/tokens/{tokens[0]['id']}", headers=bearer(first)).status_code == 204
    assert http.get("/api/tokens", headers=bearer(first)).status_code == 401


def test_the_cli_creates_with_an_expiry_lists_and_revokes_and_every_api_process_refuses_within_the_cache_time(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_TOKEN_CACHE_S", "1")
    reset_settings()
    try:
        mine = company()
        code, out = cli("token", "create", "--company", mine, "--expires-in", "30")
        token = out.strip()
        assert code == 0 and token.startswith("ff_")
        assert cli("token", "create", "--company", mine)[0] == 0
        assert http.get("/api/projects", headers=bearer(token)).status_code == 200  # cached by the API

        code, listed = cli("token", "list", "--company", mine)
        assert code == 0 and token not in listed
        rows = listed.splitlines()
        assert rows[0].split() == ["id", "prefix", "state", "created", "expires", "last", "used", "parent", "name"]
        assert token[:10] in rows[1] and "active" in rows[1]
        code, as_json = cli("token", "list", "--company", mine, "--json")
        found = json.loads(as_json)
        assert [t["prefix"] for t in found] == [token[:10], found[1]["prefix"]]
        assert found[0]["expires_at"] is not None and found[1]["expires_at"] is None
        assert found[0]["last_used_at"] is not None and found[1]["last_used_at"] is None
        assert token not in as_json

        # Another process (here: the CLI's own store) revokes it; the API's cache lets go within a second.
        assert cli("token", "revoke", "--company", mine, str(found[0]["id"]))[0] == 0
        deadline = time.monotonic() + 30
        while http.get("/api/projects", headers=bearer(token)).status_code != 401:
            assert time.monotonic() < deadline, "the revoked token is still accepted"
            time.sleep(0.1)
        assert json.loads(cli("token", "list", "--company", mine, "--json")[1])[0]["state"] == "revoked"

        assert cli("token", "revoke", "--company", company(), str(found[1]["id"]))[0] == 4  # not that company's
        assert cli("token", "revoke", "--company", mine, "999999999")[0] == 4
        with pytest.raises(SystemExit) as bad:
            cli("token", "create", "--company", mine, "--expires-in", "0")
        assert bad.value.code == 2
    finally:
        reset_settings()


def test_the_token_list_is_paged_active_tokens_first_and_revoked_ones_never_all_at_once(http: httpx.Client) -> None:
    """Revoked tokens pile up without bound (each revoke frees a place for a new one): the list answers a page,
    by default 100 tokens, the active ones first (at most FIREFEED_TOKENS_PER_COMPANY, so the page's first
    answer shows every one a person may revoke), then the expired, then the revoked, each oldest first."""
    mine, store = company(), TokenStore()
    revoked = []
    for _ in range(101):
        revoked.append(store.issue(mine).info.id)
        store.revoke(mine, revoked[-1])
    expired = store.create(mine, timedelta(seconds=1))
    me = store.create(mine)
    time.sleep(1.2)
    ids = {t.prefix: t.id for t in store.list(mine)}

    first = http.get("/api/tokens", headers=bearer(me))
    assert first.status_code == 200, first.text
    page = first.json()
    assert (page["total"], page["offset"], page["limit"], page["next_offset"]) == (103, 0, 100, 100)
    assert [t["id"] for t in page["tokens"]] == [ids[me[:10]], ids[expired[:10]], *revoked[:98]]
    assert [t["state"] for t in page["tokens"][:3]] == ["active", "expired", "revoked"]

    rest = http.get("/api/tokens", params={"offset": 100, "limit": 50}, headers=bearer(me)).json()
    assert [t["id"] for t in rest["tokens"]] == revoked[98:]
    assert (rest["offset"], rest["limit"], rest["next_offset"]) == (100, 50, None)
    two = http.get("/api/tokens", params={"offset": 1, "limit": 2}, headers=bearer(me)).json()
    assert [t["id"] for t in two["tokens"]] == [ids[expired[:10]], revoked[0]] and two["next_offset"] == 3
    past = http.get("/api/tokens", params={"offset": 500}, headers=bearer(me)).json()
    assert (past["tokens"], past["total"], past["next_offset"]) == ([], 103, None)
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"limit": "x"}):
        assert http.get("/api/tokens", params=bad, headers=bearer(me)).status_code == 422, bad


def test_an_offset_past_what_postgres_counts_is_refused_as_invalid_not_a_server_error(http: httpx.Client) -> None:
    me = TokenStore().create(company())
    for huge in (2**63, 10**30):
        answer = http.get("/api/tokens", params={"offset": huge}, headers=bearer(me))
        assert answer.status_code == 422, answer.text
