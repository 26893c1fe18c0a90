"""Shared fixtures: a real Postgres database per test session, created fresh and dropped at the end.

The server is Postgres on 127.0.0.1:5432 when it answers, else the embedded Postgres
(see tests/services.py): `make test` needs no services.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy import Engine

from firefeed.config import reset_settings
from firefeed.db.engine import dispose_engines, get_engine
from tests.redis_server import stop_session_redis
from tests.services import admin_url, database_url_for

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's own Redis ends with the session (atexit and the kernel cover a crash)."""
    stop_session_redis()


def _admin_execute(statement: str) -> None:
    conn = psycopg2.connect(admin_url())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh database for this test session, with the control-plane tables migrated."""
    name = f"firefeed_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    # C.UTF-8 ctype: lower()/upper() follow Unicode's simple case mapping, as the rule language says.
    _admin_execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8'")
    url = database_url_for(admin_url(), name)
    old = os.environ.get("FIREFEED_DATABASE_URL")
    os.environ["FIREFEED_DATABASE_URL"] = url
    reset_settings()
    try:
        from firefeed.db.migrate import upgrade

        upgrade(url)
        yield url
    finally:
        dispose_engines()
        if old is None:
            os.environ.pop("FIREFEED_DATABASE_URL", None)
        else:
            os.environ["FIREFEED_DATABASE_URL"] = old
        reset_settings()
        _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture()
def engine(database_url: str) -> Engine:
    return get_engine(database_url)


@pytest.fixture()
def fixtures_dir() -> Path:
    return FIXTURES
