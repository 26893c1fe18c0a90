"""Real `firefeed worker` processes (one per queue) against Redis, for the distributed tests.

Without Redis (tests/services.py), `in_process_worker` is the fallback: Celery's own test
worker in this process, on the in-memory broker, consuming every queue (the one-process mode).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.services import REDIS_URL, backend_for

FIREFEED = str(Path(sys.executable).with_name("firefeed"))


def use_broker(url: str) -> None:
    """Point this process's Celery app at another broker, dropping connections made to the old one."""
    from firefeed.celery_app import app

    # Drop, don't close: kombu shares a broker URL's pool, and a closed one cannot be reused.
    app._pool = None
    app.amqp._producer_pool = None
    app.conf.broker_url = url
    app.conf.result_backend = backend_for(url)


def flush_redis(url: str = REDIS_URL) -> None:
    redis.Redis.from_url(url).flushdb()


@contextmanager
def celery_workers(
    env: dict[str, str],
    queues: tuple[str, ...] = ("pipeline", "import", "rules", "export"),
    log_dir: Path | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start one worker process per queue, wait until every one answers a ping, stop them at the end."""
    from celery import Celery

    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for q in queues:
            log = (log_dir / f"worker-{q}.log").open("wb") if log_dir else subprocess.DEVNULL
            if log_dir:
                logs.append(log)
            procs.append(
                subprocess.Popen([FIREFEED, "worker", q, "--loglevel", "INFO"], env=env, stdout=log, stderr=log)
            )
        client = Celery(broker=env["FIREFEED_BROKER_URL"], backend=env["FIREFEED_BROKER_URL"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            replies = client.control.ping(timeout=0.5) or []
            names = {name for r in replies for name in r}
            if all(any(n.startswith(f"{q}@") for n in names) for q in queues):
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker exited during start-up")
        else:
            raise RuntimeError("workers did not answer a ping within 60 s")
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def purge_memory_broker() -> None:
    """Empty the in-memory broker's queues: they live as long as the process, and other tests send to them."""
    from kombu.transport.memory import Channel

    for queue in list(Channel.queues.values()):
        with queue.mutex:
            queue.queue.clear()


@contextmanager
def in_process_worker(queues: tuple[str, ...] | None = None, concurrency: int = 3) -> Iterator[object]:
    """Celery's in-process test worker (thread pool) on the app's current broker; step jobs run in place."""
    from celery.contrib.testing.worker import start_worker

    from firefeed.celery_app import app
    from firefeed.tasks.dispatch import note_worker_queues
    from firefeed.tasks.queues import ALL_QUEUES

    if app.conf.broker_url.startswith("memory://"):
        purge_memory_broker()  # messages other tests left would run here, against their finished tests
    try:
        with start_worker(
            app,
            queues=list(queues or ALL_QUEUES),
            pool="threads",
            concurrency=concurrency,
            perform_ping_check=False,
            shutdown_timeout=30,
        ):
            yield app
    finally:
        note_worker_queues(set())
