"""`firefeed sync status|repair` and their API routes (SPEC 10 C10): what a ledger holds, and a repair.

Both read the export as its last published run wrote it: that run's spec (the sync settings and the
columns of its payloads) and the published table its sync jobs send from. A project of another company
is unknown (NotFoundError), as everywhere in the API.

status: per export with `sync`, the ledger's counts, the first failed items with the channel's code
and message, the items on the channel without an optional attribute FireFeed could not read (and why),
the channel's issues ("google says") as last listed, and the last sync's outcome and time; `refresh`
lists the channel first (its statuses only: nothing is sent).

repair: lists what the channel holds, compares it with the export's items (a changed item, a missing
one, an orphan the export no longer has), and sends what differs; orphans are deleted only when asked
(`delete_orphans`), else listed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

from firefeed.config import Settings
from firefeed.db.engine import raw_connection
from firefeed.errors import NotFoundError
from firefeed.runs.contract import JobKind, SyncParams
from firefeed.spec.model import ExportSpec, ProjectSpec
from firefeed.sync.ledger import Ledger, _query


@dataclass(frozen=True)
class Published:
    """An export with sync as the project's last published run has it."""

    run_id: str
    spec: ProjectSpec
    spec_dir: Path | None
    export: ExportSpec
    columns: list[str]


def _published(engine: Engine, project: str, company: str | None) -> tuple[str, ProjectSpec, Path | None]:
    from firefeed.deliveries.store import last_published_run
    from firefeed.pipeline.context import load_context
    from firefeed.runs.service import RunStore

    RunStore(engine).project(project, company=company)  # another company's project is unknown
    run_id = last_published_run(engine, project)
    if run_id is None:
        raise NotFoundError(f"project {project!r} has no published run")
    ctx = load_context(run_id, engine=engine)
    return run_id, ctx.spec, ctx.spec_dir


def synced_exports(
    engine: Engine, project: str, export: str | None = None, *, company: str | None = None
) -> list[Published]:
    """The exports with `sync` of the project's last published run (only `export`, when named)."""
    from firefeed.sync.jobs import export_columns

    run_id, spec, spec_dir = _published(engine, project, company)
    if export is not None and export not in [e.name for e in spec.exports]:
        raise NotFoundError(f"project {project!r} has no export {export!r}")
    fields = _run_fields(engine, run_id)
    found = []
    for i, e in enumerate(spec.exports):
        if e.sync is None or (export is not None and e.name != export):
            continue
        found.append(Published(run_id, spec, spec_dir, e, export_columns(e, fields.get(i, []))))
    if export is not None and not found:
        raise NotFoundError(f"export {export!r} of project {project!r} has no sync in its last published run")
    return found


def _run_fields(engine: Engine, run_id: str) -> dict[int, list[str]]:
    """Each synced export's fields, from the run's sync jobs' params."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT params FROM pipeline_jobs WHERE run_id = CAST(:r AS uuid) AND kind = :k"),
            {"r": run_id, "k": JobKind.SYNC.value},
        ).all()
    found = {}
    for row in rows:
        params = SyncParams.from_json(row.params)
        found[params.export] = params.fields
    return found


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def export_status(engine: Engine, item: Published) -> dict[str, Any]:
    """One export's sync status, as `firefeed sync status` prints it and GET .../sync answers it."""
    assert item.export.sync is not None
    spec = item.spec
    with raw_connection(engine) as conn:
        cur = conn.cursor()
        cur.execute(_query("state_get"), {"project": spec.project, "export": item.export.name})
        state = cur.fetchone()
        ledger = Ledger(conn, spec.company, spec.project, item.export.name)
        exists = ledger.exists()
        counts = ledger.counts() if exists else {}
        errors = ledger.failed_rows(20) if exists else []
        left_out = ledger.left_out_count() if exists else 0
        warnings = ledger.left_out_rows(20) if exists else []
        samples = ledger.issue_samples(20) if exists else []
    inserts, deletes = counts.get("insert", {}), counts.get("delete", {})
    return {
        "export": item.export.name,
        "to": item.export.sync.to,
        "items": inserts.get("acked", 0),
        "pending": sum(by.get("pending", 0) + by.get("sending", 0) for by in (inserts, deletes)),
        "failed": inserts.get("failed", 0) + deletes.get("failed", 0),
        "counts": counts,
        "errors": [{"key": e["key"], "code": e["code"], "message": e["message"]} for e in errors],
        # items on the channel without an optional attribute FireFeed could not read, the first named with why
        "left_out": left_out,
        "warnings": warnings,
        "channel_issues": state[7] if state else None,
        "channel_issue_items": samples,
        "listed_at": _iso(state[6]) if state else None,
        "last_sync_at": _iso(state[4]) if state else None,
        "last_sync": _last(state[5]) if state else None,
        # Orphans on the channel as the last repair found them (a repair lists the channel; a sync does not).
        "orphans": ((state[5] or {}).get("repair") or {}).get("orphans") if state else None,
    }


