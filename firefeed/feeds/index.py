"""What an API process knows about every feed id: a dict refreshed by a cheap version check.

A 304 must not touch Postgres (2,000 answers a second on two cores), so each process keeps
feed id -> (export, its last two published files, feed_auth) in memory. Every `refresh_s` (a setting,
1 s by default) the first request asks Postgres one small question (`feeds_version`: ids created or
rotated, specs applied, publishes recorded or ended); only when the answer moved is the index
reloaded. So another process's rotate, a new publish or a new id reaches this process within about
`refresh_s`; the process that rotates an id forgets the old one at once (`forget`).

A request must not wait that second when it can tell the index is behind: an id it does not know (a run's
report or `firefeed feed-url` made it a moment ago), an export it knows no file of, or a file changed after
the index's last check started (a publish just switched it in: its record was committed before the
switch, `pipeline/publishing.py`). Such a request asks for a check that started after what it saw
(`fresh`): one check serves every request waiting behind it, and these checks are spaced
`ON_DEMAND_SPACING_S` apart, so a flood of unknown ids costs Postgres a few small queries a second.

`feed_auth` passwords are company secrets, resolved on demand and kept `SECRET_TTL_S` at most, so a
secret changed with `firefeed secret set` applies within that time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.feeds.store import execute, file_name
from firefeed.spec.model import FeedAuth

log = logging.getLogger(__name__)

#: The shortest time between two checks that requests asked for (`fresh`), in seconds.
ON_DEMAND_SPACING_S = 0.05
#: The longest a request waits for the time a check must start after (a bucket's whole-second times).
MAX_AHEAD_S = 1.5
#: How long a resolved feed_auth password is trusted before the company's secret is read again.
SECRET_TTL_S = 5.0


@dataclass(frozen=True)
class Published:
    """A file a run published for the export: the EXPORT step's entry and when."""

    sha256: str
    size: int
    key: str
    #: when the file was published: its run's end, or (a run still switching) its EXPORT step's
    published_at: datetime
    #: its run's end; None while the run is still switching its files in
    finished_at: datetime | None


@dataclass(frozen=True)
class Feed:
    feed_id: str
    company: str
    project: str
    export: str
    format: str
    names: frozenset[str]
    auth: FeedAuth | None
    #: newest first; the second tells which file a reader holds while the newest one is being switched in
    published: tuple[Published, ...]


def _feeds(rows: list[Any]) -> dict[str, Feed]:
    grouped: dict[str, list[Any]] = {}
    for r in rows:
        grouped.setdefault(r.feed_id, []).append(r)
    out: dict[str, Feed] = {}
    for feed_id, group in grouped.items():
        first = group[0]
        published = tuple(
            Published(r.sha256, int(r.bytes), r.key, r.finished_at or r.recorded_at, r.finished_at)
            for r in group
            if r.sha256 is not None
        )
        try:
            auth = FeedAuth.model_validate(first.feed_auth) if first.feed_auth else None
            definition_name = file_name(first.path, gzip=published[0].key.endswith(".gz") if published else False)
        except Exception:  # a spec stored before a rule existed: its feed stays unreachable rather than open
            log.warning(
                "feed of export %r of project %r has an invalid definition", first.export_name, first.project_id
            )
            continue
        names = {definition_name} | {PurePosixPath(p.key).name for p in published[:1]}
        out[feed_id] = Feed(
            feed_id,
            first.company_id,
            first.project_id,
            first.export_name,
            first.format,
            frozenset(names),
            auth,
            published,
        )
    return out


class FeedIndex:
    """The feed ids of every company, as of the last version check (one per `refresh_s` at most)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.refresh_s = settings.feed_refresh_s
        self._feeds: dict[str, Feed] = {}
        self._version: Any = None
        self._checked = float("-inf")
        self._checked_at = float("-inf")
        self._lock: asyncio.Lock | None = None
        self._secrets: dict[tuple[str, str], tuple[float, str | None]] = {}
        # Ids rotated here, with when: hidden until a reload that started after that has dropped them.
        self._forgotten: dict[str, float] = {}

    async def get(self, feed_id: str) -> Feed | None:
        """The feed of an id; an unknown one makes the index check once more (see the module's docstring)."""
        arrived = time.time()
        found = await self.known(feed_id)
        if found is None and feed_id not in self._forgotten:
            await self.fresh(arrived)
            found = await self.known(feed_id)
        return found

    async def known(self, feed_id: str) -> Feed | None:
        """The feed of an id as of the last check (one per `refresh_s` at most), without asking again."""
        if time.monotonic() - self._checked >= self.refresh_s:
            await self._refresh(self.refresh_s)
        if feed_id in self._forgotten:
            return None
        return self._feeds.get(feed_id)

    async def fresh(self, since: float) -> None:
        """Return once a check that started at `since` (wall-clock seconds) or later has ended.

        The checks behind one lock: a request that arrived before the running check started takes its
        answer; a later one waits for the next, which starts `ON_DEMAND_SPACING_S` after the last.
        """
        if self._checked_at >= since:
            return
        async with self._guard():
            if self._checked_at >= since:
                return
            ahead = min(since - time.time(), MAX_AHEAD_S)
            spacing = self._checked + ON_DEMAND_SPACING_S - time.monotonic()
            if max(ahead, spacing) > 0:
                await asyncio.sleep(max(ahead, spacing))
            await self._check()

    @property
    def checked_at(self) -> float:
        """When (wall clock) the last check of the index started."""
        return self._checked_at

    def forget(self, feed_id: str | None = None) -> None:
        """Drop an id at once (it was rotated here) and check the version on the next request."""
        if feed_id is not None:
            self._forgotten[feed_id] = time.monotonic()
            self._feeds.pop(feed_id, None)
        self._checked = float("-inf")
        self._checked_at = float("-inf")

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _refresh(self, every: float) -> None:
        async with self._guard():  # one check per process at a time; the requests behind it reuse its answer
            if time.monotonic() - self._checked < every:
                return
            await self._check()

    async def _check(self) -> None:
        started, started_at = time.monotonic(), time.time()
        try:
            self._feeds, self._version = await asyncio.to_thread(self._load, self._version, self._feeds)
        except Exception:  # Postgres away: keep serving what is known, and ask again next time
            log.warning("could not refresh the feed index; serving the one loaded before", exc_info=True)
        else:
            self._forgotten = {k: t for k, t in self._forgotten.items() if t >= started}
        # Also after a failure: requests keep being answered from what is known, not held on Postgres.
        self._checked, self._checked_at = started, started_at

    def _load(self, version: Any, feeds: dict[str, Feed]) -> tuple[dict[str, Feed], Any]:
        current = tuple(execute(self.engine, "feeds_version")[0])
        if current == version:
            return feeds, version
        return _feeds(execute(self.engine, "feed_index")), current

    async def password(self, feed: Feed) -> str | None:
        """The feed_auth password (the company's secret), or None when the secret is not set."""
        assert feed.auth is not None
        key = (feed.company, feed.auth.secret_name)
        cached = self._secrets.get(key)
        if cached is not None and time.monotonic() - cached[0] < SECRET_TTL_S:
            return cached[1]
        value = await asyncio.to_thread(self._resolve, *key)
        self._secrets[key] = (time.monotonic(), value)
        return value

    def _resolve(self, company: str, name: str) -> str | None:
        from firefeed.secrets.store import SecretStore

        return SecretStore(self.engine, self.settings).resolve(company, name)
