"""One sync of one export to its channel (SPEC 10 C9-C10): plan from the ledger, send paced, record each answer.

`sync_export` is the plain function: the job (`sync_job`), `firefeed sync repair` and the bench call
it. It holds one database connection for its whole length: the session's advisory lock on the channel
account (one sync per account at a time: the quota is the account's) and every ledger statement.

Sending: a block of pending rows is claimed `sending` and committed, then handed to the client in
units (Google: one product a request, on `FIREFEED_SYNC_THREADS` threads, each request waiting for a
token of the pacer; Meta: batches of up to 5,000 items and 28 MB, one at a time, the client polling
the batch's handle). Answers are recorded as they come (a commit every ~0.2 s). A unit the channel
refused as busy goes back to pending and the pacer slows down; nothing is lost. An item the channel
took without an optional attribute the client could not read is acked with those attributes in the
ledger's `left_out`, and counted and named in the outcome (`left_out`, `warnings`). After
`FIREFEED_SYNC_MAX_S` no new request starts: what is left stays pending, reported, for the next run
or `firefeed sync repair`. A channel that refuses the sync itself (`ChannelDown`) ends it with an
error; the run is never failed by a sync (a `sync_failed` warning).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.db.engine import raw_connection
from firefeed.runs.contract import SyncResult
from firefeed.sync.channel import ChannelBusy, ChannelClient, ChannelDown, Op, Operation, Outcome, RemoteItem
from firefeed.sync.ledger import RETIRED, Claimed, Ledger, Tally, _query
from firefeed.sync.pacing import Pacer, Unpaced

log = logging.getLogger(__name__)

#: how often answers are written back while requests are out (seconds)
FLUSH_S = 0.2
#: errors listed in a report
MAX_ERRORS = 20
#: how long a sync waits for another sync of the same account before it leaves everything pending
LOCK_WAIT_S = 60.0


@dataclass(frozen=True)
class SyncTarget:
    """What one sync needs to know of its export, wherever it runs (a job, the CLI, the bench)."""

    company: str
    project: str
    export: str
    to: str  # google-merchant | meta-catalog
    account: str  # the channel account whose quota it spends: one sync per account at a time (`account_key`)
    ledger_of: str  # what the ledger describes (`ledger_key`): another account, data source or catalog starts anew
    columns: Sequence[str]  # the export's output columns: the names of each payload's values
    run_id: str | None = None


@dataclass
class _Progress:
    tally: Tally = field(default_factory=Tally)
    errors: list[dict[str, str]] = field(default_factory=list)
    #: items sent without an optional attribute the client could not read, and the first of those attributes
    left_out: int = 0
    warnings: list[dict[str, str]] = field(default_factory=list)
    requests: int = 0
    down: str | None = None


class _NotSent(Exception):
    """The time was up before the unit's token came: it goes back to pending, not counted."""


