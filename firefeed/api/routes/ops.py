"""Operations endpoints, open without a token: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import text

router = APIRouter(tags=["operations"])

# A readiness probe must answer before the orchestrator's own probe timeout (1 s by default in Kubernetes
# is too tight for a broker reconnect, so we allow 2 s per check and run the checks side by side).
CHECK_TIMEOUT_S = 2.0
_checks = ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


def _database(request: Request) -> Callable[[], None]:
    def check() -> None:
        with request.app.state.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    return check


def _broker() -> None:
    from firefeed.celery_app import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=CHECK_TIMEOUT_S)


# Async: it touches nothing that blocks, so it answers on the event loop even while a flood of sync
# requests holds every thread of the pool (a liveness probe that queues there gets the process killed).
@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: 200 whenever the process answers."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "a dependency is unreachable; the body names it"}})
def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 when the database answers `SELECT 1` and the broker accepts a connection, else 503."""
    futures = {"database": _checks.submit(_database(request)), "broker": _checks.submit(_broker)}
    checks: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(timeout=CHECK_TIMEOUT_S)
            checks[name] = "ok"
        except FutureTimeout:
            checks[name] = f"no answer within {CHECK_TIMEOUT_S:g}s"
        except Exception as err:
            checks[name] = f"{type(err).__name__}: {err}"
    failed = [name for name, state in checks.items() if state != "ok"]
    if failed:
        body = {"status": "unavailable", "error": "not_ready", "message": f"unreachable: {', '.join(failed)}"}
        return JSONResponse({**body, "checks": checks}, status_code=503)
    return JSONResponse({"status": "ok", "checks": checks})


@router.get("/metrics", response_class=Response)
def metrics() -> Response:
    """Prometheus text exposition of the process's default registry."""
    from firefeed.metrics import render

    body, content_type = render()
    return Response(body, media_type=content_type)
