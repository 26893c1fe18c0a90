"""Step jobs in the control plane: create, claim (one claimer wins), heartbeat, finish, watch.

Every statement is a named block of queries.sql. Plain psycopg2, no ORM: a run
of a million items makes hundreds of chunk jobs, and the watch loop reads their
statuses many times a second; a session and row loading cost more than the
statements themselves. Rows come back as typed JobStates (firefeed/runs/contract.py).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from firefeed.db.engine import get_engine, raw_connection
from firefeed.errors import JobLostError
from firefeed.runs.contract import JobKind, JobSpec, JobState, JobStatus
from firefeed.runs.statements import HeldConnection, query, run_statement

__all__ = ["JobStore", "worker_id"]


def worker_id() -> str:
    """host:pid of this process (computed per call: prefork children have their own pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _json(doc: dict[str, Any] | None) -> str | None:
    return None if doc is None else json.dumps(doc)


def _state(row: Any) -> JobState:
    return JobState(
        id=int(row.id),
        run_id=str(row.run_id),
        kind=JobKind(row.kind),
        idx=int(row.idx),
        pass_no=int(row.pass_no),
        status=JobStatus(row.status),
        params=row.params,
        result=row.result,
        error=row.error,
        claimed_at=row.claimed_at,
        heartbeat_at=row.heartbeat_at,
        created_at=row.created_at,
        attempts=int(row.attempts),
    )


class JobStore:
    """The job rows of runs; one short transaction per call (or the caller's, where a call takes `conn`).

    With `held` (the run driver's connection), the calls that go through `_rows` use it
    (firefeed/runs/statements.py says why).
    """

    def __init__(self, engine: Engine | None = None, held: HeldConnection | None = None) -> None:
        self.engine = engine or get_engine()
        self.held = held

    def _rows(self, name: str, params: dict[str, Any]) -> list[Any]:
        return run_statement(self.engine, self.held, name, params)

    def _rowcount(self, name: str, params: dict[str, Any], conn: Any = None) -> int:
        if conn is not None:
            with conn.cursor() as cur:
                cur.execute(query(name), params)
                return int(cur.rowcount)
        with raw_connection(self.engine) as own, own.cursor() as cur:
            cur.execute(query(name), params)
            return int(cur.rowcount)

    def create(self, run_id: str, jobs: Sequence[JobSpec]) -> list[int]:
        """Create the jobs (idempotent per run/kind/pass/idx) and return their ids in order."""
        if not jobs:
            return []
        rows = self._rows(
            "create_jobs",
            {
                "run_id": str(run_id),
                "steps": [j.step.value for j in jobs],
                "kinds": [j.kind.value for j in jobs],
                "idxs": [j.idx for j in jobs],
                "pass_nos": [j.pass_no for j in jobs],
                "params": [_json(j.params.to_json()) if j.params is not None else None for j in jobs],
            },
        )
        by_place = {(r.kind, r.pass_no, r.idx): int(r.id) for r in rows}
        return [by_place[(j.kind.value, j.pass_no, j.idx)] for j in jobs]

    def get(self, job_id: int) -> JobState | None:
        rows = self._rows("get_job", {"id": job_id})
        return _state(rows[0]) if rows else None

    def states(self, job_ids: Sequence[int]) -> list[JobState]:
        """The jobs, in the order of `job_ids`."""
        by_id = {int(r.id): _state(r) for r in self._rows("job_states", {"ids": list(job_ids)})}
        return [by_id[i] for i in job_ids]

    def claim(self, job_id: int, *, lease_s: float) -> JobState | None:
        """PENDING -> RUNNING, or take over a RUNNING job whose claimer stopped beating; None if not ours.

        A taken-over job comes back with `attempts` > 1 (only a claim counts one)."""
        rows = self._rows("claim_job", {"id": job_id, "claimed_by": worker_id(), "lease_s": lease_s})
        return _state(rows[0]) if rows else None

    def heartbeat(self, job_id: int) -> None:
        self._rowcount("heartbeat_job", {"id": job_id})

    def save_partial(self, job_id: int, result: dict[str, Any]) -> None:
        self._rowcount("save_partial", {"id": job_id, "result": _json(result)})

    def succeed(self, job_id: int, result: dict[str, Any], conn: Any = None) -> None:
        """Mark done, only while this worker still holds the job; with `conn` inside the caller's transaction.

        JobLostError when another worker took the job over: the caller's transaction must roll back,
        so a chunk is never written twice.
        """
        params = {"id": job_id, "result": _json(result), "claimed_by": worker_id()}
        if self._rowcount("succeed_job", params, conn) != 1:
            raise JobLostError(f"job {job_id} is no longer held by {worker_id()}")

    def fail(self, job_id: int, error: dict[str, Any]) -> None:
        """Record a job's failure, only while this worker holds it (a worker that lost its claim fails after
        the job was taken over: that must not fail the new attempt, nor turn its SUCCEEDED into FAILED)."""
        self._rowcount("fail_job", {"id": job_id, "error": _json(error), "claimed_by": worker_id()})

    def cancel(self, job_id: int) -> None:
        self._rowcount("cancel_job", {"id": job_id})

    def cancel_pending(self, run_id: str) -> list[int]:
        """Mark a run's queued jobs CANCELLED so a worker that gets one later skips it."""
        return [int(r.id) for r in self._rows("cancel_pending", {"run_id": str(run_id)})]

    def status_counts(self, job_ids: Sequence[int]) -> dict[JobStatus, int]:
        """How many of the jobs are in each status (one small query, whatever their number)."""
        return {JobStatus(r.status): int(r.n) for r in self._rows("status_counts", {"ids": list(job_ids)})}

    def stale_running(self, job_ids: Sequence[int], lease_s: float) -> list[int]:
        """Jobs RUNNING whose claimer stopped beating for longer than the lease (its worker died)."""
        return [int(r.id) for r in self._rows("stale_running", {"ids": list(job_ids), "lease_s": lease_s})]

    def cancel_requested(self, run_id: str) -> bool:
        """Whether a cancel of the run was recorded."""
        rows = self._rows("cancel_requested", {"run_id": str(run_id)})
        return bool(rows and rows[0].cancel_requested)

    def running_count(self, run_id: str) -> int:
        return int(self._rows("running_count", {"run_id": str(run_id)})[0].n)
