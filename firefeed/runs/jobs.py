"""Step jobs in the control plane: create, claim (one claimer wins), heartbeat, finish, watch."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2.extras import NamedTupleCursor
from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import PipelineJob
from firefeed.runs.service import now


def worker_id() -> str:
    """host:pid of this process (computed per call: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class JobLostError(Exception):
    """The job was taken over by another worker (its lease ran out); this worker's work must not count."""


@dataclass(frozen=True)
class JobSpec:
    step: str
    kind: str
    idx: int = 0
    pass_no: int = 0
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class JobState:
    id: int
    kind: str
    idx: int
    pass_no: int
    status: str
    params: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    claimed_at: Any
    heartbeat_at: Any
    created_at: Any
    run_id: str


def _state(row: Any) -> JobState:
    """From a PipelineJob or a row of the same columns."""
    return JobState(
        row.id,
        row.kind,
        row.idx,
        row.pass_no,
        row.status,
        row.params,
        row.result,
        row.error,
        row.claimed_at,
        row.heartbeat_at,
        row.created_at,
        str(row.run_id),
    )


class JobStore:
    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine or get_engine()
        self.sessions = session_factory(self.engine)

    def create(self, run_id: str, jobs: Sequence[JobSpec]) -> list[int]:
        """Create the jobs (idempotent per run/kind/pass/idx) and return their ids in order."""
        ids: list[int] = []
        with self.sessions() as s, s.begin():
            for j in jobs:
                row = s.execute(
                    pg_insert(PipelineJob)
                    .values(
                        run_id=uuid.UUID(run_id),
                        step=j.step,
                        kind=j.kind,
                        idx=j.idx,
                        pass_no=j.pass_no,
                        params=j.params,
                        status="PENDING",
                    )
                    .on_conflict_do_update(
                        index_elements=["run_id", "kind", "pass_no", "idx"], set_={"params": j.params}
                    )
                    .returning(PipelineJob.id)
                ).scalar_one()
                ids.append(int(row))
        return ids

    def get(self, job_id: int) -> JobState | None:
        with self.sessions() as s:
            row = s.get(PipelineJob, job_id)
            return _state(row) if row else None

    def claim(self, job_id: int, *, lease_s: float) -> JobState | None:
        """PENDING -> RUNNING, or take over a RUNNING job whose claimer stopped beating; None if not ours.

        Plain SQL: a rules worker claims hundreds of chunk jobs a run, and the ORM's
        session and row loading cost more than the UPDATE itself.
        """
        from firefeed.db.engine import raw_connection

        with raw_connection(self.engine) as conn, conn.cursor(cursor_factory=NamedTupleCursor) as cur:
            cur.execute(
                "UPDATE pipeline_jobs SET status = 'RUNNING', claimed_by = %s, claimed_at = now(),"
                " heartbeat_at = now(), attempts = attempts + 1"
                " WHERE id = %s AND (status = 'PENDING'"
                " OR (status = 'RUNNING' AND heartbeat_at < now() - make_interval(secs => %s)))"
                " RETURNING id, kind, idx, pass_no, status, params, result, error, claimed_at, heartbeat_at,"
                " created_at, run_id",
                (worker_id(), job_id, lease_s),
            )
            row = cur.fetchone()
        return None if row is None else _state(row)

    def heartbeat(self, job_id: int) -> None:
        with self.sessions() as s, s.begin():
            s.execute(update(PipelineJob).where(PipelineJob.id == job_id).values(heartbeat_at=now()))

    def save_partial(self, job_id: int, result: dict[str, Any]) -> None:
        with self.sessions() as s, s.begin():
            s.execute(update(PipelineJob).where(PipelineJob.id == job_id).values(result=result, heartbeat_at=now()))

    def succeed(self, job_id: int, result: dict[str, Any], conn: Any = None) -> None:
        """Mark done, only while this worker still holds the job; with `conn` inside the caller's transaction.

        JobLostError when another worker took the job over: the caller's transaction must roll back,
        so a chunk is never written twice.
        """
        import json

        statement = (
            "UPDATE pipeline_jobs SET status = 'SUCCEEDED', result = %s::jsonb, finished_at = now() "
            "WHERE id = %s AND status = 'RUNNING' AND claimed_by = %s"
        )
        params = (json.dumps(result), job_id, worker_id())
        if conn is not None:
            with conn.cursor() as cur:
                cur.execute(statement, params)
                if cur.rowcount != 1:
                    raise JobLostError(f"job {job_id} is no longer held by {worker_id()}")
            return
        from firefeed.db.engine import raw_connection

        with raw_connection(self.engine) as own, own.cursor() as cur:
            cur.execute(statement, params)
            if cur.rowcount != 1:
                raise JobLostError(f"job {job_id} is no longer held by {worker_id()}")

    def stale_running(self, job_ids: Sequence[int], lease_s: float) -> list[int]:
        """Jobs RUNNING whose claimer stopped beating for longer than the lease (its worker died)."""
        with self.sessions() as s:
            rows = (
                s.execute(
                    select(PipelineJob.id).where(
                        PipelineJob.id.in_(list(job_ids)),
                        PipelineJob.status == "RUNNING",
                        PipelineJob.heartbeat_at < text("now() - make_interval(secs => :lease)"),
                    ),
                    {"lease": lease_s},
                )
                .scalars()
                .all()
            )
        return [int(r) for r in rows]

    def running_count(self, run_id: str) -> int:
        with self.sessions() as s:
            from sqlalchemy import func

            return int(
                s.execute(
                    select(func.count()).where(PipelineJob.run_id == uuid.UUID(run_id), PipelineJob.status == "RUNNING")
                ).scalar_one()
            )

    def fail(self, job_id: int, error: dict[str, Any]) -> None:
        """Record a job's failure, unless it already ended (a worker that lost its claim fails after the
        job was taken over and done: that must not turn a SUCCEEDED job into a FAILED one)."""
        with self.sessions() as s, s.begin():
            s.execute(
                update(PipelineJob)
                .where(PipelineJob.id == job_id, PipelineJob.status.in_(("PENDING", "RUNNING")))
                .values(status="FAILED", error=error, finished_at=now())
            )

    def status_counts(self, job_ids: Sequence[int]) -> dict[str, int]:
        """How many of the jobs are in each status (one small query, whatever their number)."""
        from sqlalchemy import func

        with self.sessions() as s:
            rows = s.execute(
                select(PipelineJob.status, func.count())
                .where(PipelineJob.id.in_(list(job_ids)))
                .group_by(PipelineJob.status)
            ).all()
        return {str(status): int(n) for status, n in rows}

    def cancel(self, job_id: int) -> None:
        with self.sessions() as s, s.begin():
            s.execute(update(PipelineJob).where(PipelineJob.id == job_id).values(status="CANCELLED", finished_at=now()))

    def states(self, job_ids: Sequence[int]) -> list[JobState]:
        with self.sessions() as s:
            rows = s.scalars(select(PipelineJob).where(PipelineJob.id.in_(list(job_ids)))).all()
        by_id = {r.id: _state(r) for r in rows}
        return [by_id[i] for i in job_ids]

    def cancel_pending(self, run_id: str) -> list[int]:
        """Mark a run's queued jobs CANCELLED so a worker that gets one later skips it."""
        with self.sessions() as s, s.begin():
            rows = (
                s.execute(
                    update(PipelineJob)
                    .where(PipelineJob.run_id == uuid.UUID(run_id), PipelineJob.status == "PENDING")
                    .values(status="CANCELLED", finished_at=now())
                    .returning(PipelineJob.id)
                )
                .scalars()
                .all()
            )
        return [int(r) for r in rows]