def sync_export(
    target: SyncTarget,
    client: ChannelClient,
    *,
    settings: Settings,
    engine: Engine,
    list_status: bool | None = None,
    repair: bool = False,
    delete_orphans: bool = False,
    max_s: float | None = None,
    pacer: Pacer | Unpaced | None = None,
    lock_wait_s: float = LOCK_WAIT_S,
) -> tuple[SyncResult, dict[str, Any] | None]:
    """Plan and send the export's changes; (the outcome, the repair's findings when `repair`).

    `list_status`: list the channel's items and store their issues (None: when the last listing is
    older than FIREFEED_SYNC_STATUS_EVERY_S). `repair`: list the channel first, and re-send what it
    lacks or holds otherwise (orphans deleted only with `delete_orphans`). `lock_wait_s`: how long to wait for
    another sync of the account or export (0 for a repair asked over the API, on a thread of its pool).
    """
    started = time.monotonic()
    stop_at = started + (settings.sync_max_s if max_s is None else max_s)
    progress = _Progress()
    found: dict[str, Any] | None = None
    issues: dict[str, Any] | None = None
    # The lock is the company's hold on the account: any company may name any account number in its spec, and
    # one whose key the channel refuses (or whose token URI never answers) must not keep another's syncs waiting.
    # The export's lock too: its ledger is the export's, whatever account it goes to, and a sync pointed at a new
    # account starts it anew (drops it), which must wait for a sync of the old account still sending from it.
    with raw_connection(engine) as conn, _account_lock(conn, _lock_keys(target), stop_at, lock_wait_s) as locked:
        ledger = Ledger(conn, target.company, target.project, target.export)
        if not locked:
            progress.down = (
                f"another sync of {target.to} account {target.account.split(':', 1)[-1]} or of export "
                f"{target.export!r} ran all along; this one's operations stay pending"
            )
        else:
            _begin(conn, ledger, target, engine)
            if not ledger.has_published():
                progress.down = "the export has no published items with payloads yet: the next run sends them"
            else:
                ledger.reset_sending()
                ledger.plan(
                    resend_s=settings.sync_resend_days * 86400,
                    max_attempts=settings.sync_max_attempts,
                    id_at=_id_at(target.columns),
                )
                conn.commit()
                try:
                    if repair:
                        found, issues = _repair_plan(conn, ledger, client, target, delete_orphans, stop_at)
                    pacer = pacer or _pacer_for(client, settings)
                    _send_all(conn, ledger, client, pacer, stop_at, settings, progress)
                    if not repair and progress.down is None and _status_due(conn, target, settings, list_status):
                        issues = _statuses(conn, ledger, client, target, stop_at)
                except (ChannelDown, ChannelBusy) as err:  # the channel could not be listed for a repair
                    progress.down = err.message
                    conn.rollback()
        counts = ledger.counts() if ledger.exists() else {}  # unlocked, a first sync has no ledger yet
        pending = sum(n for by in counts.values() for s, n in by.items() if s in ("pending", "sending"))
        if issues is None:
            issues = _stored_issues(conn, target)
        result = SyncResult(
            export=target.export,
            to=target.to,
            inserted=progress.tally.inserted,
            updated=progress.tally.updated,
            deleted=progress.tally.deleted,
            failed=progress.tally.failed,
            pending=pending,
            errors=progress.errors[:MAX_ERRORS],
            left_out=progress.left_out,
            warnings=progress.warnings[:MAX_ERRORS],
            channel_issues=issues,
            error=progress.down,
            requests=progress.requests,
            seconds=round(time.monotonic() - started, 3),
        )
        if locked:
            last = {**result.to_json(), **({"repair": found} if found else {})}
            conn.cursor().execute(
                _query("state_end"), {"project": target.project, "export": target.export, "result": json.dumps(last)}
            )
        conn.commit()
    log.info(
        "sync of %s to %s: %d inserted, %d updated, %d deleted, %d failed, %d pending in %.1fs%s",
        target.export, target.to, result.inserted, result.updated, result.deleted, result.failed, result.pending,
        result.seconds, f" ({result.error})" if result.error else "",
    )  # fmt: skip
    return result, found


def _lock_keys(target: SyncTarget) -> list[str]:
    """The sync's locks: the company's hold on the channel account (the quota is the account's; any company may
    name any account number, so one whose key the channel refuses keeps no other company waiting), then the
    export's ledger."""
    return [f"{target.company}/{target.account}", f"{target.company}/export:{target.project}/{target.export}"]


@contextmanager
def _account_lock(conn: Any, keys: Sequence[str], stop_at: float, wait_s: float = LOCK_WAIT_S) -> Iterator[bool]:
    """The session locks on `keys`, all or none, waited for up to LOCK_WAIT_S (or the sync's time); released
    at the end. Tried, never waited on, so two syncs taking them in any order cannot deadlock.

    Session-level, so they survive the sync's commits, and a killed worker's connection drops them with itself.
    """
    deadline = min(stop_at, time.monotonic() + wait_s)
    cur = conn.cursor()
    held: list[str] = []
    while True:
        for key in keys:
            cur.execute(_query("account_lock"), {"account": key})
            if not cur.fetchone()[0]:
                break
            held.append(key)
        conn.commit()
        got = len(held) == len(keys)
        if got or time.monotonic() >= deadline:
            break
        _unlock(conn, held)
        held = []
        time.sleep(0.5)
    try:
        yield got
    finally:
        conn.rollback()
        _unlock(conn, held)


def _unlock(conn: Any, keys: Sequence[str]) -> None:
    cur = conn.cursor()
    for key in keys:
        cur.execute(_query("account_unlock"), {"account": key})
    conn.commit()


def _begin(conn: Any, ledger: Ledger, target: SyncTarget, engine: Engine) -> None:
    """The ledger table, and the state row; a sync pointed at another account forgets the old ledger."""
    from firefeed.schema.service import SchemaService

    cur = conn.cursor()
    cur.execute(_query("state_get"), {"project": target.project, "export": target.export})
    row = cur.fetchone()
    schema = SchemaService(engine)
    if row is not None and row[1] != target.ledger_of:
        log.warning(
            "the sync of %s now goes to %s: its ledger of %s starts anew", target.export, target.ledger_of, row[1]
        )
        ledger.drop()
    schema.create_sync_ledger(target.company, ledger.table, conn=conn)
    cur.execute(
        _query("state_begin"),
        {
            "project": target.project,
            "export": target.export,
            "target": target.to,
            "account": target.ledger_of,
            "columns": json.dumps(list(target.columns)),
            "run_id": target.run_id,
        },
    )
    conn.commit()


