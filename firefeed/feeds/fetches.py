"""The last fetch of every feed URL: counted per request, written to Postgres at most every `FLUSH_S`.

A channel or a flood of clients may fetch a feed thousands of times a second; one UPDATE per request
would make Postgres the bottleneck of a 304. Requests only overwrite an entry in a dict; a task on the
event loop writes the entries that changed, one UPDATE per export, every `FLUSH_S` seconds. A process
that stops loses at most that much of the record, never a fetch's metric.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from sqlalchemy import Engine

from firefeed import metrics
from firefeed.feeds.index import Feed
from firefeed.feeds.store import execute

log = logging.getLogger(__name__)

#: At most one write per export this often (seconds).
FLUSH_S = 2.0
#: A user agent is kept to this many characters: it is the client's text, shown on the page.
MAX_USER_AGENT = 300


class FetchRecorder:
    def __init__(self, engine: Engine, *, flush_s: float = FLUSH_S) -> None:
        self.engine = engine
        self.flush_s = flush_s
        self._pending: dict[str, tuple[datetime, str | None, int]] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, feed: Feed | None, status: int, user_agent: str | None) -> None:
        if feed is None:
            metrics.feed_fetched("", "", "", status)
            return
        metrics.feed_fetched(feed.company, feed.project, feed.export, status)
        self._pending[feed.feed_id] = (datetime.now(UTC), (user_agent or None) and user_agent[:MAX_USER_AGENT], status)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_s)
        await asyncio.to_thread(self.flush)

    def flush(self) -> None:
        """Write what was recorded since the last flush (one UPDATE per export)."""
        pending, self._pending = self._pending, {}
        for feed_id, (at, user_agent, status) in pending.items():
            try:
                execute(
                    self.engine,
                    "record_fetch",
                    {"feed_id": feed_id, "at": at, "user_agent": user_agent, "status": status},
                )
            except Exception:  # the record is a convenience: a failed write must not fail a feed
                log.warning("could not record the last fetch of a feed", exc_info=True)
