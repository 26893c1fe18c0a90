"""/api/projects/{id}/exports/{name}/feed-url: the export's feed URL, rotating its secret (SPEC 10 C4), and
the published file itself for the page's download (token auth, issue #53).

The feed URLs themselves (`/feeds/...`) are answered by `firefeed.feeds.http`, ahead of this app.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.config import get_settings
from firefeed.errors import NotFoundError
from firefeed.feeds import store as feeds
from firefeed.feeds.files import open_published
from firefeed.feeds.http import CONTENT_TYPES
from firefeed.storage import export_storage

router = APIRouter(prefix="/api/projects", tags=["feeds"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or export"}
}


@router.get("/{project_id}/feed-urls", responses=_NOT_FOUND)
def feed_urls(project_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """Each export's feed URL and last fetch (ids are created for exports that have none yet)."""
    found = feeds.project_feeds(store.engine, get_settings(), project_id, company=company)
    return {"feed_urls": [f.as_dict() for f in found]}


@router.post("/{project_id}/exports/{export_name:path}/feed-url/rotate", responses=_NOT_FOUND)
async def rotate_feed_url(
    project_id: str, export_name: str, request: Request, company: CurrentCompany, store: Store
) -> dict[str, Any]:
    """A new secret in the export's feed URL: the old URL answers 404 from now on (other API processes:
    within FIREFEED_FEED_REFRESH_S)."""
    settings = get_settings()
    old = await run_in_threadpool(feeds.project_feeds, store.engine, settings, project_id, company=company)
    await run_in_threadpool(feeds.rotate, store.engine, project_id, export_name, company=company)
    for info in old:
        if info.export == export_name:
            request.app.state.feeds.index.forget(info.feed_id)
    found = await run_in_threadpool(feeds.project_feeds, store.engine, settings, project_id, company=company)
    return next(f.as_dict() for f in found if f.export == export_name)


_FILE: dict[int | str, dict[str, Any]] = {
    200: {"description": "the export's last published file, as the feed URL serves it"},
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or export, or no file"},
}


def _disposition(name: str) -> str:
    """`attachment` with the file's name: an ASCII fallback and the exact name (RFC 6266 / 5987)."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "feed"
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


@router.get("/{project_id}/exports/{export_name:path}/file", responses=_FILE, response_class=StreamingResponse)
async def export_file(
    project_id: str, export_name: str, request: Request, company: CurrentCompany, store: Store
) -> StreamingResponse:
    """Download the export's published file (`Content-Disposition: attachment`), streamed from where the feed
    URL reads it: the same file, opened once, so a publish meanwhile cannot mix two files."""
    settings = get_settings()
    found = await run_in_threadpool(feeds.project_feeds, store.engine, settings, project_id, company=company)
    info = next((f for f in found if f.export == export_name), None)
    if info is None:
        raise NotFoundError(f"project {project_id!r} has no export {export_name!r}")
    feed = await request.app.state.feeds.index.get(info.feed_id)
    opened = await run_in_threadpool(open_published, export_storage(settings), feed) if feed is not None else None
    if feed is None or opened is None:
        raise NotFoundError(f"export {export_name!r} has no published file yet")
    key = feed.published[0].key
    kind = b"application/gzip" if key.endswith(".gz") else CONTENT_TYPES.get(feed.format, b"application/octet-stream")

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in opened.chunks(0, opened.size):
                yield chunk
        finally:  # also when the client goes away mid-file: the descriptor is not left to the collector
            opened.close()

    return StreamingResponse(
        body(),
        media_type=kind.decode(),
        headers={
            "Content-Disposition": _disposition(PurePosixPath(key).name),
            "Content-Length": str(opened.size),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )
