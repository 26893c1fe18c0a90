"""One SQLAlchemy engine per database URL, and raw psycopg2 connections for COPY and DDL.

Every connection of these engines runs its statements under a `statement_timeout`
(FIREFEED_STATEMENT_TIMEOUT_S), and says in its `application_name` whose work it
does: set per checkout from `session_state` (firefeed/runs/backends.py names a
run's connections `firefeed:<run>:<step>[:<job>]`, so a cancel can find their
backends from any machine). Outside such a block a connection carries the name it
connected with (PGAPPNAME, the URL's, else `firefeed`) and the process's timeout.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psycopg2.extensions
from psycopg2 import sql
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from firefeed.config import get_settings, normalize_database_url

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class SessionState:
    """What a connection checked out inside `session_state` is set to."""

    application_name: str
    statement_timeout_s: float


_session: contextvars.ContextVar[SessionState | None] = contextvars.ContextVar("firefeed_session", default=None)


@contextmanager
def session_state(application_name: str, statement_timeout_s: float) -> Iterator[None]:
    """Connections checked out inside the block (and in threads started with a copy of its context)
    carry this application_name and statement_timeout until they go back to the pool."""
    token = _session.set(SessionState(application_name, statement_timeout_s))
    try:
        yield
    finally:
        _session.reset(token)


def _timeout_ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))  # 0 would mean no timeout at all


def _wanted(record: Any) -> tuple[str, int]:
    state = _session.get()
    if state is None:
        return record.info.get("ff_base_name", ""), _timeout_ms(get_settings().statement_timeout_s)
    return state.application_name, _timeout_ms(state.statement_timeout_s)


def _apply(dbapi_connection: Any, record: Any, wanted: tuple[str, int]) -> None:
    """Set the session's application_name and statement_timeout (one round trip, outside any transaction)."""
    record.info["ff_state"] = None  # unknown until the SET succeeded
    if dbapi_connection.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        return
    was = dbapi_connection.autocommit
    dbapi_connection.autocommit = True  # session-wide: a later ROLLBACK must not undo it
    try:
        with dbapi_connection.cursor() as cur:
            cur.execute(
                "SELECT set_config('application_name', %s, false), set_config('statement_timeout', %s, false)",
                (wanted[0], f"{wanted[1]}ms"),
            )
    finally:
        dbapi_connection.autocommit = was
    record.info["ff_state"] = wanted


def _on_connect(dbapi_connection: Any, record: Any) -> None:
    # The server reports application_name at start-up: the connection's own name costs no query.
    record.info["ff_base_name"] = dbapi_connection.get_parameter_status("application_name") or ""
    record.info["ff_state"] = None


def _ping(dbapi_connection: Any) -> None:
    was = dbapi_connection.autocommit
    dbapi_connection.autocommit = True  # no transaction left open by the ping
    try:
        with dbapi_connection.cursor() as cur:
            cur.execute("SELECT 1")
    finally:
        if not dbapi_connection.closed:
            dbapi_connection.autocommit = was


def _on_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """The pool's liveness check, and the session state: one round trip, not two.

    The engines run without SQLAlchemy's pre-ping: a checkout that must set the
    state anyway (every checkout inside a run, whose name the checkin took away)
    learns from that statement whether the connection is alive, and only the
    others ping. A dead connection raises DisconnectionError, on which the pool
    discards it and takes another, as its pre-ping would.
    """
    if dbapi_connection.closed or (
        dbapi_connection.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_UNKNOWN
    ):
        raise DisconnectionError("the pooled connection is closed")
    wanted = _wanted(record)
    try:
        if record.info.get("ff_state") != wanted:
            _apply(dbapi_connection, record, wanted)
        else:
            _ping(dbapi_connection)
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as err:  # died in the pool: take another
        raise DisconnectionError(str(err)) from err


def _on_checkin(dbapi_connection: Any, record: Any) -> None:
    """A run's name leaves with the run: an idle pooled connection carries its own name again."""
    state = record.info.get("ff_state")
    if dbapi_connection is None or state is None or state[0] == record.info.get("ff_base_name", ""):
        return
    try:
        _apply(dbapi_connection, record, (record.info.get("ff_base_name", ""), state[1]))
    except psycopg2.Error:  # the next checkout sets it again, or the pre-ping replaces the connection
        record.info["ff_state"] = None


#: pooled connections an engine keeps while idle; None: FIREFEED_WEB_POOL_SIZE (see `worker_pool_process`)
_idle_pool: int | None = None
#: what `worker_pool_process` sets it to; `firefeed worker` sets this before its pool forks
_worker_idle = 1


def keep_idle_in_workers(connections: int) -> None:
    """The idle connections each pool process of this worker keeps (call before the pool forks)."""
    global _worker_idle
    _worker_idle = connections


