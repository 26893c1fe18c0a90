"""What becomes an alert: a run's end (failed, blocked, recovered) and a failed delivery (C7).

Both only record: the alert rows are inserted and committed, then a sender is asked (sender.kick),
so neither a run's end nor a delivery waits on a receiver. Recording never raises into its caller:
a run's status is worth more than its alert.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import Engine

from firefeed.alerts import outbox, sender
from firefeed.alerts.outbox import NewAlert
from firefeed.alerts.spec import BLOCKED_ERRORS, AlertEvent, AlertSpec
from firefeed.config import Settings, get_settings
from firefeed.db.engine import get_engine

log = logging.getLogger(__name__)


def run_event(status: str, error: dict[str, Any] | None, previous_status: str | None) -> AlertEvent | None:
    """The alert a run's end makes: FAILED is `blocked` when the drop guard or max_invalid stopped it, else
    `failed`; SUCCEEDED after a FAILED run (cancelled runs do not count) is `recovered`; anything else none."""
    if status == "FAILED":
        blocked = (error or {}).get("type") in BLOCKED_ERRORS
        return AlertEvent.BLOCKED if blocked else AlertEvent.FAILED
    if status == "SUCCEEDED" and previous_status == "FAILED":
        return AlertEvent.RECOVERED
    return None


def blocked_export(report: dict[str, Any]) -> str | None:
    """The first export the drop guard or max_invalid held back, from the RunReport's exports."""
    for entry in report.get("exports") or []:
        drop = ((entry.get("diff") or {}).get("drop") or {}).get("status")
        invalid = ((entry.get("diagnostics") or {}).get("max_invalid") or {}).get("status")
        if "blocked" in (drop, invalid):
            return str(entry.get("name"))
    return None


def record_run_end(
    run_id: str, report: dict[str, Any], *, settings: Settings | None = None, engine: Engine | None = None
) -> list[int]:
    """Record the alerts the run's end makes and have them sent; their ids. Never raises."""
    try:
        settings = settings or get_settings()
        engine = engine or get_engine()
        row = outbox.run_end(engine, run_id)
        if row is None:
            return []
        status, company, project, error, alerts, previous = row
        if not alerts:
            return []
        event = run_event(status, error, previous)
        if event is None:
            return []
        export = blocked_export(report) if event is AlertEvent.BLOCKED else None
        body = payload(event, company, project, run_id, status, error, export, settings)
        return _record_and_send(engine, settings, alerts, event, company, project, run_id, export, body)
    except Exception:
        log.warning("could not record the alerts of run %s's end", run_id, exc_info=True)
        return []


def record_delivery_failed(
    run_id: str,
    export: str,
    target: str,
    error: str,
    *,
    settings: Settings | None = None,
    engine: Engine | None = None,
) -> list[int]:
    """Record a `delivery_failed` alert for an export whose file did not reach `target` (a URL without
    credentials), and have it sent; their ids. For the delivery code of C7; never raises.

    One alert per run, export and alert URL: a delivery retried in the same run does not alert again.
    """
    detail = {"step": "DELIVER", "type": "DeliveryFailed", "message": error, "target": target}
    return _record_export_event(AlertEvent.DELIVERY_FAILED, run_id, export, detail, settings, engine)


def record_sync_failed(
    run_id: str, export: str, error: str, *, settings: Settings | None = None, engine: Engine | None = None
) -> list[int]:
    """Record a `sync_failed` alert for an export whose channel refused its sync (SPEC 10 C9-C10), and have it
    sent; their ids. Never raises; `error` never holds a secret (firefeed/sync masks it)."""
    detail = {"step": "SYNC", "type": "SyncFailed", "message": error}
    return _record_export_event(AlertEvent.SYNC_FAILED, run_id, export, detail, settings, engine)


def _record_export_event(
    event: AlertEvent,
    run_id: str,
    export: str,
    detail: dict[str, Any],
    settings: Settings | None,
    engine: Engine | None,
) -> list[int]:
    """One export's event of a run that goes on (delivery_failed, sync_failed): recorded and sent; never raises."""
    try:
        settings = settings or get_settings()
        engine = engine or get_engine()
        row = outbox.run_end(engine, run_id)
        if row is None:
            return []
        status, company, project, _error, alerts, _previous = row
        if not alerts:
            return []
        body = payload(event, company, project, run_id, status, detail, export, settings)
        return _record_and_send(engine, settings, alerts, event, company, project, run_id, export, body)
    except Exception:
        log.warning("could not record the %s alert of run %s", event.value, run_id, exc_info=True)
        return []


def _record_and_send(
    engine: Engine,
    settings: Settings,
    alerts: Any,
    event: AlertEvent,
    company: str,
    project: str,
    run_id: str,
    export: str | None,
    body: bytes,
) -> list[int]:
    """Put the event's alerts in the outbox, then have them sent; their ids."""
    ids = outbox.record(engine, _for(alerts, event, company, project, run_id, export, body))
    sender.kick(ids, project, settings=settings, engine=engine)
    return ids


def payload(
    event: AlertEvent,
    company: str,
    project: str,
    run_id: str,
    status: str,
    error: dict[str, Any] | None,
    export: str | None,
    settings: Settings,
) -> bytes:
    """The alert's body, the exact bytes that are signed and sent (compact JSON, keys in this order)."""
    base = (settings.public_url or "").rstrip("/")
    body = {
        "event": event.value,
        "company": company,
        "project": project,
        "run_id": run_id,
        "status": status,
        "error": error,
        "export": export,
        "links": {"run": f"{base}/api/runs/{run_id}", "project": f"{base}/api/projects/{project}"},
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _for(
    stored: Any, event: AlertEvent, company: str, project: str, run_id: str, export: str | None, body: bytes
) -> list[NewAlert]:
    """An outbox row for each of the spec's alerts that listens to `event`."""
    rows: list[NewAlert] = []
    for i, entry in enumerate(stored if isinstance(stored, list) else []):
        try:
            alert = AlertSpec.model_validate(entry)
        except ValidationError:
            log.warning("alerts[%d] of project %s is not a valid alert; skipped", i, project)
            continue
        if event in alert.on:
            rows.append(NewAlert(company, project, run_id, event.value, export or "", alert.url, alert.secret, body))
    return rows
