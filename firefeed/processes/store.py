"""A processes row's life cycle in the database: claim, heartbeat, finish, release, recover.

Every write after the claim is guarded by `claimed_by = me AND status = 'running'`,
so a worker that lost a row (its lease expired and a peer took it) can never
overwrite what the new holder writes.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg2.extras import Json
from sqlalchemy import Engine

from firefeed import metrics
from firefeed.db.engine import raw_connection
from firefeed.processes._sql import query


def worker_name() -> str:
    """`host:pid`, the `claimed_by` of this process's claims."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class UnreadableInput:
    """A row's input_data that Postgres stores but Python's JSON reader refuses; `reason` says why."""

    reason: str


def decode_input(text: str) -> Any:
    """The row's input_data as Python values, or UnreadableInput.

    JSONB holds numbers of any length and nesting thousands of levels deep; Python reads at most
    4,300 digits of an integer and recurses per level. Decoding where psycopg2 fetches the row
    raised inside the claim, which rolled it back: the row stayed pending and every claim of the
    scope failed on it again.
    """
    try:
        return json.loads(text)
    except RecursionError:
        return UnreadableInput("it is nested too deep to read")
    except ValueError:
        return UnreadableInput("it holds a number too long to read (more than 4,300 digits)")


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    function: str
    input_data: Any  # decode_input's value
    attempts: int


@dataclass(frozen=True)
class RecoveredRow:
    id: int
    status: str
    attempts: int
    lost_by: str | None


def _json(value: dict[str, Any] | None) -> Json | None:
    # default=str: a report never fails to be written over one odd value (a Decimal, a datetime).
    return None if value is None else Json(value, dumps=lambda v: json.dumps(v, default=str))


class ProcessStore:
    """The statements of queries.sql for one worker scope (worker_type, workspace_id) and claimer."""

    def __init__(self, engine: Engine, *, worker_type: str, workspace_id: str, claimed_by: str | None = None) -> None:
        self.engine = engine
        self.worker_type, self.workspace_id = worker_type, workspace_id
        self.claimed_by = claimed_by or worker_name()

    def _execute(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(query(name), params)
            return list(cur.fetchall()) if cur.description else []

    def table_exists(self) -> bool:
        return bool(self._execute("table_exists", {})[0][0])

    def claim(self) -> ClaimedRow | None:
        """The oldest pending row of the scope, now running and ours; None when there is none."""
        rows = self._execute(
            "claim_process",
            {"claimed_by": self.claimed_by, "worker_type": self.worker_type, "workspace_id": self.workspace_id},
        )
        if not rows:
            return None
        pid, function, text, attempts = rows[0]
        row = ClaimedRow(pid, function, decode_input(text), attempts)
        metrics.process_claimed(row.function)
        return row

    def heartbeat(self, ids: Sequence[int]) -> set[int]:
        """Renew the lease of `ids`; returns the ids still ours."""
        if not ids:
            return set()
        rows = self._execute("heartbeat_processes", {"ids": list(ids), "claimed_by": self.claimed_by})
        return {int(r[0]) for r in rows}

    def finish(self, process_id: int, *, ok: bool, output: dict[str, Any] | None, error_message: str | None) -> bool:
        """Write the outcome; False when the row was no longer ours (timed out, released or recovered)."""
        rows = self._execute(
            "finish_process",
            {
                "id": process_id,
                "claimed_by": self.claimed_by,
                "status": "completed" if ok else "failed",
                "output_data": _json(output),
                "error_message": error_message,
            },
        )
        if rows:
            metrics.process_finished("completed" if ok else "failed")
        return bool(rows)

    def release(self, ids: Sequence[int]) -> set[int]:
        """Hand `ids` back to pending; returns those that were still ours."""
        if not ids:
            return set()
        rows = self._execute("release_processes", {"ids": list(ids), "claimed_by": self.claimed_by})
        return {int(r[0]) for r in rows}

    def recover_stale(self, *, lease_s: float, max_attempts: int) -> list[RecoveredRow]:
        """Put the scope's orphaned running rows back to pending, or fail those out of attempts."""
        rows = self._execute(
            "recover_stale_processes",
            {
                "worker_type": self.worker_type,
                "workspace_id": self.workspace_id,
                "lease_s": lease_s,
                "max_attempts": max_attempts,
            },
        )
        return [RecoveredRow(*r) for r in rows]
