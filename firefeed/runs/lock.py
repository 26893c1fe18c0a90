"""The per-project advisory lock that makes one project never run twice at once (SPEC section 1).

Inside one transaction: `pg_try_advisory_xact_lock(key)` (never waits), then
"is a run PENDING or RUNNING?", then create the run. The lock is transaction
scoped, so commit and rollback release it: there is no manual unlock anywhere.
A partial unique index on pipeline_runs is the second guard.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from firefeed.db.models import PipelineRun
from firefeed.errors import PipelineBusyError

T = TypeVar("T")
ACTIVE = ("PENDING", "RUNNING")
# A request that lost the lock race looks for the winner's run id for at most this long:
# the winner commits within milliseconds, and a 409 should name the run it lost to.
_BUSY_LOOKUP_S = 0.2


def project_lock_key(project_id: str) -> int:
    """First 8 bytes of SHA-256(project id), big-endian, as a signed int64."""
    return int.from_bytes(hashlib.sha256(project_id.encode("utf-8")).digest()[:8], "big", signed=True)


def active_run_id(session: Session, project_id: str) -> str | None:
    run_id = session.execute(
        select(PipelineRun.id).where(PipelineRun.project_id == project_id, PipelineRun.status.in_(ACTIVE))
    ).scalar()
    return str(run_id) if run_id is not None else None


def _winner(session_factory: Callable[[], Session], project_id: str) -> str | None:
    deadline = time.monotonic() + _BUSY_LOOKUP_S
    while True:
        with session_factory() as s:
            found = active_run_id(s, project_id)
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.005)


def with_project_pipeline_lock(
    session: Session,
    project_id: str,
    fn: Callable[[Session], T],
    *,
    session_factory: Callable[[], Session] | None = None,
) -> T:
    """Run `fn` under the project's lock in the session's transaction; PipelineBusyError when busy.

    The caller commits (which releases the lock) or rolls back.
    """
    got = session.execute(select(func.pg_try_advisory_xact_lock(project_lock_key(project_id)))).scalar()
    if not got:
        session.rollback()
        winner = _winner(session_factory, project_id) if session_factory else None
        raise PipelineBusyError(project_id, winner)
    active = active_run_id(session, project_id)
    if active is not None:
        session.rollback()
        raise PipelineBusyError(project_id, active)
    return fn(session)
