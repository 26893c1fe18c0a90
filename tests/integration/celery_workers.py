"""Real `firefeed worker` processes (one per queue) against Redis or FIREFEED_TEST_BROKER, for the distributed tests.

Without Redis (tests/services.py), `in_process_worker` is the fallback: Celery's own test
worker in this process, on the in-memory broker, consuming every queue (the one-process mode).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from firefeed.tasks.queues import queue_of_worker
from tests.services import REDIS_URL, backend_for, is_amqp

FIREFEED = str(Path(sys.executable).with_name("firefeed"))


def use_broker(url: str) -> None:
    """Point this process's Celery app at another broker, dropping connections made to the old one."""
    from firefeed.celery_app import app

    # Drop, don't close: kombu shares a broker URL's pool, and a closed one cannot be reused.
    app._pool = None
    app.amqp._producer_pool = None
    app.conf.broker_url = url
    app.conf.result_backend = backend_for(url)
    # The result backend is cached per app and per thread: forget it so the new URL applies.
    app._backend_cache = None
    if hasattr(app._local, "backend"):
        del app._local.backend


def flush_redis(url: str = REDIS_URL) -> None:
    flush_broker(url)


def flush_broker(url: str) -> None:
    """Drop the messages earlier tests left: FLUSHDB of a Redis database, or a purge of FireFeed's queues.

    On RabbitMQ every test shares one virtual host, so the purge is what keeps a root task of
    another test's run from reaching this test's workers. The memory broker is emptied per worker.
    """
    if is_amqp(url):
        from kombu import Connection

        from firefeed.tasks.queues import ALL_QUEUES

        with Connection(url, connect_timeout=5) as conn:
            channel = conn.default_channel
            for queue in ALL_QUEUES:
                # Declared as Celery declares it (durable), so the purge never fails on a queue not made yet.
                channel.queue_declare(queue=queue, durable=True, auto_delete=False)
                channel.queue_purge(queue=queue)
    elif url.startswith("redis"):
        redis.Redis.from_url(url).flushdb()


def spawn_worker(
    env: dict[str, str], queue: str, log: Any = subprocess.DEVNULL, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """One `firefeed worker QUEUE` process in its own process group, so a test can kill it with its pool.

    `cwd`: the folder it runs in (a stand-in for another machine: relative paths and `.env` differ).
    """
    return subprocess.Popen(
        [FIREFEED, "worker", queue, "--loglevel", "INFO"],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
        cwd=cwd,
    )


def wait_answering(
    env: dict[str, str], queues: tuple[str, ...], procs: list[subprocess.Popen[bytes]], timeout: float = 60
) -> None:
    """Wait until a worker of every queue answers a ping (node names `<queue>.<fleet tag>@<host>`)."""
    from celery import Celery

    client = Celery(broker=env["FIREFEED_BROKER_URL"], backend=env["FIREFEED_BROKER_URL"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = client.control.ping(timeout=0.5) or []
        names = {name for r in replies for name in r}
        if all(any(queue_of_worker(n) == q for n in names) for q in queues):
            return
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a worker exited during start-up")
    raise RuntimeError(f"workers did not answer a ping within {timeout:.0f} s")


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM (warm shutdown), then SIGKILL of its whole process group if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_worker(proc)


def kill_worker(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 of the worker and its pool children, as a crashed machine would lose them."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)


@contextmanager
def celery_workers(
    env: dict[str, str],
    queues: tuple[str, ...] | None = None,
    log_dir: Path | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One worker process per queue (default: every queue); waits until each answers a ping, stops them at the end."""
    from firefeed.tasks.queues import ALL_QUEUES

    queues = queues or ALL_QUEUES
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for q in queues:
            log = (log_dir / f"worker-{q}.log").open("wb") if log_dir else subprocess.DEVNULL
            if log_dir:
                logs.append(log)
            procs.append(spawn_worker(env, q, log))
        wait_answering(env, queues, procs)
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            stop_worker(p)
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
    from firefeed.tasks.queues import ALL_QUEUES

    if app.conf.broker_url.startswith("memory://"):
        purge_memory_broker()  # messages other tests left would run here, against their finished tests
    with start_worker(
        app,
        queues=list(queues or ALL_QUEUES),
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        shutdown_timeout=30,
    ):
        yield app


def worker_env(database_url: str, broker: str, base: Path, **extra: str) -> dict[str, str]:
    """The environment of a test's worker processes: this session's database, `broker`, folders under `base`."""
    return dict(
        os.environ,
        FIREFEED_DATABASE_URL=database_url,
        FIREFEED_BROKER_URL=broker,
        FIREFEED_EXPORT_DIR=str(base / "exports"),
        FIREFEED_DATA_DIR=str(base / "var"),
        **extra,
    )


def bare_client_send(broker: str, task: str, args: list[Any], cwd: Path, queue: str | None = None) -> Any:
    """`send_task(task, args)` by name from a plain Celery app in another process, and its result.

    No FireFeed there (checked), so no routes: without `queue` the message goes to Celery's default
    queue, as another service's would.
    """
    named = f", queue={queue!r}" if queue else ""
    script = (
        "import json, sys\n"
        "from celery import Celery\n"
        f"app = Celery(broker={broker!r}, backend={backend_for(broker)!r})\n"
        f"r = app.send_task({task!r}, args={args!r}{named})\n"
        "print(json.dumps(r.get(timeout=60)))\n"
        "assert 'firefeed' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIREFEED_")}
    out = subprocess.run(
        [sys.executable, "-I", "-c", script], env=env, capture_output=True, text=True, timeout=90, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
