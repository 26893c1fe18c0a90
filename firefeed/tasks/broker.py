"""kombu's Redis transport, with a lost connection read as one.

When Redis goes away, kombu closes the connection and drops the transport's client
while an acknowledgement of a finished task may still be on its way; that ack then
builds a new Redis client from `connection.client`, which is None by now, and the
AttributeError it raises is not one of the transport's connection errors, so Celery
calls it unrecoverable and the worker exits (celery/kombu#582, still in kombu 5.x).
Raised as redis's ConnectionError instead, it is a connection error like any other:
the consumer reconnects and the worker lives on.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        connection = getattr(self, "connection", None)
        if connection is None or connection.client is None:
            raise RedisConnectionError("the broker connection was closed")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel


#: celeryconfig's broker_transport for redis:// and rediss:// brokers
TRANSPORT = f"{__name__}:Transport"