def _last(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if not doc:
        return None
    keep = ("inserted", "updated", "deleted", "failed", "pending", "left_out", "error", "seconds")
    return {k: doc[k] for k in keep if k in doc}


def status(
    project: str,
    export: str | None = None,
    *,
    settings: Settings,
    engine: Engine,
    company: str | None = None,
    refresh: bool = False,
) -> list[dict[str, Any]]:
    """Each synced export's status; `refresh` lists the channel's items and their issues first."""
    found = synced_exports(engine, project, export, company=company)
    out = []
    for item in found:
        refreshed: str | None = None
        if refresh:
            refreshed = _refresh(item, settings=settings, engine=engine)
        doc = export_status(engine, item)
        if refreshed is not None:
            doc["refresh_error"] = refreshed
        out.append(doc)
    return out


def _refresh(item: Published, *, settings: Settings, engine: Engine) -> str | None:
    """List the channel's statuses into the ledger; the reason when the channel could not be listed."""
    from firefeed.secrets.store import resolver_for
    from firefeed.sync.channel import ChannelBusy, ChannelDown
    from firefeed.sync.clients import client_for
    from firefeed.sync.engine import _account_lock, _begin, _list_status, _lock_keys
    from firefeed.sync.jobs import target_of

    assert item.export.sync is not None
    target = target_of(item.spec, item.export, item.columns, None)
    with raw_connection(engine) as conn, _account_lock(conn, _lock_keys(target), time.monotonic()) as locked:
        # A sync of the account or the export is running (its statuses come with it): the listing would spend
        # the same quota, and `_begin` may not start the export's ledger anew under it.
        if not locked:
            return "a sync of this export or its account is running: its statuses come with it"
        references = resolver_for(item.spec.company, item.spec_dir, settings=settings, engine=engine)
        try:
            client = client_for(item.export.sync, references, settings)
        except ChannelDown as err:
            return references.mask(err.message)
        try:
            ledger = Ledger(conn, item.spec.company, item.spec.project, item.export.name)
            _begin(conn, ledger, target, engine)
            _list_status(conn, ledger, client, target, time.monotonic() + settings.sync_max_s)
        except (ChannelDown, ChannelBusy) as err:
            conn.rollback()
            return references.mask(err.message)
        finally:
            client.close()
    return None


def repair(
    project: str,
    export: str,
    *,
    delete_orphans: bool,
    settings: Settings,
    engine: Engine,
    company: str | None = None,
    wait: bool = True,
) -> dict[str, Any]:
    """List the channel, compare, and send what differs (orphans deleted only with `delete_orphans`).

    `wait`: wait (up to a minute) for a sync of the account or export that is running; the API does not (a
    route's thread must not sit waiting: a company's few dozen calls would hold all of them), it answers with
    the sync's `error` saying another sync runs."""
    from firefeed.sync.jobs import run_sync

    (item,) = synced_exports(engine, project, export, company=company)
    assert item.export.sync is not None
    result, found = run_sync(
        item.spec,
        item.spec_dir,
        item.export,
        item.columns,
        settings=settings,
        engine=engine,
        repair=True,
        delete_orphans=delete_orphans,
        lock_wait_s=None if wait else 0.0,
    )
    found = found or {}
    return {
        "export": item.export.name,
        "to": item.export.sync.to,
        "missing": found.get("missing", 0),
        "different": found.get("different", 0),
        "resent": found.get("resent", 0),
        "orphans": found.get("orphans", 0),
        "orphan_keys": found.get("orphan_keys", []),
        "orphans_deleted": bool(found.get("orphans_deleted", False)),
        "sync": result.report(),
    }


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str)