def _pacer_for(client: ChannelClient, settings: Settings) -> Pacer | Unpaced:
    if client.limits.max_batch == 1:
        return Pacer(settings.google_merchant_requests_per_minute)
    return Unpaced()


def _id_at(columns: Sequence[str]) -> int:
    """Where the export's `id` is in a payload (-1: it writes none): the channel id of its items."""
    return list(columns).index("id") if "id" in columns else -1


@dataclass(frozen=True)
class _Unit:
    """One client call: its operations, named by channel id, and the ledger key of each (the same order)."""

    ops: list[Operation]
    keys: list[str]


def _units(claimed: Sequence[Claimed], columns: Sequence[str], client: ChannelClient) -> list[_Unit]:
    """The claimed rows as the client's calls: at most max_batch operations and max_batch_bytes each, and no
    channel id twice in one call (its outcome could not be told apart)."""
    limit, max_bytes = client.limits.max_batch, client.limits.max_batch_bytes
    units: list[_Unit] = []
    unit = _Unit([], [])
    size = 0
    cids: set[str] = set()
    for row in claimed:
        item = dict(zip(columns, row.values, strict=False)) if row.values is not None else None
        op = Operation(row.cid or row.key, row.op, item if row.op is Op.INSERT else None)
        weight = len(json.dumps(item)) + 64 if max_bytes is not None else 0
        full = len(unit.ops) >= limit or (max_bytes is not None and size + weight > max_bytes)
        if unit.ops and (full or op.key in cids):
            units.append(unit)
            unit, size, cids = _Unit([], []), 0, set()
        unit.ops.append(op)
        unit.keys.append(row.key)
        cids.add(op.key)
        size += weight
    if unit.ops:
        units.append(unit)
    return units


