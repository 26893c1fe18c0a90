"""Feed ids in the control plane: created the first time an export's URL is asked for, rotated on request.

A feed id is `secrets.token_urlsafe(24)` (192 bits): the URL is the credential when the export has no
`feed_auth`, so it must not be guessable. Ids are created lazily (the RunReport of a run that published,
`firefeed feed-url`, the project's API page), so every export that was ever published or shown has one;
rotating replaces it in one statement, and the API process that rotates forgets the old one at once.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.db.sqlfile import load_queries
from firefeed.errors import NotFoundError


def _sql(name: str) -> str:
    return load_queries("firefeed.feeds")[name]


def new_feed_id() -> str:
    return secrets.token_urlsafe(24)


def execute(engine: Engine, name: str, params: dict[str, Any] | None = None) -> list[Any]:
    """The named statement of feeds/queries.sql in its own transaction; its rows ([] when none)."""
    with engine.begin() as conn:
        result = conn.exec_driver_sql(_sql(name), params or {})
        return list(result.all()) if result.returns_rows else []


def file_name(path: str, *, gzip: bool = False) -> str:
    """The last part of the export's written path: what its feed URL ends with."""
    from firefeed.export.paths import written_path

    return PurePosixPath(written_path(path, gzip=gzip)).name


def feed_path(feed_id: str, name: str) -> str:
    return f"/feeds/{feed_id}/{name}"


def feed_url(settings: Settings, feed_id: str, name: str) -> str:
    """Absolute under FIREFEED_PUBLIC_URL when it is set, else the path on the API's host."""
    base = (settings.public_url or "").rstrip("/")
    return base + feed_path(feed_id, name)


@dataclass(frozen=True)
class LastFetch:
    at: datetime
    user_agent: str | None
    status: int

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "user_agent": self.user_agent, "status": self.status}


@dataclass(frozen=True)
class FeedInfo:
    """One export's feed URL as the CLI, the API and the RunReport show it."""

    export: str
    feed_id: str
    url: str
    last_fetch: LastFetch | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "export": self.export,
            "url": self.url,
            "last_fetch": self.last_fetch.as_dict() if self.last_fetch else None,
        }


def project_feeds(engine: Engine, settings: Settings, project_id: str, *, company: str | None = None) -> list[FeedInfo]:
    """Every current export's feed URL, in spec order, giving an id to those that have none yet.

    NotFoundError when the project is unknown (or belongs to another company than `company`).
    """
    _check_owner(engine, project_id, company)
    rows = execute(engine, "project_exports", {"project_id": project_id})
    if any(r.feed_id is None for r in rows):
        for r in rows:
            if r.feed_id is None:
                execute(
                    engine,
                    "insert_feed_id",
                    {"project_id": project_id, "export_name": r.name, "feed_id": new_feed_id()},
                )
        rows = execute(engine, "project_exports", {"project_id": project_id})
    out = []
    for r in rows:
        name = file_name(r.path, gzip=bool((r.definition or {}).get("gzip")))
        last = (
            LastFetch(r.last_fetch_at, r.last_fetch_user_agent, r.last_fetch_status)
            if r.last_fetch_at is not None
            else None
        )
        out.append(FeedInfo(r.name, r.feed_id, feed_url(settings, r.feed_id, name), last))
    return out


def _check_owner(engine: Engine, project_id: str, company: str | None) -> None:
    """NotFoundError, with the same words, for an unknown project and another company's."""
    owner = execute(engine, "project_exists", {"project_id": project_id})
    if not owner or (company is not None and owner[0].company_id != company):
        raise NotFoundError(f"unknown project {project_id!r}")


def rotate(engine: Engine, project_id: str, export: str, *, company: str | None = None) -> str:
    """Give the export a new feed id; the old one is forgotten. NotFoundError for an unknown project or export."""
    _check_owner(engine, project_id, company)
    rows = execute(engine, "project_exports", {"project_id": project_id})
    if export not in {r.name for r in rows}:
        raise NotFoundError(f"project {project_id!r} has no export {export!r}")
    done = execute(
        engine, "rotate_feed_id", {"project_id": project_id, "export_name": export, "feed_id": new_feed_id()}
    )
    return str(done[0].feed_id)
