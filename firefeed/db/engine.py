"""One SQLAlchemy engine per database URL, and raw psycopg2 connections for COPY and DDL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg2.extensions
from psycopg2 import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from firefeed.config import get_settings, normalize_database_url

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url` (default: the configured database)."""
    url = normalize_database_url(url) if url else get_settings().sqlalchemy_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            settings = get_settings()
            engine = create_engine(
                url,
                pool_size=settings.web_pool_size,
                max_overflow=10,
                pool_pre_ping=True,
                # Connections are taken per step: a step that found a dead one retries once, not never.
                pool_recycle=1800,
            )
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