def _send_all(
    conn: Any,
    ledger: Ledger,
    client: ChannelClient,
    pacer: Pacer | Unpaced,
    stop_at: float,
    settings: Settings,
    progress: _Progress,
) -> None:
    """Claim, send and record until nothing is pending, the time is up, or the channel refuses the sync."""
    threads = settings.sync_threads if client.limits.max_batch == 1 else 1
    # Units out or waiting for a token: enough to keep every thread busy. Refilled when it falls to `low`,
    # so a claim statement (and its commit) takes a block of rows, not one per answer.
    window = threads * 4
    low = threads
    columns = _columns(conn, ledger)
    inflight: dict[Future[list[Outcome]], _Unit] = {}
    attempts: dict[str, int] = {}
    answers: list[Outcome] = []
    busy_keys: list[str] = []
    again: list[str] = []
    exhausted = False
    last_flush = time.monotonic()
    unexpected = 0

    def one(unit: list[Operation]) -> list[Outcome]:
        if not pacer.take(stop_at):
            raise _NotSent
        return client.send(unit)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sync-send") as pool:
        while True:
            if not exhausted and progress.down is None and time.monotonic() < stop_at and len(inflight) <= low:
                want = (window - len(inflight)) * client.limits.max_batch
                claimed = ledger.claim(want)
                conn.commit()  # `sending` is on record before any request leaves
                if not claimed:
                    exhausted = True
                for row in claimed:
                    attempts[row.key] = row.attempts
                # A newer run published the export since this sync planned (its payloads may name other columns
                # than this sync's): those rows go back to pending for that run's sync, and this one stops.
                stale = [r.key for r in claimed if r.stale]
                if stale:
                    busy_keys += stale
                    progress.down = "a newer run published the export during this sync: that run's sync sends the rest"
                    claimed = [r for r in claimed if not r.stale]
                # An insert whose item a newer publish no longer has (a repair beside a run): the next plan
                # deletes it; nothing to send now.
                gone = [r for r in claimed if r.op is Op.INSERT and r.values is None]
                answers += [
                    Outcome(r.key, False, "not_in_export", "the item left the export before it was sent") for r in gone
                ]
                claimed = [r for r in claimed if not (r.op is Op.INSERT and r.values is None)]
                for unit in _units(claimed, columns, client):
                    inflight[pool.submit(one, unit.ops)] = unit
            if not inflight and not (answers or busy_keys or again):
                break
            done = wait(list(inflight), timeout=FLUSH_S, return_when=FIRST_COMPLETED)[0] if inflight else set()
            for future in done:
                unit = inflight.pop(future)
                keys = unit.keys
                try:
                    outcomes = future.result()
                except _NotSent:
                    busy_keys += keys
                    continue
                except ChannelBusy as err:
                    progress.requests += 1
                    pacer.busy(quota=err.quota, retry_after=err.retry_after)
                    log.info("channel busy (%s): %d operations back to pending", err.message, len(keys))
                    busy_keys += keys
                    exhausted = False
                    continue
                except ChannelDown as err:
                    progress.requests += 1
                    progress.down = err.message
                    busy_keys += keys
                    continue
                except Exception as err:  # a client's bug or a transport it did not map: back off, then give up
                    unexpected += 1
                    log.warning("sending %d operations failed: %s", len(keys), err, exc_info=unexpected == 1)
                    pacer.busy(quota=False, retry_after=None)
                    busy_keys += keys
                    exhausted = False
                    if unexpected >= 5:
                        progress.down = f"the channel's client failed {unexpected} times: {type(err).__name__}"
                    continue
                progress.requests += 1
                unexpected = 0
                pacer.ok()
                by_cid = {o.key: o for o in outcomes}
                for op, key in zip(unit.ops, unit.keys, strict=True):
                    found = by_cid.get(op.key) or Outcome(op.key, False, "no_answer", "no answer", retry=True)
                    outcome = replace(found, key=key)  # the channel names the item by its channel id
                    if outcome.retry and not outcome.ok and attempts.get(key, 0) < settings.sync_max_attempts:
                        again.append(key)
                        exhausted = False
                    else:
                        answers.append(outcome)
                        if not outcome.ok and len(progress.errors) < MAX_ERRORS:
                            shown = op.key if key.startswith(RETIRED) else key  # an id no item uses: by that id
                            progress.errors.append({"key": shown, "code": outcome.code, "message": outcome.message})
                        if outcome.ok and outcome.left_out:
                            progress.left_out += 1
                            for attribute, why in outcome.left_out[: MAX_ERRORS - len(progress.warnings)]:
                                progress.warnings.append({"key": key, "attribute": attribute, "message": why})
            due = time.monotonic() - last_flush >= FLUSH_S or not inflight
            if (answers or busy_keys or again) and due:
                ledger.answer(answers, progress.tally)
                ledger.requeue(busy_keys, uncount=True)
                ledger.requeue(again, uncount=False)
                conn.commit()
                if busy_keys or again:
                    exhausted = False  # pending again: claimed once the pacer lets them go
                answers, busy_keys, again = [], [], []
                last_flush = time.monotonic()


def _columns(conn: Any, ledger: Ledger) -> list[str]:
    cur = conn.cursor()
    cur.execute("SELECT columns FROM sync_state WHERE project_id = %(p)s AND export_name = %(e)s", _state_key(ledger))
    row = cur.fetchone()
    return list(row[0]) if row else []


def _state_key(ledger: Ledger) -> dict[str, str]:
    return {"p": ledger.project, "e": ledger.export}


def _status_due(conn: Any, target: SyncTarget, settings: Settings, forced: bool | None) -> bool:
    if forced is not None:
        return forced
    cur = conn.cursor()
    cur.execute(_query("state_get"), {"project": target.project, "export": target.export})
    row = cur.fetchone()
    listed = row[6] if row else None
    if listed is None:
        return True
    return (datetime.now(UTC) - listed).total_seconds() >= settings.sync_status_every_s


def _issue_doc(item: RemoteItem) -> list[dict[str, str]]:
    return [
        {"code": i.code, "severity": i.severity, "attribute": i.attribute, "message": i.message} for i in item.issues
    ]


def _listed(client: ChannelClient, stop_at: float) -> Iterator[RemoteItem]:
    """The channel's items, until the sync's time is up: a listing that never ends (a catalog too large to list
    in FIREFEED_SYNC_MAX_S, a channel that hands out page tokens forever) is ChannelBusy, not a worker held."""
    for n, item in enumerate(client.list_items()):
        if time.monotonic() >= stop_at:
            raise ChannelBusy(f"the channel's listing did not finish within the sync's time ({n:,} items listed)")
        yield item


