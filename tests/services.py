"""Which local services the test session can use: Postgres and Redis on 127.0.0.1, or the fallbacks.

`make test` runs anywhere (issue 7): Postgres on 127.0.0.1:5432 when it answers, else
FireFeed's embedded Postgres. Redis is the session's own (#48): a `redis-server` it starts on a
free port when the program exists (tests/redis_server.py), never the machine's 127.0.0.1:6379,
whose databases the tests would empty; FIREFEED_TEST_REDIS_URL names another Redis instead.
Without either, Celery's in-memory broker with in-process workers. Only the tests that truly
need a broker shared between processes are marked `requires_shared_broker` (or
`requires_redis` when they read Redis itself); the README lists them. The probes use the TCP
addresses the tests use, never a unix socket.

FIREFEED_TEST_BROKER selects another broker for every Celery test, e.g.
`FIREFEED_TEST_BROKER=amqp://guest:guest@127.0.0.1:5672//` for the RabbitMQ pass CI runs
beside the Redis one. Results then go through the rpc:// backend, FireFeed's default on
RabbitMQ: only callers of `firefeed.pipeline.trigger` wait for a result.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.redis_server import start_session_redis

TCP_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: where no Redis is: a port nothing listens on, so a test that still reaches for Redis fails at once
NO_REDIS = "redis://127.0.0.1:1"
#: the `redis-server` the session starts its own Redis with; FIREFEED_TEST_REDIS_SERVER="" starts none
REDIS_SERVER = os.environ.get("FIREFEED_TEST_REDIS_SERVER", shutil.which("redis-server") or "")


#: beside the FIREFEED_TEST_REDIS_URL of a Redis a test session started: that session's xdist worker ("" if none)
REDIS_WORKER_ENV = "FIREFEED_TEST_REDIS_WORKER"


def _xdist_worker() -> str:
    """This session's pytest-xdist worker id (gw0, gw1, ...), "" when it runs serially or is xdist's controller."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def _named_redis() -> str | None:
    """FIREFEED_TEST_REDIS_URL when it is this session's to use: set by hand, or by this session or its parent
    on the same xdist worker. Not the one xdist's controller started: workers that shared it would share
    the numbered databases each test file empties for its own Celery workers, so each worker starts its own."""
    url = os.environ.get("FIREFEED_TEST_REDIS_URL")
    started_for = os.environ.get(REDIS_WORKER_ENV)
    if url and (started_for is None or started_for == _xdist_worker()):
        return url
    return None


def _session_redis_url() -> str:
    """FIREFEED_TEST_REDIS_URL when set; else a Redis of this session's own (database 13), else NO_REDIS.

    The URL of the one it starts goes into FIREFEED_TEST_REDIS_URL, so processes the tests start
    (and a pytest inside this one) use this server rather than start theirs.
    """
    explicit = _named_redis()
    if explicit:
        return explicit
    if not REDIS_SERVER:
        return NO_REDIS + "/13"
    url = start_session_redis(REDIS_SERVER).url + "/13"
    os.environ["FIREFEED_TEST_REDIS_URL"] = url
    os.environ[REDIS_WORKER_ENV] = _xdist_worker()
    return url


_NAMED_REDIS = _named_redis()
REDIS_URL = _session_redis_url()
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


def redis_db(db: int) -> str:
    """The session's Redis, database `db`: each test file that runs workers keeps its own (7 to 15)."""
    return urlparse(REDIS_URL)._replace(path=f"/{db}").geturl()


@cache
def redis_available() -> bool:
    """The session's Redis (its own, or FIREFEED_TEST_REDIS_URL's) answers a PING."""
    if REDIS_URL.startswith(NO_REDIS + "/"):
        return False
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


NO_REDIS_REASON = (
    f"no Redis: FIREFEED_TEST_REDIS_URL={_NAMED_REDIS} does not answer"
    if _NAMED_REDIS
    else "no Redis: no redis-server to start (PATH, FIREFEED_TEST_REDIS_SERVER), FIREFEED_TEST_REDIS_URL unset"
)
requires_redis = pytest.mark.skipif(not redis_available(), reason=NO_REDIS_REASON)
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
    reason=f"no broker shared between processes ({NO_REDIS_REASON}, and FIREFEED_TEST_BROKER too)",
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
