"""/api/projects/{id}/exports/{name}/feed-url: the export's feed URL, and rotating its secret (SPEC 10 C4).

The feed URLs themselves (`/feeds/...`) are answered by `firefeed.feeds.http`, ahead of this app.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.config import get_settings
from firefeed.feeds import store as feeds

router = APIRouter(prefix="/api/projects", tags=["feeds"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or export"}
}


@router.get("/{project_id}/feed-urls", responses=_NOT_FOUND)
def feed_urls(project_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """Each export's feed URL and last fetch (ids are created for exports that have none yet)."""
    found = feeds.project_feeds(store.engine, get_settings(), project_id, company=company)
    return {"feed_urls": [f.as_dict() for f in found]}


@router.post("/{project_id}/exports/{export_name}/feed-url/rotate", responses=_NOT_FOUND)
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
