"""Wake the run driver when its jobs change, instead of having it poll their rows.

A trigger (migration 20261201_0011) notifies `ff_run_<run id without dashes>`
whenever one of the run's jobs changes status or result, and when a cancel of
the run is recorded. The driver holds one connection for the whole run that
LISTENs on that channel (before any job is sent, so no change can slip between
sending and listening) and sleeps on its socket until told, or until a timeout
that bounds what a lost notification could cost. The driver also reads its job
rows on that connection (firefeed/runs/jobs.py `held`): no pool checkout per read.

When the connection fails the wakeups say so (`live` turns False) and the watch
loop falls back to polling: a broken listener costs speed, never a run.
"""

from __future__ import annotations

import logging
import select
from contextlib import suppress
from typing import Any

import psycopg2
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.schema.identifiers import ident

log = logging.getLogger(__name__)


def run_channel(run_id: str) -> str:
    """The channel the trigger notifies for a run (the same text firefeed_notify_run() builds)."""
    return "ff_run_" + str(run_id).replace("-", "")


class RunWakeups:
    """One run's notifications on a connection of its own; `wait` returns when one came."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self._pooled: Any = None
        self._conn: Any = None
        try:
            self._pooled = engine.raw_connection()
            conn = self._pooled.driver_connection
            conn.autocommit = True  # notifications arrive between transactions: none is kept open
            with conn.cursor() as cur:
                cur.execute(sql.SQL("LISTEN {}").format(ident(run_channel(run_id))))
            self._conn = conn
        except (psycopg2.Error, OSError):
            log.warning("could not listen for the run's job changes; watching by polling", exc_info=True)
            self.close()

    @property
    def live(self) -> bool:
        return self._conn is not None

    @property
    def connection(self) -> Any | None:
        """The listening connection (autocommit), for the driver's own reads; None once it failed."""
        return self._conn

    def wait(self, timeout_s: float) -> bool:
        """Block until a notification arrives (True) or the timeout passes (False)."""
        conn = self._conn
        if conn is None:
            return False
        try:
            if not conn.notifies:
                ready, _, _ = select.select([conn], [], [], timeout_s)
                if ready:
                    conn.poll()
                    if not conn.notifies:
                        # Readable without a notification: a notice, or the server ending the session (which
                        # poll() does not report). A round trip tells; a dead connection raises here.
                        with conn.cursor() as cur:
                            cur.execute("SELECT 1")
            got = bool(conn.notifies)
            conn.notifies.clear()
            return got
        except (psycopg2.Error, OSError, ValueError):
            log.warning("lost the connection that listens for the run's job changes; watching by polling")
            self.close()
            return False

    def close(self) -> None:
        """UNLISTEN and give the connection back (a broken one is discarded by the pool's pre-ping)."""
        conn, pooled = self._conn, self._pooled
        self._conn = self._pooled = None
        if conn is not None:
            with suppress(psycopg2.Error), conn.cursor() as cur:
                cur.execute("UNLISTEN *")
            with suppress(psycopg2.Error):
                conn.autocommit = False
        if pooled is not None:
            with suppress(Exception):
                pooled.close()

    def __enter__(self) -> RunWakeups:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
