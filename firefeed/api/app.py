"""The FastAPI application: `create_app()` wires the routes, the one error handler, auth and the web page."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy.engine import Engine

from firefeed import __version__
from firefeed.api import errors
from firefeed.api.routes import ops, preview, projects, runs, secrets
from firefeed.config import get_settings
from firefeed.preview.pool import PreviewPool
from firefeed.runs.service import RunStore
from firefeed.runs.tokens import TokenStore

WEB_DIR = Path(__file__).parent / "web"
# The page loads only its own script and style and talks only to this API: nothing injected can run.
_PAGE_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


def create_app(*, engine: Engine | None = None) -> FastAPI:
    """The API and web page on `engine` (default: the configured database, pool sized by FIREFEED_WEB_POOL_SIZE)."""
    app = FastAPI(
        title="FireFeed",
        version=__version__,
        summary="Request and watch product-feed pipeline runs.",
        description=(
            "Everything under `/api` needs `Authorization: Bearer <token>` (`firefeed token create --company C`); "
            "a token sees only its company. Errors are JSON with a stable `error` code and a `message`."
        ),
    )
    # Load Celery and the task modules now rather than inside the first run request.
    import firefeed.celery_app
    import firefeed.tasks.dispatch  # noqa: F401

    app.state.store = RunStore(engine)
    app.state.tokens = TokenStore(app.state.store.engine)
    # Previews run on threads of their own, not on the pool every sync route shares (issue #15).
    app.state.previews = PreviewPool(get_settings().preview_pool_size)
    errors.install(app)
    app.include_router(projects.router)
    app.include_router(preview.router)
    app.include_router(runs.router)
    app.include_router(secrets.router)
    app.include_router(ops.router)
    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Content-Security-Policy": _PAGE_CSP})

    return app
