"""A company's token creates tokens over the API (the page's settings), and each is bounded by its parent:
revoked with it (transitively), never expiring after it, at most FIREFEED_TOKENS_PER_COMPANY active (#53)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from firefeed.config import reset_settings
from firefeed.errors import AuthenticationError, CompanyLimitError
from firefeed.runs.tokens import TokenStore
from tests.integration.conftest import cli

pytestmark = pytest.mark.integration


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def company() -> str:
    return "tt_" + uuid.uuid4().hex[:10]


@pytest.fixture()
def cache_s(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The API process trusts a verified token for 600 s: only the database checks can stop it sooner."""
    monkeypatch.setenv("FIREFEED_TOKEN_CACHE_S", "600")
    reset_settings()
    yield
    reset_settings()


def create(http: httpx.Client, token: str, **body: Any) -> dict[str, Any]:
    made = http.post("/api/tokens", json=body, headers=bearer(token))
    assert made.status_code == 201, made.text
    answer: dict[str, Any] = made.json()
    return answer


def listed(http: httpx.Client, token: str) -> dict[int, dict[str, Any]]:
    answer = http.get("/api/tokens", headers=bearer(token))
    assert answer.status_code == 200, answer.text
    return {t["id"]: t for t in answer.json()["tokens"]}


def works(http: httpx.Client, token: str) -> bool:
    code = http.get("/api/projects", headers=bearer(token)).status_code
    assert code in (200, 401)
    return code == 200


