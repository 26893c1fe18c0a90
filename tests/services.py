"""Which local services the test session can use: Postgres and Redis on 127.0.0.1, or the fallbacks.

`make test` runs anywhere (issue 7): Postgres on 127.0.0.1:5432 when it answers, else
FireFeed's embedded Postgres; Redis on 127.0.0.1:6379 when it answers, else Celery's
in-memory broker with in-process workers. Only the tests that truly need a broker
shared between processes are marked `requires_shared_broker` (or `requires_redis` when
they read Redis itself); the README lists them. The probes use the TCP addresses the
tests use, never a unix socket.

FIREFEED_TEST_BROKER selects another broker for every Celery test, e.g.
`FIREFEED_TEST_BROKER=amqp://guest:guest@127.0.0.1:5672//` for the RabbitMQ pass CI runs
beside the Redis one. Results then go through the rpc:// backend, FireFeed's default on
RabbitMQ: only callers of `firefeed.pipeline.trigger` wait for a result.
"""

from __future__ import annotations

import os
import socket
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

import pytest

TCP_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = os.environ.get("FIREFEED_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
MEMORY_BROKER = "memory://"
TEST_BROKER = os.environ.get("FIREFEED_TEST_BROKER", "").strip()
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")
if TEST_BROKER and not TEST_BROKER.startswith(AMQP_SCHEMES):
    # Redis needs no selecting: it is the default, per test file database and all (FIREFEED_TEST_REDIS_URL).
    raise RuntimeError(f"FIREFEED_TEST_BROKER must be an amqp:// URL, got {TEST_BROKER.split(':')[0]}://…")


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
"""For the few tests that read Redis itself (queue depth from its lists): they skip without it."""


def is_amqp(url: str) -> bool:
    return url.startswith(AMQP_SCHEMES)


@cache
def shared_broker_available() -> bool:
    """A broker several processes can share: the selected FIREFEED_TEST_BROKER, else Redis when it answers.

    A selected broker counts as available without a probe: if it is down, its tests fail, they do not skip.
    """
    return bool(TEST_BROKER) or redis_available()


requires_shared_broker = pytest.mark.skipif(
    not shared_broker_available(),
    reason="no broker shared between processes: Redis not reachable on 127.0.0.1:6379 and FIREFEED_TEST_BROKER unset",
)
"""For tests that need worker processes on one broker (Redis or the selected one); they skip without one."""


def broker_url(redis_url: str) -> str:
    """The broker of a Celery test: FIREFEED_TEST_BROKER when set, else `redis_url` when Redis answers,
    else Celery's in-memory broker (in-process workers only).

    On Redis each test file keeps its own database (`redis_url`); on RabbitMQ its own virtual host,
    named after that database. Tests empty FireFeed's queues before use (celery_workers.flush_broker).
    """
    if TEST_BROKER:
        # One virtual host per Redis database, so test files that run their own workers stay apart.
        return amqp_vhost(TEST_BROKER, "firefeed_test_" + (urlparse(redis_url).path.strip("/") or "0"))
    return redis_url if redis_available() else MEMORY_BROKER


@cache
def amqp_vhost(url: str, vhost: str) -> str:
    """`url` on virtual host `vhost`, created with the URL user's full permissions when it does not exist.

    Virtual hosts are made with `rabbitmqctl`, so the RabbitMQ pass runs on the broker's own machine
    (as CI does), or against a broker where an operator made the `firefeed_test_*` virtual hosts.
    """
    parsed = urlparse(url)
    user = parsed.username or "guest"
    try:
        listed = subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RuntimeError(f"rabbitmqctl not found: make the {vhost} virtual host on the broker by hand") from None
    if listed.returncode != 0:
        raise RuntimeError(f"rabbitmqctl list_vhosts failed (make the {vhost} virtual host by hand): {listed.stderr}")
    if vhost not in listed.stdout.split():
        for command in (["add_vhost", vhost], ["set_permissions", "-p", vhost, user, ".*", ".*", ".*"]):
            done = subprocess.run(["rabbitmqctl", "-q", *command], capture_output=True, text=True, timeout=60)
            if done.returncode != 0 and "already exists" not in done.stderr:
                raise RuntimeError(f"rabbitmqctl {' '.join(command)} failed: {done.stderr}")
    return parsed._replace(path="/" + vhost).geturl()


def backend_for(broker: str) -> str:
    """The result backend that goes with a broker URL, as FireFeed picks it (config.Settings):
    Redis itself, rpc:// on RabbitMQ (replies to the caller's own queue), else this process's memory."""
    if broker.startswith("redis"):
        return broker
    if is_amqp(broker):
        return "rpc://"
    return "cache+memory://"


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
