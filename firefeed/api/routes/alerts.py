"""/api/projects/{id}/alerts: a project's recent alerts from the outbox (SPEC 10 C8, docs/alerts.md).

What `firefeed alerts PROJECT` lists, for the token's company alone (another company's project is 404
as an unknown one): each alert's event, when, the host it goes to, its status and attempts, and what
the last attempt got. Never the alert URL's path or query (a webhook URL often carries its own token
there), the body, the secret's name or value, or the signature.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from firefeed.alerts import outbox
from firefeed.alerts.shown import target_host, without_url
from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store

router = APIRouter(prefix="/api/projects", tags=["alerts"])

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
#: What an answer keeps of an attempt's error (the receiver's answer is at most 256 bytes of it already)
_ERROR_CHARS = 300


class AlertAttempt(BaseModel):
    at: str | None
    status_code: int | None
    """The receiver's HTTP status, or null when no answer came (`error` says why)."""
    error: str | None
    ms: int


class AlertView(BaseModel):
    id: int
    """The X-FireFeed-Delivery header the receiver got."""
    event: str
    run_id: str
    export: str | None
    target_host: str
    """The alert URL's host (and port when it names one): not its path, which may hold a token."""
    status: str
    """pending (to send, or retried after `next_attempt_at`), delivered, or failed (given up)."""
    attempts: int
    created_at: str
    last_attempt_at: str | None
    next_attempt_at: str | None
    """When a pending alert is tried next; null once it is delivered or failed."""
    last: AlertAttempt | None


class AlertList(BaseModel):
    project: str
    alerts: list[AlertView]


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _view(row: dict[str, Any]) -> AlertView:
    url, host = str(row["url"]), target_host(str(row["url"]))
    last: AlertAttempt | None = None
    if row["outcomes"]:
        o = row["outcomes"][-1]
        # An error may quote the URL it was sent to (a transport's message): only its host is shown.
        error = without_url(str(o["error"]), url)[:_ERROR_CHARS] if o.get("error") else None
        last = AlertAttempt(at=o.get("at"), status_code=o.get("status_code"), error=error, ms=int(o.get("ms") or 0))
    pending = row["status"] == outbox.AlertStatus.PENDING
    return AlertView(
        id=int(row["id"]),
        event=str(row["event"]),
        run_id=str(row["run_id"]),
        export=str(row["export"]) or None,
        target_host=host,
        status=str(row["status"]),
        attempts=int(row["attempts"]),
        created_at=str(_iso(row["created_at"])),
        last_attempt_at=_iso(row["last_attempt_at"]),
        next_attempt_at=_iso(row["next_attempt_at"]) if pending else None,
        last=last,
    )


@router.get(
    "/{project_id}/alerts",
    response_model=AlertList,
    responses={404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's)"}},
)
async def project_alerts(
    project_id: str,
    company: CurrentCompany,
    store: Store,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="at most this many alerts")] = DEFAULT_LIMIT,
) -> AlertList:
    """The project's latest alerts, newest first: event, when, target host, status, attempts, the last
    attempt's answer; the same rows as `firefeed alerts PROJECT`."""

    def read() -> list[dict[str, Any]]:
        store.project(project_id, company=company)  # another company's project: 404 as an unknown one
        return outbox.recent(store.engine, project_id, limit, company=company)

    rows = await run_in_threadpool(read)
    return AlertList(project=project_id, alerts=[_view(r) for r in rows])
