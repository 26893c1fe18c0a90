"""Which local services the test session can use: Postgres and Redis on 127.0.0.1, or the fallbacks.

`make test` runs anywhere (issue 7): Postgres on 127.0.0.1:5432 when it answers, else
FireFeed's embedded Postgres; Redis on 127.0.0.1:6379 when it answers, else Celery's
in-memory broker with in-process workers. Only the tests that truly need a broker
shared between processes are marked `requires_redis`; the README lists them.
The probes use the TCP addresses the tests use, never a unix socket.
"""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

import pytest

TCP_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = os.environ.get("FIREFEED_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
MEMORY_BROKER = "memory://"


def _tcp_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@cache
def redis_available() -> bool:
    """Redis answers a PING at the tests' Redis address (127.0.0.1:6379 unless FIREFEED_TEST_REDIS_URL)."""
    parsed = urlparse(REDIS_URL)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    if not _tcp_answers(host, port):
        return False
    import redis

    try:
        client = redis.Redis(host=host, port=port, socket_connect_timeout=2, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.RedisError:
        return False


requires_redis = pytest.mark.skipif(not redis_available(), reason="Redis not reachable on 127.0.0.1:6379")
"""For the few tests that need a broker shared by several processes (or Redis itself): they skip without it."""


def broker_url(redis_url: str) -> str:
    """`redis_url` when Redis answers, else Celery's in-memory broker (in-process workers only)."""
    return redis_url if redis_available() else MEMORY_BROKER


def backend_for(broker: str) -> str:
    """The result backend that goes with a broker URL: Redis itself, or results in this process's memory."""
    return broker if broker.startswith("redis") else "cache+memory://"


def _postgres_answers(url: str) -> bool:
    if not _tcp_answers("127.0.0.1", 5432):
        return False
    import psycopg2

    try:
        psycopg2.connect(url, connect_timeout=3).close()
    except psycopg2.Error:
        return False
    return True


@cache
def admin_url() -> str:
    """A psycopg2 URL of a Postgres database the session may create and drop databases from.

    FIREFEED_TEST_ADMIN_URL when set; else Postgres on 127.0.0.1:5432 when it answers over TCP;
    else the embedded Postgres (started here, stopped when the session ends), over its unix socket.
    """
    explicit = os.environ.get("FIREFEED_TEST_ADMIN_URL")
    if explicit:
        return explicit
    if _postgres_answers(TCP_ADMIN_URL):
        return TCP_ADMIN_URL
    from sqlalchemy.engine import make_url

    from firefeed.db.embedded import embedded_database_url

    url = make_url(embedded_database_url(Path(os.environ.get("FIREFEED_DATA_DIR", "var"))))
    return url.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)


def database_url_for(admin: str, name: str) -> str:
    """`admin` with its database replaced by `name` (host, port and socket query kept)."""
    from sqlalchemy.engine import make_url

    return make_url(admin).set(database=name).render_as_string(hide_password=False)
