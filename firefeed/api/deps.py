"""Per-app objects the endpoints share, looked up on `app.state` (set by create_app)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from firefeed.runs.service import RunStore


async def run_store(request: Request) -> RunStore:
    # Async: a plain lookup, which as a sync dependency would cost a trip through the thread pool.
    store: RunStore = request.app.state.store
    return store


Store = Annotated[RunStore, Depends(run_store)]