def _list_status(
    conn: Any, ledger: Ledger, client: ChannelClient, target: SyncTarget, stop_at: float
) -> dict[str, Any]:
    """List the channel's items, store each one's issues in the ledger, and sum them up ("google says")."""
    cur = conn.cursor()
    cur.execute("SELECT now()")
    since = cur.fetchone()[0]
    batch: list[tuple[str, list[dict[str, str]]]] = []
    for item in _listed(client, stop_at):
        batch.append((item.key, _issue_doc(item)))
        if len(batch) >= 1000:
            ledger.store_issues(batch)
            batch = []
    ledger.store_issues(batch)
    ledger.clear_unlisted_issues(since)
    summary = ledger.issue_summary()
    cur.execute(
        _query("state_listed"),
        {"project": target.project, "export": target.export, "issues": json.dumps(summary)},
    )
    conn.commit()
    return summary


def _statuses(
    conn: Any, ledger: Ledger, client: ChannelClient, target: SyncTarget, stop_at: float
) -> dict[str, Any] | None:
    """The statuses after a sync: a channel that cannot be listed now keeps the last listing (the sends stand)."""
    try:
        return _list_status(conn, ledger, client, target, stop_at)
    except (ChannelDown, ChannelBusy) as err:
        conn.rollback()
        log.warning("could not list the channel's statuses of %s: %s", target.export, err.message)
        return None


def _stored_issues(conn: Any, target: SyncTarget) -> dict[str, Any] | None:
    cur = conn.cursor()
    cur.execute(_query("state_get"), {"project": target.project, "export": target.export})
    row = cur.fetchone()
    return row[7] if row else None


# -- repair -------------------------------------------------------------------------------------
def _repair_plan(
    conn: Any, ledger: Ledger, client: ChannelClient, target: SyncTarget, delete_orphans: bool, stop_at: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """List the channel; every item it lacks or holds otherwise becomes a pending insert, orphans deletes
    (with `delete_orphans`, else only listed)."""
    ledger.repair_begin()
    columns = list(target.columns)
    page: list[RemoteItem] = []
    lock = threading.Lock()

    # A client that maps values (a price to an amount and back) says how the channel would echo an item.
    # (Its method, or its module's function: the Google client has `comparable` beside its class.)
    comparable = getattr(client, "comparable", None) or getattr(
        sys.modules.get(type(client).__module__), "comparable", None
    )

    def flush() -> None:
        ours = ledger.payloads([i.key for i in page])
        same = []
        for i in page:
            if i.key not in ours:
                same.append(False)
                continue
            item = dict(zip(columns, ours[i.key], strict=False))
            column = differing(comparable(item) if comparable is not None else item, i.item)
            if column is not None:
                log.info("repair: the channel's %s differs in %s", i.key, column)
            same.append(column is None)
        ledger.repair_add([i.key for i in page], same)
        page.clear()

    def on_item(item: RemoteItem) -> None:
        with lock:
            page.append(item)
            if len(page) >= 500:
                flush()

    # The listing stores the issues too (one pass over the channel); its commit keeps the temp table.
    cur = conn.cursor()
    cur.execute("SELECT now()")
    since = cur.fetchone()[0]
    batch: list[tuple[str, list[dict[str, str]]]] = []
    for item in _listed(client, stop_at):
        batch.append((item.key, _issue_doc(item)))
        on_item(item)
        if len(batch) >= 1000:
            ledger.store_issues(batch)
            batch = []
    ledger.store_issues(batch)
    flush()
    ledger.clear_unlisted_issues(since)
    found = ledger.repair_plan(delete_orphans=delete_orphans)
    summary = ledger.issue_summary()
    cur.execute(
        _query("state_listed"),
        {"project": target.project, "export": target.export, "issues": json.dumps(summary)},
    )
    conn.commit()
    found["orphans_deleted"] = delete_orphans
    return found, summary


def _norm(value: Any) -> Any:
    """A value as compared by repair: text trimmed and case-folded, numbers as numbers, lists element-wise."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        parts = [_norm(v) for v in value if _norm(v) != ""]
        return tuple(parts) if len(parts) != 1 else parts[0]
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return float(value)
    text = " ".join(str(value).split()).casefold()
    words = []
    for word in text.split(" "):
        try:
            words.append(float(word))
        except ValueError:
            words.append(word)  # type: ignore[arg-type]
    return tuple(words) if len(words) != 1 else words[0]


def differing(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """The first column where the channel's copy says otherwise than the export, or None.

    A column the channel does not echo (or the client cannot map) is not compared: only a difference the
    channel shows can be a change made behind FireFeed's back.
    """
    for name, value in theirs.items():
        if name in ours and _norm(ours[name]) != _norm(value):
            return name
    return None


def same_item(ours: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether the channel's copy says what the export says, for every column the client could map back."""
    return differing(ours, theirs) is None