def test_a_token_creates_one_shown_once_that_works_is_listed_with_its_parent_and_name_and_is_never_logged(
    http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    mine = company()
    root = TokenStore().create(mine)
    root_id = TokenStore().list(mine)[0].id
    caplog.set_level(logging.INFO)

    child = create(http, root, name="<img src=x onerror=alert(1)> shop feed")
    assert set(child) == {"id", "token", "prefix", "expires_at", "parent_id", "name"}
    assert child["token"].startswith("ff_") and child["prefix"] == child["token"][:10]
    assert child["parent_id"] == root_id and child["expires_at"] is None
    assert child["name"] == "<img src=x onerror=alert(1)> shop feed"  # kept as text; the page shows it as text
    assert works(http, child["token"])

    tokens = listed(http, child["token"])
    assert tokens[child["id"]]["parent_id"] == root_id and tokens[root_id]["parent_id"] is None
    assert tokens[child["id"]]["name"] == child["name"] and tokens[root_id]["name"] is None
    code, table = cli("token", "list", "--company", mine)
    assert code == 0
    row = next(line for line in table.splitlines() if line.split()[0] == str(child["id"]))
    assert row.split()[6] == str(root_id) and row.endswith(child["name"])
    code, as_json = cli("token", "list", "--company", mine, "--json")

    # Shown once: no listing, CLI output or log line carries it (the log does say a token was created).
    shown = http.get("/api/tokens", headers=bearer(child["token"])).text + table + as_json
    assert child["token"] not in shown and root not in shown
    assert f"token {child['id']} ({child['prefix']}…) created by token {root_id}" in caplog.text
    assert child["token"] not in caplog.text and root not in caplog.text
    assert child["token"][10:] not in caplog.text


def test_revoking_a_token_revokes_every_token_below_it_at_once_and_a_revoked_parent_creates_nothing(
    http: httpx.Client, cache_s: None
) -> None:
    mine = company()
    root = TokenStore().create(mine)
    child, sibling = create(http, root, name="child"), create(http, root, name="sibling")
    grandchild = create(http, child["token"])
    great = create(http, grandchild["token"])
    assert grandchild["parent_id"] == child["id"] and great["parent_id"] == grandchild["id"]
    for t in (child, sibling, grandchild, great):
        assert works(http, t["token"])  # all cached by the API for 600 s

    assert http.delete(f"/api/tokens/{child['id']}", headers=bearer(sibling["token"])).status_code == 204
    for t in (child, grandchild, great):
        assert not works(http, t["token"]), t["name"]
    assert works(http, root) and works(http, sibling["token"])
    states = {i: t["state"] for i, t in listed(http, root).items()}
    assert [states[t["id"]] for t in (child, grandchild, great, sibling)] == ["revoked"] * 3 + ["active"]

    # Revoked by another process (the CLI's store) while this API process still trusts it from its cache:
    # it still authenticates here for a while, but the database says no to anything it would create.
    below = create(http, sibling["token"])
    done = TokenStore().revoke(mine, sibling["id"])
    assert done.descendants == [below["id"]]
    assert works(http, sibling["token"])  # the cache's bound: FIREFEED_TOKEN_CACHE_S
    refused = http.post("/api/tokens", json={}, headers=bearer(sibling["token"]))
    assert refused.status_code == 401 and refused.json()["error"] == "unauthorized", refused.text
    assert not any(t["parent_id"] == sibling["id"] and t["state"] == "active" for t in listed(http, root).values())


def test_a_child_never_expires_after_its_parent(http: httpx.Client) -> None:
    mine = company()
    root = TokenStore().create(mine, timedelta(days=2))
    root_expires = TokenStore().list(mine)[0].expires_at
    assert root_expires is not None

    longer, unset = create(http, root, expires_in_days=30), create(http, root)
    assert datetime.fromisoformat(longer["expires_at"]) == root_expires
    assert datetime.fromisoformat(unset["expires_at"]) == root_expires
    sooner = create(http, root, expires_in_days=1)
    assert timedelta(hours=23) < root_expires - datetime.fromisoformat(sooner["expires_at"]) <= timedelta(days=1)
    # A grandchild is capped by the chain: its parent's cap is already the root's.
    assert create(http, longer["token"], expires_in_days=365)["expires_at"] == longer["expires_at"]

    bodies = ['{"expires_in_days": 0}', '{"expires_in_days": 36501}', '{"name": "%s"}' % ("x" * 101)]
    # A line break, a lone surrogate (no UTF-8 for Postgres), a NUL.
    bodies += ['{"name": "a\\nb"}', '{"name": "\\ud800"}', '{"name": "a\\u0000"}']
    for bad in bodies:
        answer = http.post("/api/tokens", content=bad, headers={**bearer(root), "Content-Type": "application/json"})
        assert answer.status_code == 422 and answer.json()["error"] == "invalid_request", (bad, answer.text)
    assert len(TokenStore().list(mine)) == 5  # the root, four children; nothing from the refused ones


def test_a_company_holds_at_most_the_setting_s_active_tokens(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_TOKENS_PER_COMPANY", "3")
    reset_settings()
    try:
        mine, theirs = company(), company()
        root = TokenStore().create(mine)
        first = create(http, root)
        create(http, root)
        full = http.post("/api/tokens", json={}, headers=bearer(root))
        assert full.status_code == 409 and full.json()["error"] == "company_limit", full.text
        assert "FIREFEED_TOKENS_PER_COMPANY=3" in full.json()["message"]
        with pytest.raises(CompanyLimitError):
            TokenStore().create(mine)  # the operator's CLI too
        assert TokenStore().create(theirs)  # another company's bound is its own

        assert http.delete(f"/api/tokens/{first['id']}", headers=bearer(root)).status_code == 204
        assert works(http, create(http, root)["token"])  # a revoked token no longer counts
    finally:
        reset_settings()


def test_another_company_can_neither_see_nor_revoke_nor_parent_a_company_s_tokens(http: httpx.Client) -> None:
    mine, theirs = company(), company()
    root, other_root = TokenStore().create(mine), TokenStore().create(theirs)
    child = create(http, root)
    other_child = create(http, other_root)

    assert child["id"] not in listed(http, other_root) and other_child["id"] not in listed(http, root)
    for token_id in (child["id"], TokenStore().list(mine)[0].id):
        answer = http.delete(f"/api/tokens/{token_id}", headers=bearer(other_root))
        assert answer.status_code == 404 and answer.json()["error"] == "not_found"
    assert works(http, child["token"]) and works(http, root)
    # A store asked for a parent of another company refuses, as for a revoked one.
    with pytest.raises(AuthenticationError):
        TokenStore().issue(theirs, parent_id=child["id"])


def test_a_child_created_while_its_ancestor_is_revoked_is_revoked_too(database_url: str) -> None:
    """Creates under a descendant race a revoke of the root: none may escape the recursive walk."""
    mine = company()
    store = TokenStore()
    root = store.create(mine)
    root_id = store.list(mine)[0].id
    child = store.issue(mine, parent_id=root_id).info.id
    made: list[int] = []
    start = threading.Barrier(5)

    def mint() -> None:
        start.wait()
        for _ in range(10):
            try:
                made.append(store.issue(mine, parent_id=child).info.id)
            except AuthenticationError:  # the parent is revoked: the rest are refused
                return

    def revoke() -> None:
        start.wait()
        store.revoke(mine, root_id)

    threads = [threading.Thread(target=mint) for _ in range(4)] + [threading.Thread(target=revoke)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert root and store.verify(root) is None
    assert [t.id for t in store.list(mine) if t.state == "active"] == []
