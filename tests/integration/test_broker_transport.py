"""A Redis connection lost while an ack is on its way is a connection error, which Celery recovers from."""

from __future__ import annotations

import pytest
from kombu import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from firefeed.tasks.broker import TRANSPORT, Transport
from tests.services import redis_db, requires_redis

pytestmark = pytest.mark.integration


@requires_redis
def test_a_channel_of_a_closed_connection_raises_a_connection_error_not_attribute_error() -> None:
    conn = Connection(redis_db(15), transport=TRANSPORT)
    assert isinstance(conn.transport, Transport)
    channel = conn.default_channel  # no Redis command is sent: creating the client is lazy
    channel.connection.client = None  # what kombu leaves behind when it closes a lost connection
    with pytest.raises(RedisConnectionError) as err:
        channel._connparams()
    assert isinstance(err.value, conn.transport.connection_errors)
    conn.release()


def test_celery_uses_the_guarded_transport_for_a_redis_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import celeryconfig
    from firefeed.config import reset_settings

    monkeypatch.setenv("FIREFEED_BROKER_URL", "redis://127.0.0.1:6379/15")
    reset_settings()
    try:
        assert importlib.reload(celeryconfig).broker_transport == TRANSPORT
    finally:
        monkeypatch.delenv("FIREFEED_BROKER_URL")
        reset_settings()
        importlib.reload(celeryconfig)


def test_celeryconfig_reloaded_without_a_redis_broker_names_no_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    # A reload keeps a module's old names: a transport left from a Redis broker sent memory:// to localhost:6379.
    import importlib

    import celeryconfig
    from firefeed.config import reset_settings

    monkeypatch.setenv("FIREFEED_BROKER_URL", "redis://127.0.0.1:1/15")
    reset_settings()
    try:
        assert importlib.reload(celeryconfig).broker_transport == TRANSPORT
        monkeypatch.setenv("FIREFEED_BROKER_URL", "memory://")
        reset_settings()
        reloaded = importlib.reload(celeryconfig)
        assert (reloaded.broker_url, reloaded.broker_transport) == ("memory://", None)
    finally:
        monkeypatch.delenv("FIREFEED_BROKER_URL")
        reset_settings()
        importlib.reload(celeryconfig)
