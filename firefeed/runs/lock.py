"""The per-project advisory lock that makes one project never run twice at once (SPEC section 1).

Inside one transaction: `pg_try_advisory_xact_lock(key)` (never waits), then
"is a run PENDING or RUNNING?", then create the run. The lock is transaction
scoped, so commit and rollback release it: there is no manual unlock anywhere.
A partial unique index on pipeline_runs is the second guard.

A run request reads its project first (`project_head`), and that same statement
already says whether a committed run is active: such a request is refused
without taking the lock at all. That is the common case under a burst (every
request after the winner's commit) and it costs one statement; the lock and
the check under it decide only when no run was seen.

The same statement says whether that run's heartbeat is older than the lease: such a
run lost its driver, and the request takes it over (runs/stale.py) instead of being
refused, then goes through the lock like any other.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import Connection, Interval, bindparam, func, literal, select
from sqlalchemy.orm import Session

from firefeed.db.models import PipelineRun, Project
from firefeed.errors import PipelineBusyError

T = TypeVar("T")
ACTIVE = ("PENDING", "RUNNING")
# A request that lost the lock race looks for the winner's run id for at most this long:
# the winner commits within milliseconds, and a 409 should name the run it lost to.
_BUSY_LOOKUP_S = 0.2
# The first looks come quickly (the winner is usually committing right now), later ones back off.
_BUSY_POLL_S = (0.001, 0.002, 0.005)

Db = Session | Connection
"""Both run the lock's statements; the run request uses a bare Connection (no ORM on its hot path)."""

# The statuses as plain bound values, not an "expanding" IN list SQLAlchemy re-renders on every execution.
_ACTIVE_RUN = (
    select(PipelineRun.id)
    .where(PipelineRun.project_id == bindparam("project_id"), PipelineRun.status.in_([literal(s) for s in ACTIVE]))
    .limit(1)
)
# The active run when it is RUNNING and its heartbeat is older than the lease: its driver is gone (runs/stale.py).
_STALE_RUN = (
    select(PipelineRun.id)
    .where(
        PipelineRun.project_id == bindparam("project_id"),
        PipelineRun.status == literal("RUNNING"),
        PipelineRun.heartbeat_at < func.now() - bindparam("lease", type_=Interval()),
    )
    .limit(1)
)
_HEAD = select(
    Project.company_id,
    Project.spec_version_id,
    _ACTIVE_RUN.scalar_subquery().label("active_run_id"),
    _STALE_RUN.scalar_subquery().label("stale_run_id"),
).where(Project.id == bindparam("project_id"))


@dataclass(frozen=True)
class ProjectHead:
    """What a run request needs of its project: owner, current spec version, the active run if any, and that
    run again when its driver stopped beating for longer than the lease (it is taken over, not waited for)."""

    company_id: str
    spec_version_id: int | None
    active_run_id: str | None
    stale_run_id: str | None = None


def project_lock_key(project_id: str) -> int:
    """First 8 bytes of SHA-256(project id), big-endian, as a signed int64."""
    return int.from_bytes(hashlib.sha256(project_id.encode("utf-8")).digest()[:8], "big", signed=True)


def project_head(conn: Connection, project_id: str, *, lease_s: float) -> ProjectHead | None:
    """The project's owner, spec version and committed active run (stale: without a heartbeat for
    `lease_s`), in one statement; None when unknown.

    The statement runs outside any transaction: a refusal then costs one round trip, not a BEGIN, the
    query and a ROLLBACK. The connection is transactional again afterwards, ready for the lock. The
    driver's own `autocommit` switch is used, which is client-side only: SQLAlchemy's isolation_level
    option would send `SET default_transaction_isolation` to the server on each switch and back.
    """
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    dbapi.autocommit = True
    try:
        row = conn.execute(_HEAD, {"project_id": project_id, "lease": timedelta(seconds=lease_s)}).one_or_none()
    finally:
        conn.rollback()  # ends SQLAlchemy's record of the statement; in autocommit nothing is sent
        dbapi.autocommit = False
    if row is None:
        return None
    active = str(row.active_run_id) if row.active_run_id is not None else None
    stale = str(row.stale_run_id) if row.stale_run_id is not None else None
    return ProjectHead(row.company_id, row.spec_version_id, active, stale)


def active_run_id(db: Db, project_id: str) -> str | None:
    run_id = db.execute(_ACTIVE_RUN, {"project_id": project_id}).scalar()
    return str(run_id) if run_id is not None else None


def _winner(db: Db, project_id: str) -> str | None:
    """The run of the request that holds the lock, once it is committed (None: nobody's within the bound).

    Each look is its own short transaction on the same connection, so it sees the winner's commit.
    """
    deadline = time.monotonic() + _BUSY_LOOKUP_S
    for pause in itertools.chain(_BUSY_POLL_S, itertools.repeat(_BUSY_POLL_S[-1])):
        found = active_run_id(db, project_id)
        db.rollback()
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the pauses never end


def with_project_pipeline_lock(
    db: Db,
    project_id: str,
    fn: Callable[[Db], T],
    *,
    session_factory: Callable[[], Session] | None = None,
    name_winner: bool = False,
) -> T:
    """Run `fn` under the project's lock in the transaction of `db`; PipelineBusyError when busy.

    The caller commits (which releases the lock) or rolls back. A refusal names the active run;
    when the lock was held by a request not yet committed, `name_winner` (or a `session_factory`,
    the older spelling) waits up to 0.2 s for that run to appear so the 409 can name it.
    """
    got = db.execute(select(func.pg_try_advisory_xact_lock(project_lock_key(project_id)))).scalar()
    if not got:
        db.rollback()
        winner: str | None = None
        if session_factory is not None:
            with session_factory() as s:
                winner = _winner(s, project_id)
        elif name_winner:
            winner = _winner(db, project_id)
        raise PipelineBusyError(project_id, winner)
    active = active_run_id(db, project_id)
    if active is not None:
        db.rollback()
        raise PipelineBusyError(project_id, active)
    return fn(db)
