"""The alert_deliveries table: alerts recorded at a run's end, claimed one attempt at a time, each outcome kept.

The run's end only inserts (one statement, committed before anyone is asked to send); whoever sends
claims a due row with a lease, POSTs, then writes the outcome. A sender that dies mid-attempt leaves
the row pending until its lease passes, so another sends it: an alert may arrive twice (the receiver
dedupes on X-FireFeed-Delivery), never not at all within its retry time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.engine import Engine

from firefeed.db.engine import raw_connection
from firefeed.db.sqlfile import load_queries


class AlertStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


@dataclass(frozen=True)
class NewAlert:
    company: str
    project: str
    run_id: str
    event: str
    export: str
    url: str
    secret: str  # the company secret's name, never its value
    body: bytes


@dataclass(frozen=True)
class Claimed:
    id: int
    company: str
    project: str
    run_id: str
    event: str
    url: str
    secret: str
    body: bytes
    attempt: int


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: the answer's status code, or the error that stopped it (never a secret)."""

    status_code: int | None
    error: str | None
    ms: int

    def as_json(self, at: datetime | None = None) -> str:
        entry: dict[str, Any] = {"status_code": self.status_code, "error": self.error, "ms": self.ms}
        return json.dumps([{"at": at.isoformat() if at else None, **entry}])


def _q(name: str) -> str:
    return load_queries("firefeed.alerts")[name]


def _one(engine: Engine, name: str, params: dict[str, Any]) -> Any:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_q(name), params)
        return cur.fetchone() if cur.description else None


def run_end(engine: Engine, run_id: str) -> Any:
    """The run's status, company, project, error, its spec's `alerts` and the status of the run before it."""
    return _one(engine, "run_end", {"run_id": run_id})


def record(engine: Engine, alerts: list[NewAlert]) -> list[int]:
    """Insert the alerts in one transaction; the ids of those not recorded before."""
    ids: list[int] = []
    with raw_connection(engine) as conn, conn.cursor() as cur:
        for a in alerts:
            cur.execute(
                _q("record"),
                {
                    "company": a.company,
                    "project": a.project,
                    "run_id": a.run_id,
                    "event": a.event,
                    "export": a.export,
                    "url": a.url,
                    "secret": a.secret,
                    "body": a.body.decode("utf-8"),
                },
            )
            row = cur.fetchone()
            if row is not None:
                ids.append(int(row[0]))
    return ids


def claim(engine: Engine, alert_id: int, lease_s: float) -> Claimed | None:
    """The alert, taken for one attempt, when it is pending and due; else None."""
    row = _one(engine, "claim", {"id": alert_id, "lease_s": lease_s})
    if row is None:
        return None
    return Claimed(
        id=row[0],
        company=row[1],
        project=row[2],
        run_id=str(row[3]),
        event=row[4],
        url=row[5],
        secret=row[6],
        body=row[7].encode("utf-8"),
        attempt=row[8],
    )


def state(engine: Engine, alert_id: int) -> tuple[AlertStatus, float] | None:
    """The alert's status and the seconds until it is due (0 when due), or None for an unknown id."""
    row = _one(engine, "state", {"id": alert_id})
    return None if row is None else (AlertStatus(row[0]), max(0.0, float(row[1])))


def delivered(engine: Engine, alert_id: int, outcome: Outcome) -> None:
    _one(engine, "delivered", {"id": alert_id, "outcome": outcome.as_json(_now())})


def failed(engine: Engine, alert_id: int, outcome: Outcome) -> None:
    _one(engine, "failed", {"id": alert_id, "outcome": outcome.as_json(_now())})


def retry(engine: Engine, alert_id: int, outcome: Outcome, *, delay_s: float, retry_for_s: float) -> AlertStatus:
    """Schedule the next attempt after `delay_s`; FAILED when that would pass the alert's retry time."""
    row = _one(
        engine,
        "retry",
        {"id": alert_id, "outcome": outcome.as_json(_now()), "delay_s": delay_s, "retry_for_s": retry_for_s},
    )
    return AlertStatus(row[0]) if row is not None else AlertStatus.FAILED


def due(engine: Engine, *, project: str | None = None, limit: int = 500) -> list[int]:
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_q("due"), {"project": project, "limit": limit})
        return [int(r[0]) for r in cur.fetchall()]


def recent(engine: Engine, project: str, limit: int = 20, *, company: str | None = None) -> list[dict[str, Any]]:
    """A project's latest alerts, newest first, with every attempt's outcome; only `company`'s when named."""
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(_q("recent"), {"project": project, "limit": limit, "company": company})
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _now() -> datetime:
    return datetime.now(UTC)
