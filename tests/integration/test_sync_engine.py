"""The sync engine against a channel that answers in this process (SPEC 10 C9-C10): the ledger's rules.

The channel here is a small in-test ChannelClient (the protocol of firefeed/sync/channel.py), so each
rule of the ledger is seen alone: inserts for new and changed items, nothing for unchanged ones, a
resend after the resend age, deletes, rows `sending` before their request leaves, the time bound
that leaves the rest pending, and `invalid_items: exclude`. Refusals, quota answers and the channel's
statuses are tested over HTTP: test_sync_google.py (and the Meta client's test_meta_catalog_sync.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import text

from firefeed.config import get_settings, reset_settings
from firefeed.schema.identifiers import company_schema, sync_ledger_table
from firefeed.secrets.crypto import generate_key
from firefeed.spec.loader import load_spec_file
from firefeed.sync.channel import ChannelBusy, Limits, Op, Operation, Outcome, RemoteItem
from firefeed.sync.engine import SyncTarget, same_item, sync_export
from firefeed.sync.jobs import export_columns, target_of
from firefeed.sync.service import status
from tests.integration.conftest import cli
from tests.integration.file_servers import company_with

pytestmark = pytest.mark.integration

SHOP = "https://www.shoeshop-firenze.it/p"
COLUMNS = ["id", "title", "description", "availability", "price", "link", "image_link"]


class Channel:
    """Holds items by key; `refuse` keys answer a refusal, `busy` the next n calls answer ChannelBusy."""

    name = "google-merchant"

    def __init__(self, max_batch: int = 1) -> None:
        self.limits = Limits(max_batch=max_batch)
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse: dict[str, str] = {}
        self.busy = 0
        self.quota = True
        self.lock = threading.Lock()
        self.on_send: Any = None

    def send(self, ops: Sequence[Operation]) -> list[Outcome]:
        if self.on_send is not None:
            self.on_send(ops)
        with self.lock:
            if self.busy:
                self.busy -= 1
                raise ChannelBusy("429 RESOURCE_EXHAUSTED", retry_after=0.05, quota=self.quota)
            out = []
            for op in ops:
                self.calls.append((op.op.value, op.key))
                if op.op is Op.INSERT and op.key in self.refuse:
                    out.append(Outcome(op.key, False, "INVALID_ARGUMENT", self.refuse[op.key]))
                    continue
                if op.op is Op.INSERT:
                    assert op.item is not None
                    self.items[op.key] = dict(op.item)
                else:
                    self.items.pop(op.key, None)  # a delete of what it does not hold is ok
                out.append(Outcome(op.key, True))
            return out

    def list_items(self) -> Iterator[RemoteItem]:
        for key, item in sorted(self.items.items()):
            yield RemoteItem(key, dict(item))

    def close(self) -> None:
        pass


@pytest.fixture()
def sync_env(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # The run's own sync is refused at once (a loopback URL the host rules do not allow): these tests sync by hand.
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", "http://127.0.0.1:9")
    reset_settings()
    yield run_env
    reset_settings()


def write_project(folder: Path, company: str, project: str, rows: dict[str, tuple[str, str]], **export: Any) -> Path:
    feed = folder / f"{project}.csv"
    feed.write_text(
        "id,title,description,availability,price,link,image_link\n"
        + "".join(f"{k},{t},{t} of ours,in stock,{p},{SHOP}/{k},{SHOP}/{k}.jpg\n" for k, (t, p) in rows.items()),
        encoding="utf-8",
    )
    sync = {
        "to": "google-merchant",
        "account": "123",
        "data_source": "456",
        "content_language": "en",
        "feed_label": "IT",
        "credentials": "${secret:GSA}",
    }
    spec = {
        "company": company,
        "project": project,
        "sources": [{"name": "main", "url": str(feed), "format": "csv"}],
        "exports": [
            {"name": "g", "format": "csv", "path": "g.csv", "channel": "google", "max_drop": 100, "sync": sync} | export
        ],
    }
    path = folder / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def run(path: Path) -> dict[str, Any]:
    import json

    _code, out = cli("run", str(path), "--json")
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "SUCCEEDED", report
    return report


def target(path: Path) -> SyncTarget:
    spec = load_spec_file(path)
    export = spec.exports[0]
    return target_of(spec, export, export_columns(export, COLUMNS), None)


def sync(path: Path, channel: Channel, **kw: Any) -> Any:
    result, _ = sync_export(target(path), channel, settings=get_settings(), engine=_engine(), **kw)
    return result


def _engine() -> Any:
    from firefeed.db.engine import get_engine

    return get_engine()


def ledger_rows(company: str, project: str) -> dict[str, tuple[str, str, int]]:
    table = f'"{company_schema(company)}"."{sync_ledger_table(project, "g")}"'
    with _engine().connect() as conn:
        rows = conn.execute(text(f"SELECT k, op, status, attempts FROM {table}")).all()
    return {r.k: (r.op, r.status, r.attempts) for r in rows}


def test_new_changed_unchanged_and_removed_items_become_inserts_updates_nothing_and_deletes(
    sync_env: Path, tmp_path: Path
) -> None:
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR"), "B": ("Hat", "5 EUR")})
    report = run(path)
    # The run's own sync could not reach its channel (a closed port): a warning, the run SUCCEEDED all the same.
    assert report["exports"][0]["sync"]["to"] == "google-merchant"
    assert any(w.startswith("sync_failed: export 'g'") for w in report["warnings"]), report["warnings"]

    channel = Channel()
    first = sync(path, channel, list_status=False)
    assert (first.inserted, first.updated, first.deleted, first.failed, first.pending) == (2, 0, 0, 0, 0)
    assert channel.items["A"] == {
        "id": "A",
        "title": "Shoe",
        "description": "Shoe of ours",
        "availability": "in stock",
        "price": "10 EUR",
        "link": f"{SHOP}/A",
        "image_link": f"{SHOP}/A.jpg",
    }
    assert sync(path, channel, list_status=False).requests == 0  # unchanged: nothing sent

    write_project(tmp_path, company, project, {"A": ("Shoe", "12 EUR"), "C": ("Bag", "30 EUR")})
    run(path)
    channel.calls.clear()
    second = sync(path, channel, list_status=False)
    assert (second.inserted, second.updated, second.deleted) == (1, 1, 1)
    assert sorted(channel.calls) == [("delete", "B"), ("insert", "A"), ("insert", "C")]
    assert set(channel.items) == {"A", "C"} and channel.items["A"]["price"] == "12 EUR"
    assert ledger_rows(company, project) == {"A": ("insert", "acked", 1), "C": ("insert", "acked", 1)}

    # An item acked longer ago than the resend age goes again, before the channel expires it.
    table = f'"{company_schema(company)}"."{sync_ledger_table(project, "g")}"'
    with _engine().begin() as conn:
        conn.execute(text(f"UPDATE {table} SET acked_at = now() - interval '26 days' WHERE k = 'C'"))
    channel.calls.clear()
    third = sync(path, channel, list_status=False)
    assert channel.calls == [("insert", "C")] and (third.inserted, third.updated) == (0, 1)


def test_rows_are_sending_before_their_request_leaves_and_the_time_bound_leaves_the_rest_pending(
    sync_env: Path, tmp_path: Path
) -> None:
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    rows = {f"K{i:03d}": (f"Item {i}", "1 EUR") for i in range(40)}
    path = write_project(tmp_path, company, project, rows)
    run(path)
    channel = Channel()
    seen: list[str] = []

    def check(ops: Sequence[Operation]) -> None:
        # Read on another connection: the row's `sending` is committed before its request leaves.
        states = ledger_rows(company, project)
        seen.extend(states[o.key][1] for o in ops)
        time.sleep(0.05)

    channel.on_send = check
    result, _ = sync_export(
        target(path), channel, settings=get_settings(), engine=_engine(), list_status=False, max_s=0.6
    )
    assert set(seen) == {"sending"}
    assert 0 < result.pending < 40 and result.inserted + result.pending == 40
    states = ledger_rows(company, project)
    assert sorted(s for _, s, _ in states.values() if s != "acked") == ["pending"] * result.pending
    channel.on_send = None
    rest = sync(path, channel, list_status=False)
    assert (rest.inserted, rest.pending) == (result.pending, 0)
    assert sorted(k for _, k in channel.calls) == sorted(rows)


def test_items_the_file_leaves_out_are_not_sent(sync_env: Path, tmp_path: Path) -> None:
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    rows = {f"K{i:03d}": (f"Item {i}", "1 EUR") for i in range(40)}
    rows["BAD"] = ("", "")  # no title, no price: errors in Google's checks
    path = write_project(tmp_path, company, project, rows, invalid_items="exclude", max_invalid=10)
    run(path)
    channel = Channel()
    result = sync(path, channel, list_status=False)
    assert result.inserted == 40 and "BAD" not in channel.items


def test_repair_compares_what_the_channel_holds() -> None:
    assert same_item({"price": "12.00 EUR", "title": "Shoe"}, {"price": "12 eur", "title": " Shoe "})
    assert not same_item({"price": "12.00 EUR"}, {"price": "13 EUR"})
    assert same_item({"title": "Shoe"}, {"title": "Shoe", "unmapped": "x"})


def test_another_company_naming_the_same_account_does_not_hold_this_ones_sync(sync_env: Path, tmp_path: Path) -> None:
    # Any company may write any Merchant Center account number in its spec (with a key Google would refuse, or
    # a token URI that never answers): its sync must not keep another company's syncs of that account waiting.
    other = company_with(GSA="{}")
    other_path = write_project(tmp_path, other, "p_" + uuid.uuid4().hex[:10], {"X": ("Hat", "5 EUR")})
    run(other_path)
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR")})
    run(path)

    holding, release = threading.Event(), threading.Event()
    slow = Channel()
    slow.on_send = lambda ops: (holding.set(), release.wait(10))
    other_sync = threading.Thread(target=sync, args=(other_path, slow), kwargs={"list_status": False})
    other_sync.start()
    try:
        assert holding.wait(10)
        channel = Channel()
        result = sync(path, channel, list_status=False, max_s=2.0)
    finally:
        release.set()
        other_sync.join(10)
    assert result.error is None and result.inserted == 1 and set(channel.items) == {"A"}


def test_a_second_project_of_the_same_company_and_account_waits_and_says_so(sync_env: Path, tmp_path: Path) -> None:
    # One sync per company and account at a time (the quota is the account's); the one that could not get the
    # account is an outcome, even on its first sync, before it has a ledger of its own.
    company = company_with(GSA="{}")
    first_path = write_project(tmp_path, company, "p_" + uuid.uuid4().hex[:10], {"X": ("Hat", "5 EUR")})
    run(first_path)
    path = write_project(tmp_path, company, "p_" + uuid.uuid4().hex[:10], {"A": ("Shoe", "10 EUR")})
    run(path)

    holding, release = threading.Event(), threading.Event()
    slow = Channel()
    slow.on_send = lambda ops: (holding.set(), release.wait(10))
    first_sync = threading.Thread(target=sync, args=(first_path, slow), kwargs={"list_status": False})
    first_sync.start()
    try:
        assert holding.wait(10)
        channel = Channel()
        result = sync(path, channel, list_status=False, max_s=1.0)
    finally:
        release.set()
        first_sync.join(10)
    assert result.error is not None and "another sync" in result.error and not channel.calls
    assert sync(path, channel, list_status=False).inserted == 1


class EndlessChannel(Channel):
    """A channel whose listing hands out pages forever (here: for 20 s, so a sync that waits for its end fails)."""

    def list_items(self) -> Iterator[RemoteItem]:
        began, n = time.monotonic(), 0
        while time.monotonic() - began < 20:
            n += 1
            yield RemoteItem(f"R{n:09d}", {"title": "x"})


def test_a_listing_that_never_ends_is_held_to_the_syncs_time(sync_env: Path, tmp_path: Path) -> None:
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR")})
    run(path)
    began = time.monotonic()
    result, found = sync_export(
        target(path), EndlessChannel(), settings=get_settings(), engine=_engine(), repair=True, max_s=1.0
    )
    assert time.monotonic() - began < 8
    assert result.error is not None and "did not finish" in result.error and found is None
    began = time.monotonic()
    listed = sync(path, EndlessChannel(), list_status=True, max_s=1.0)  # the statuses after a sync: the sends stand
    assert time.monotonic() - began < 8 and listed.inserted == 1 and listed.error is None


def test_a_newer_publish_during_a_sync_is_not_sent_under_the_older_runs_columns(
    sync_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sync claims its rows a block at a time from the export's published table; a newer run that publishes
    # meanwhile (its own sync waits for the account) replaces that table, maybe with other columns. The older
    # sync must not send the newer payloads under its own column names (a description as the title).
    monkeypatch.setenv("FIREFEED_SYNC_THREADS", "1")  # blocks of 4 rows: most are claimed after the publish
    reset_settings()
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    rows = {f"K{i:03d}": (f"Item {i}", "1 EUR") for i in range(20)}
    older = {c: c for c in COLUMNS}
    path = write_project(tmp_path, company, project, rows, fields=older)
    run(path)
    first = target(path)

    holding, release = threading.Event(), threading.Event()
    channel = Channel()

    def hold(ops: Sequence[Operation]) -> None:
        if not holding.is_set():
            holding.set()
            release.wait(30)

    channel.on_send = hold
    out: list[Any] = []
    sending = threading.Thread(
        target=lambda: out.append(
            sync_export(first, channel, settings=get_settings(), engine=_engine(), list_status=False)[0]
        )
    )
    sending.start()
    try:
        assert holding.wait(10)
        write_project(tmp_path, company, project, rows, fields={"id": "id", "mpn": "id", **older})
        run(path)
    finally:
        release.set()
        sending.join(30)
    assert all(item["title"].startswith("Item ") for item in channel.items.values()), channel.items
    assert out and out[0].error is not None and "newer run" in out[0].error, out
    rest = sync(path, channel, list_status=False)  # the newer run's columns
    assert rest.error is None and rest.pending == 0 and set(channel.items) == set(rows)
    assert all(item["mpn"] == key and item["title"].startswith("Item ") for key, item in channel.items.items())


def test_repair_counts_every_orphan_lists_the_first_and_deletes_them_all_when_asked(
    sync_env: Path, tmp_path: Path
) -> None:
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR")})
    run(path)
    channel = Channel()
    channel.items = {f"O{n:04d}": {"title": "gone"} for n in range(120)}
    _, found = sync_export(target(path), channel, settings=get_settings(), engine=_engine(), repair=True)
    assert found is not None and (found["orphans"], found["missing"], found["resent"]) == (120, 1, 1)
    assert found["orphan_keys"] == [f"O{n:04d}" for n in range(100)] and len(channel.items) == 121
    result, found = sync_export(
        target(path), channel, settings=get_settings(), engine=_engine(), repair=True, delete_orphans=True
    )
    assert found is not None and found["orphans"] == 120 and set(channel.items) == {"A"} and result.deleted == 120


def test_a_sync_to_a_new_account_waits_for_the_old_accounts_sync_of_the_same_export(
    sync_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ledger is the export's, the account lock the account's: a sync pointed at a new account starts the
    # ledger anew (drops it), which must not happen under a sync of the old account still sending from it.
    monkeypatch.setenv("FIREFEED_SYNC_THREADS", "1")
    reset_settings()
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    rows = {f"K{i:03d}": (f"Item {i}", "1 EUR") for i in range(20)}
    path = write_project(tmp_path, company, project, rows)
    run(path)
    old = target(path)
    holding, release = threading.Event(), threading.Event()
    old_channel = Channel()
    old_channel.on_send = lambda ops: None if holding.is_set() else (holding.set(), release.wait(30))
    out: list[Any] = []
    sending = threading.Thread(
        target=lambda: out.append(
            sync_export(old, old_channel, settings=get_settings(), engine=_engine(), list_status=False)[0]
        )
    )
    sending.start()
    try:
        assert holding.wait(10)
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec["exports"][0]["sync"]["account"] = "999"
        path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        new = target(path)
        new_channel = Channel()
        waited, _ = sync_export(new, new_channel, settings=get_settings(), engine=_engine(), max_s=1.0)
        # `sync status --refresh` neither lists the channel beside it nor starts the ledger anew under it
        (doc,) = status(project, settings=get_settings(), engine=_engine(), refresh=True)
    finally:
        release.set()
        sending.join(30)
    assert waited.error is not None and "another sync" in waited.error and not new_channel.calls
    assert "running" in doc["refresh_error"], doc
    assert out and out[0].error is None and set(old_channel.items) == set(rows)
    result, _ = sync_export(new, new_channel, settings=get_settings(), engine=_engine(), list_status=False)
    assert result.inserted == 20 and set(new_channel.items) == set(rows)


class FlakyChannel(Channel):
    """Answers `flaky` keys with a transient per-item failure (a 502 for that item, a Meta batch unconfirmed)."""

    def __init__(self) -> None:
        super().__init__()
        self.flaky: set[str] = set()

    def send(self, ops: Sequence[Operation]) -> list[Outcome]:
        with self.lock:
            if ops[0].key in self.flaky:
                self.calls.append((ops[0].op.value, ops[0].key))
                return [Outcome(ops[0].key, False, "BAD_GATEWAY", "try again", retry=True)]
        return super().send(ops)


def test_an_insert_that_failed_only_for_the_channels_trouble_goes_again_next_sync(
    sync_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refusal waits for a change or a repair; a transient failure that outlasted the sync's attempts is not a
    # refusal: it is not acknowledged, and the next sync sends it (SPEC 10 C10), or the item never reaches it.
    monkeypatch.setenv("FIREFEED_SYNC_MAX_ATTEMPTS", "2")
    reset_settings()
    company, project = company_with(GSA="{}"), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR"), "B": ("Hat", "5 EUR")})
    run(path)
    channel = FlakyChannel()
    channel.flaky = {"B"}
    channel.refuse = {"A": "[price] invalid"}
    first = sync(path, channel, list_status=False)
    assert (first.failed, first.pending) == (2, 0) and channel.calls.count(("insert", "B")) == 2
    channel.flaky.clear()
    channel.calls.clear()
    second = sync(path, channel, list_status=False)
    assert channel.calls == [("insert", "B")] and second.inserted == 1 and "B" in channel.items


def test_a_repair_asked_over_the_api_beside_a_running_sync_answers_at_once(
    sync_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An API repair runs on a thread of the routes' pool: beside a sync of the export it must not sit there
    # waiting for the locks (60 s a call: a company's few dozen calls would hold every thread of the API).
    from firefeed.sync.service import repair
    from tests.standins.merchant_api import MerchantStandIn

    google = MerchantStandIn().start()
    monkeypatch.setenv("FIREFEED_GOOGLE_MERCHANT_URL", google.url)
    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    reset_settings()
    company, project = company_with(GSA=google.service_account_json()), "p_" + uuid.uuid4().hex[:10]
    path = write_project(tmp_path, company, project, {"A": ("Shoe", "10 EUR")})
    run(path)
    holding, release = threading.Event(), threading.Event()

    class Listing(Channel):
        def list_items(self) -> Iterator[RemoteItem]:  # the run's sync sent everything: this one lists, slowly
            holding.set()
            release.wait(10)
            yield from ()

    running = threading.Thread(target=sync, args=(path, Listing()), kwargs={"list_status": True})
    running.start()
    try:
        assert holding.wait(10)
        began = time.monotonic()
        found = repair(project, "g", delete_orphans=False, settings=get_settings(), engine=_engine(), wait=False)
        took = time.monotonic() - began
    finally:
        release.set()
        running.join(10)
        google.stop()
    assert took < 5 and "another sync" in (found["sync"].get("error") or ""), found
