"""/api/projects: specs, run requests (the lock) and run listings of the token's company."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from firefeed.api import schemas, service
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.api.spec_writes import SPEC_WRITES, busy_response, spec_body
from firefeed.config import get_settings
from firefeed.runs.local import LocalRunner
from firefeed.runs.requests import start_run
from firefeed.runs.service import RunStore

router = APIRouter(prefix="/api/projects", tags=["projects"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's)"}
}
_BUSY: dict[int | str, dict[str, Any]] = {
    409: {"model": schemas.BusyBody, "description": "the project already has a PENDING or RUNNING run"}
}
_BAD_SPEC: dict[int | str, dict[str, Any]] = {
    422: {"model": schemas.SpecErrorBody, "description": "invalid spec; `path` names the key"}
}
_SPEC_WRITES = busy_response()
_SPEC_BODY = spec_body("The project spec (SPEC section 2) as JSON or YAML.")


@router.get("", response_model=schemas.ProjectList)
def list_projects(company: CurrentCompany, store: Store) -> schemas.ProjectList:
    """The token's company's projects, each with its latest run."""
    return service.list_projects(store, company)


@router.get("/{project_id}", responses=_NOT_FOUND)
def get_project(project_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The project's stored spec."""
    return service.project_spec(store, company, project_id)


def _apply(store: RunStore, company: str, project_id: str, body: bytes) -> schemas.ProjectApplied:
    # Held by the thread that validates, for as long as it does: a client that hangs up frees nothing early.
    with SPEC_WRITES.admitted(company):
        return service.apply_project(store, company, project_id, body)


@router.put(
    "/{project_id}",
    response_model=schemas.ProjectApplied,
    responses={
        201: {"model": schemas.ProjectApplied, "description": "created"},
        **_NOT_FOUND,
        **_BAD_SPEC,
        **_SPEC_WRITES,
    },
    openapi_extra=_SPEC_BODY,
)
async def put_project(
    project_id: str, request: Request, response: Response, company: CurrentCompany, store: Store
) -> schemas.ProjectApplied:
    """Create (201) or update (200) the project from its spec; `project` and `company` must match."""
    body = await request.body()
    applied = await run_in_threadpool(_apply, store, company, project_id, body)
    response.status_code = 201 if applied.created else 200
    return applied


# The body is optional: a bare POST requests an ordinary run.
RunBody = Annotated[schemas.RunRequest | None, Body()]


def _request_run(
    project_id: str,
    company: str,
    store: RunStore,
    response: Response,
    body: schemas.RunRequest | None,
    runner: LocalRunner | None,
) -> schemas.RunAccepted:
    accept_drop = body.accept_drop if body is not None else False
    accept_invalid = body.accept_invalid if body is not None else False
    full = body.full if body is not None else False
    enqueue = runner.submit if runner is not None else None
    run_id = start_run(
        project_id,
        "api",
        company=company,
        store=store,
        accept_drop=accept_drop,
        accept_invalid=accept_invalid,
        full=full,
        enqueue=enqueue,
    )
    response.headers["Location"] = f"/api/runs/{run_id}"
    return schemas.RunAccepted(run_id=run_id, status="PENDING", links=schemas.run_links(run_id, project_id))


# The run requests are async and make exactly one trip to the thread pool (the lock transaction and the
# enqueue): under a burst for one project, every extra hop is queueing time on a busy pool.
@router.post("/{project_id}/pipeline/run", status_code=202, responses={**_NOT_FOUND, **_BUSY})
async def run_pipeline(
    project_id: str, request: Request, response: Response, company: CurrentCompany, store: Store, body: RunBody = None
) -> schemas.RunAccepted:
    """Request a run through the project lock: 202 with its id, or 409 naming the active run at once.

    `{"accept_drop": true}` lets the run publish exports that lose more items than their max_drop,
    `{"accept_invalid": true}` exports with more items in channel error than their max_invalid,
    `{"full": true}` recomputes every item even when no input changed (SPEC 11 I2).
    """
    return await run_in_threadpool(_request_run, project_id, company, store, response, body, request.app.state.runner)


@router.post("/{project_id}/pipeline/run-now", status_code=202, responses={**_NOT_FOUND, **_BUSY})
async def run_pipeline_now(
    project_id: str, request: Request, response: Response, company: CurrentCompany, store: Store, body: RunBody = None
) -> schemas.RunAccepted:
    """The same request as `.../pipeline/run` (an alias kept for callers that use this name)."""
    return await run_in_threadpool(_request_run, project_id, company, store, response, body, request.app.state.runner)


@router.get("/{project_id}/pipeline/runs", response_model=schemas.RunList, responses=_NOT_FOUND)
def list_runs(
    project_id: str,
    company: CurrentCompany,
    store: Store,
    limit: Annotated[int, Query(ge=1, le=200, description="at most this many runs")] = 20,
) -> schemas.RunList:
    """The project's runs, newest first."""
    return service.project_runs(store, company, project_id, limit)


_VALUES_LIMITS: dict[int | str, dict[str, Any]] = {
    429: {
        "model": schemas.ErrorBody,
        "description": "the company already has FIREFEED_VALUES_PER_COMPANY values calls in progress "
        "(`too_many_values_calls`); `Retry-After` and `retry_after` say when to try again",
    },
    503: {
        "model": schemas.ErrorBody,
        "description": "every values worker is busy (`values_busy`); `Retry-After` says when to try again",
    },
    504: {
        "model": schemas.ErrorBody,
        "description": "the call did not finish within FIREFEED_VALUES_DEADLINE_S (`values_timeout`)",
    },
}


# Async, and never on the thread pool the sync routes share: a call runs in the app's pool of values calls
# (preview/pool.py), under a deadline, a bounded number per company (issue #47).
@router.get("/{project_id}/values", responses={**_NOT_FOUND, **_BAD_SPEC, **_VALUES_LIMITS})
async def field_values(
    project_id: str,
    request: Request,
    company: CurrentCompany,
    store: Store,
    field: Annotated[str, Query(min_length=1, description="the field whose values to list (SPEC 9, P33)")],
) -> dict[str, Any]:
    """A field's distinct values after the project's rules (latest succeeded run), most frequent first.

    The same as `firefeed values PROJECT FIELD --json`; 404 for an unknown project or one without a
    succeeded run, 422 when the field is not one of its fields after its rules. Read from the result the
    run kept; a company runs at most FIREFEED_VALUES_PER_COMPANY calls at once (429), the server
    FIREFEED_VALUES_POOL_SIZE (503), each within FIREFEED_VALUES_DEADLINE_S (504).
    """
    from firefeed.pipeline.values import values_within
    from firefeed.preview.pool import BoundedPool

    pool: BoundedPool = request.app.state.values
    settings = get_settings()
    found = await pool.run(
        company,
        lambda deadline: values_within(store.engine, project_id, field, company=company, deadline=deadline),
        deadline_s=settings.values_deadline_s,
        per_company=settings.values_per_company,
    )
    return found.to_json()