def worker_pool_process() -> None:
    """From now on this process's engines keep few connections while idle (a worker's pool process).

    A pool process runs one job at a time. Its engine kept up to FIREFEED_WEB_POOL_SIZE idle
    connections, so every pool process that ever ran a job with two connections (RULES in halves,
    MERGE's key counts) kept both: 56 pool processes at PIPELINE_CONCURRENCY=8 exhausted
    max_connections=100 while SPEC 1's budget counts one per slot. A step's pool process now keeps
    one; a pipeline one two (`firefeed worker pipeline`), its driver's wakeups connection and the one
    its statements use, which a run would otherwise open anew (10-item runs: 116 -> 150 ms).
    """
    global _idle_pool
    _idle_pool = _worker_idle
    dispose_engines()


#: Every statement FireFeed sends is planned without JIT: its big scans (passes, exports, merges) measured
#: faster without it and set it off one by one; the others (a delta's take-over, its key lookups) were
#: left compiling with inlining and optimization, ~0.1-0.3 s each, planned costs inflated by run tables
#: without statistics. PGOPTIONS (which an `options` parameter replaces) and a URL's own `options` come
#: after, so an operator's settings still apply, and can turn it on again.
_SESSION_OPTIONS = "-c jit=off"


def _options(url: str) -> str:
    from sqlalchemy.engine import make_url

    own = make_url(url).query.get("options")
    given = " ".join(own) if isinstance(own, tuple) else (own or "")
    return " ".join(o for o in (_SESSION_OPTIONS, os.environ.get("PGOPTIONS", ""), given) if o)


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url` (default: the configured database)."""
    url = normalize_database_url(url) if url else get_settings().sqlalchemy_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            settings = get_settings()
            engine = create_engine(
                url,
                pool_size=settings.web_pool_size if _idle_pool is None else _idle_pool,
                max_overflow=10,
                pool_pre_ping=False,  # the checkout event checks liveness (_on_checkout)
                # Connections are taken per step: a step that found a dead one retries once, not never.
                pool_recycle=1800,
                # Used only when neither PGAPPNAME nor the URL names the connections.
                connect_args={"fallback_application_name": "firefeed", "options": _options(url)},
            )
            event.listen(engine, "connect", _on_connect)
            event.listen(engine, "checkout", _on_checkout)
            event.listen(engine, "checkin", _on_checkin)
            _engines[url] = engine
        return engine


def dispose_engines() -> None:
    """Close every pooled connection (after fork, and at the end of tests)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def session_factory(engine: Engine | None = None) -> sessionmaker[Session]:
    return sessionmaker(bind=engine or get_engine(), expire_on_commit=False)


def render_for_binding(node: sql.Composable, context: Any) -> str:
    """Query text for execution with bound values: `%` inside names and literals made literal.

    psycopg2 applies `%` formatting to the whole text when values are bound, so a
    field named `50% off` would break a query (or `%s` be read as a placeholder).
    Only FireFeed's own SQL text (sql.SQL, sql.Placeholder) may carry placeholders.
    """
    if isinstance(node, sql.Composed):
        return "".join(render_for_binding(part, context) for part in node.seq)
    if isinstance(node, sql.SQL):
        return node.string
    if isinstance(node, sql.Placeholder):
        return str(node.as_string(context))
    return str(node.as_string(context)).replace("%", "%%")


class PercentSafeCursor(psycopg2.extensions.cursor):
    """A cursor whose composed queries keep user text's `%` literal when values are bound."""

    def execute(self, query: Any, vars: Any = None) -> Any:
        if vars is not None and isinstance(query, sql.Composable):
            query = render_for_binding(query, self)
        return super().execute(query, vars)


#: below this many items, a job's side work (MERGE's key counts, EXPORT's diff and checks) runs on
#: the job's one connection, before its main statement, instead of beside it on a second one: a
#: step's pool process keeps one idle connection, and opening another (3-7 ms) costs more than the
#: overlap saves on a few thousand items (10-item trigger -> SUCCEEDED: see docs/decisions.md, #16)
SIDE_CONNECTION_MIN_ROWS = 10_000


def side_work_first(rows: int | None) -> bool:
    """Whether a job of `rows` items (None: not known) does its side work first, on its one connection."""
    return rows is not None and rows < SIDE_CONNECTION_MIN_ROWS


@contextmanager
def raw_connection(engine: Engine | None = None) -> Iterator[Any]:
    """A pooled psycopg2 connection in a transaction: committed on success, rolled back on error."""
    pooled = (engine or get_engine()).raw_connection()
    conn: Any = pooled.driver_connection
    conn.cursor_factory = PercentSafeCursor
    try:
        yield conn
        conn.commit()
    except BaseException:
        # On a connection the server closed, rollback fails too; the error worth reporting is the first one.
        with suppress(psycopg2.Error):
            conn.rollback()
        raise
    finally:
        pooled.close()


def database_message(err: BaseException) -> str:
    """What the database said about a failed statement, without the statement: SQLAlchemy's text
    repeats the statement and its bound values (item data), the driver's own message is enough."""
    driver = err.orig if isinstance(err, DBAPIError) and err.orig is not None else err
    pgerror = getattr(driver, "pgerror", None)
    return (pgerror or str(driver) or type(err).__name__).strip()
