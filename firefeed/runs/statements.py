"""The named statements of runs/queries.sql, on a run's held connection when it has one, else the pool's.

The run driver holds one connection for its whole run (the one that LISTENs,
firefeed/runs/wakeups.py). Its own reads and writes of job rows and of the
run's timeline go there, one statement per call in autocommit: a pool checkout
inside a run costs two round trips of its own (the run's session state set,
then reset at checkin), and an ORM session a BEGIN and a COMMIT more. A held
connection that fails is closed and the call is made again on a pooled one:
the statements sent this way are reads or idempotent writes.
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg2
from psycopg2.extras import NamedTupleCursor
from sqlalchemy.engine import Engine

from firefeed.db.engine import raw_connection
from firefeed.db.sqlfile import load_queries


def query(name: str) -> str:
    """The SQL of the named block of runs/queries.sql."""
    return load_queries("firefeed.runs")[name]


class HeldConnection(Protocol):
    """A connection kept for a whole run, in autocommit (firefeed/runs/wakeups.py RunWakeups)."""

    @property
    def connection(self) -> Any | None: ...

    def close(self) -> None: ...


def run_statement(engine: Engine, held: HeldConnection | None, name: str, params: dict[str, Any]) -> list[Any]:
    """Execute the named statement; its rows as named tuples ([] when it returns none)."""
    conn = held.connection if held is not None else None
    if conn is not None:
        try:
            with conn.cursor(cursor_factory=NamedTupleCursor) as cur:
                cur.execute(query(name), params)
                return list(cur.fetchall()) if cur.description is not None else []
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            assert held is not None
            held.close()  # and once more on a pooled connection, below
    with raw_connection(engine) as pooled, pooled.cursor(cursor_factory=NamedTupleCursor) as cur:
        cur.execute(query(name), params)
        return list(cur.fetchall()) if cur.description is not None else []
