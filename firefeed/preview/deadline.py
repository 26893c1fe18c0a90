"""A preview's total deadline (FIREFEED_PREVIEW_DEADLINE_S) over FETCH, PARSE, MERGE and RULES.

A thread cannot be stopped from outside, so the deadline is kept from inside,
in three ways: the fetch gets it (`fetch_source(deadline=...)` shuts a
trickling connection down at that time), the steps check it between
themselves and every few hundred rows parsed, and the preview's own database
connections are bounded by it: each statement runs under a
`statement_timeout` of the time left, and when time is up the statements in
flight are cancelled (`connection.cancel()`, which psycopg2 allows from
another thread). The `step` it keeps names what was running, for the message.
A values call (`GET /api/projects/{id}/values`) is bounded the same way, with its own
message (`timeout`) and connection name.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from sqlalchemy import Engine, create_engine, event

from firefeed.errors import FireFeedError, PreviewTimeoutError

#: a preview's connections: the staging one, the merge's second (it counts keys beside the write), one spare
PREVIEW_DB_POOL = 2
PREVIEW_DB_OVERFLOW = 1
#: after the deadline, how often statements still running are cancelled again (one may start after the first)
RECANCEL_S = 0.25
#: how a preview's connections show in pg_stat_activity
PREVIEW_APPLICATION_NAME = "firefeed-preview"


class Deadline:
    """`seconds` from now; `expire()` ends it early (the client went away). `timeout`: the error past it
    (default: a preview's PreviewTimeoutError)."""

    def __init__(self, seconds: float, *, timeout: Callable[[Deadline], FireFeedError] | None = None) -> None:
        self.seconds = seconds
        self._timeout = timeout
        self.at = time.monotonic() + seconds
        self.step = "starting"
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._fired = False
        self._watchers: list[Callable[[], None]] = []

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self._fired or time.monotonic() >= self.at

    def error(self) -> FireFeedError:
        if self._timeout is not None:
            return self._timeout(self)
        limit = f"{self.seconds:g}"
        return PreviewTimeoutError(
            f"the preview did not finish within {limit} s (FIREFEED_PREVIEW_DEADLINE_S): "
            f"it was still {self.step}; preview fewer items, or a source that answers faster"
        )

    def check(self, step: str | None = None) -> None:
        """Raise the deadline's error if time is up; else note `step` as what runs now."""
        if self.expired():
            raise self.error()
        if step is not None:
            self.step = step

    def watch(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` (from the timer's thread) when time is up; returns the function that stops watching."""
        with self._lock:
            fired = self._fired
            if not fired:
                self._watchers.append(callback)
        if fired:
            callback()

        def unwatch() -> None:
            with self._lock:
                if callback in self._watchers:
                    self._watchers.remove(callback)

        return unwatch

    def expire(self) -> None:
        with self._lock:
            if self._fired:
                return
            self._fired = True
            self.at = min(self.at, time.monotonic())
            watchers = list(self._watchers)
            self._wake.notify_all()
        for callback in watchers:
            callback()

    @contextmanager
    def armed(self) -> Iterator[Deadline]:
        """While the block runs: the watchers at the deadline, then again every RECANCEL_S until it ends.

        Again, because a statement may begin after the first call (on a connection
        whose timeout some code lifted). The thread ends with the block.
        """
        done = False

        def watch() -> None:
            with self._lock:
                while not done and not self._fired and self.remaining() > 0:
                    self._wake.wait(timeout=max(0.0, self.remaining()))
                if done:
                    return
            self.expire()
            while True:
                with self._lock:
                    self._wake.wait(timeout=RECANCEL_S)
                    if done:
                        return
                    watchers = list(self._watchers)
                for callback in watchers:
                    callback()

        thread = threading.Thread(target=watch, name="firefeed-preview-deadline", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            with self._lock:
                done = True
                self._wake.notify_all()
            thread.join()


@contextmanager
def bounded_engine(
    base: Engine, deadline: Deadline, *, application_name: str = PREVIEW_APPLICATION_NAME
) -> Iterator[Engine]:
    """An engine of the preview's (or values call's) own, on `base`'s database, whose statements end by the deadline.

    Its own (and small) pool keeps previews from taking the connections the API's
    requests need, and makes every connection it holds the preview's, so the
    deadline can cancel exactly those. Disposed at the end: no connection stays.
    """
    engine = create_engine(
        base.url,
        pool_size=PREVIEW_DB_POOL,
        max_overflow=PREVIEW_DB_OVERFLOW,
        pool_timeout=max(1.0, deadline.seconds),
        connect_args={"application_name": application_name},
    )
    checked_out: set[Any] = set()
    lock = threading.Lock()

    @event.listens_for(engine, "checkout")
    def _bound(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        with lock:
            checked_out.add(dbapi_connection)
        # The time left, in whole milliseconds (at least 1: 0 would mean no timeout at all).
        ms = max(1, math.floor(deadline.remaining() * 1000))
        with dbapi_connection.cursor() as cur:
            cur.execute("SET statement_timeout = %s", (ms,))
            # Nothing a preview writes outlives it (a scratch area, dropped at its end): its commits need not
            # wait for the WAL flush. About 2 ms each, and a preview of ten rules commits ~90 times (#53).
            cur.execute("SET synchronous_commit = off")
        dbapi_connection.commit()

    @event.listens_for(engine, "checkin")
    def _returned(dbapi_connection: Any, _record: Any) -> None:
        with lock:
            checked_out.discard(dbapi_connection)

    def cancel_all() -> None:
        with lock:
            for conn in checked_out:
                with suppress(Exception):  # a connection closing just now has nothing left to cancel
                    conn.cancel()

    unwatch = deadline.watch(cancel_all)
    try:
        yield engine
    finally:
        unwatch()
        engine.dispose()
