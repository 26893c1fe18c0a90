"""The FastAPI application: `create_app()` wires the routes, the one error handler, auth and the web page."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.engine import Engine
from starlette.responses import Response
from starlette.types import Scope

from firefeed import __version__
from firefeed.api import errors
from firefeed.api.routes import (
    alerts,
    feeds,
    findings,
    host_keys,
    items,
    lookups,
    ops,
    preview,
    projects,
    runs,
    secrets,
    specs,
    sync,
    tokens,
)
from firefeed.config import get_settings
from firefeed.feeds.http import FeedService, FeedsMiddleware
from firefeed.preview.pool import PREVIEWS, SYNC_CALLS, VALUES, BoundedPool
from firefeed.runs.local import LocalRunner
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore

log = logging.getLogger(__name__)

WEB_DIR = Path(__file__).parent / "web"
# The page loads only its own script and style and talks only to this API: nothing injected can run.
_PAGE_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """A local runner takes up the runs an earlier API process accepted, and stops with this one."""
    runner: LocalRunner | None = app.state.runner
    if runner is not None:
        resumed = await run_in_threadpool(runner.resume_pending)
        if resumed:
            log.info("taking up %d run(s) left PENDING by an earlier process", len(resumed))
    try:
        yield
    finally:
        if runner is not None:
            runner.shutdown(wait=False)


class _PageFiles(StaticFiles):
    """The page's files, each sent with the page's policy: the static mount serves index.html too
    (/web/index.html), which must not be a way around the policy `/` sends (no inline script, never framed)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.setdefault("Content-Security-Policy", _PAGE_CSP)
        return response


def create_app(*, engine: Engine | None = None, local_runs: bool = False) -> FastAPI:
    """The API and web page on `engine` (default: the configured database, pool sized by FIREFEED_WEB_POOL_SIZE).

    `local_runs`: runs requested here are driven in this process, one at a time, instead of going to a
    broker (`firefeed api` without FIREFEED_BROKER_URL: no worker anywhere could take them).
    """
    app = FastAPI(
        title="FireFeed",
        version=__version__,
        summary="Request and watch product-feed pipeline runs.",
        description=(
            "Everything under `/api` needs `Authorization: Bearer <token>` (`firefeed token create --company C`, "
            "or `POST /api/tokens` with a token: a child revoked with it); a token sees only its company. "
            "Errors are JSON with a stable `error` code and a `message`."
        ),
        lifespan=_lifespan,
    )
    # Load Celery and the task modules now rather than inside the first run request.
    import firefeed.celery_app
    import firefeed.tasks.dispatch  # noqa: F401

    app.state.store = RunStore(engine)
    app.state.runner = LocalRunner(app.state.store.engine) if local_runs else None
    app.state.tokens = TokenStore(app.state.store.engine)
    # Previews run on threads of their own, not on the pool every sync route shares (issue #15).
    app.state.previews = BoundedPool(get_settings().preview_pool_size, kind=PREVIEWS)
    # So do values calls (issue #47): one company's burst must not take the routes' threads and connections.
    app.state.values = BoundedPool(get_settings().values_pool_size, kind=VALUES)
    # So do sync repairs and refreshes (#51): each may list a channel for minutes.
    app.state.sync_calls = BoundedPool(get_settings().sync_api_pool_size, kind=SYNC_CALLS)
    errors.install(app)
    # Feed URLs (SPEC 10 C4-C5) are answered ahead of everything else: no token, a 304 from memory, and the
    # server's own `send`, whose connection a large file is sent to by the kernel (firefeed/feeds/http.py).
    app.state.feeds = FeedService(app.state.store.engine, get_settings())
    build_stack = app.build_middleware_stack
    app.build_middleware_stack = lambda: FeedsMiddleware(build_stack(), app.state.feeds)  # type: ignore[method-assign]
    app.include_router(projects.router)
    app.include_router(findings.router)
    app.include_router(specs.router)
    app.include_router(items.router)
    app.include_router(lookups.router)
    app.include_router(preview.router)
    app.include_router(runs.router)
    app.include_router(secrets.router)
    app.include_router(tokens.router)
    app.include_router(ops.router)
    app.include_router(feeds.router)
    app.include_router(sync.router)  # SPEC 10 C10: an export's channel sync status and repair
    app.include_router(alerts.router)  # SPEC 10 C8: a project's recent alerts
    app.include_router(host_keys.router)  # SPEC 10 C6: the company's pinned SFTP host keys
    app.mount("/web", _PageFiles(directory=WEB_DIR), name="web")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Content-Security-Policy": _PAGE_CSP})

    return app
