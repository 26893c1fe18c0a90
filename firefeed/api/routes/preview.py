"""POST /api/projects/{id}/preview: what the rules do to a sample of the items, for the token's company.

A preview runs in the app's pool of previews (preview/pool.py), never on the thread
pool the sync routes share, under a total deadline; one company runs a bounded
number at once.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.api.service import spec_from_body
from firefeed.config import get_settings
from firefeed.errors import NotFoundError
from firefeed.preview import DEFAULT_ITEMS, MAX_ITEMS, Preview, preview_spec
from firefeed.preview.deadline import Deadline
from firefeed.preview.pool import BoundedPool
from firefeed.preview.service import sample_ids
from firefeed.runs.service import RunStore
from firefeed.secrets.references import SpecOrigin
from firefeed.secrets.references import check_spec as check_references

router = APIRouter(prefix="/api/projects", tags=["preview"])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's)"},
    422: {
        "model": schemas.ErrorBody,
        "description": "invalid spec (`spec_error`, `path` names the key), bad query (`invalid_request`), "
        "or a source that may not or cannot be read (`unsafe_url`, `invalid_source_request`, `unsafe_path`, "
        "`parse_error`, `merge_error`); source errors name it in `source`; or data the database refused "
        "(`preview_failed`: SQLSTATE classes 22 and 54, the database's message)",
    },
    429: {
        "model": schemas.ErrorBody,
        "description": "the company already runs FIREFEED_PREVIEW_PER_COMPANY previews (`too_many_previews`); "
        "`Retry-After` and `retry_after` say when to try again",
    },
    502: {
        "model": schemas.ErrorBody,
        "description": "a source's server failed: an HTTP error, a timeout, a refused connection, "
        "a file over the size cap (`fetch_error`)",
    },
    503: {
        "model": schemas.ErrorBody,
        "description": "every preview worker is busy (`previews_busy`); `Retry-After` says when to try again; "
        "or the database cannot serve the preview now (`preview_failed`: SQLSTATE classes 08, 40, 53, 55, 57)",
    },
    504: {
        "model": schemas.ErrorBody,
        "description": "the preview did not finish within FIREFEED_PREVIEW_DEADLINE_S (`preview_timeout`); "
        "the message names the step that was running",
    },
}
_OPTIONAL_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": False,
        "description": "A project spec (SPEC section 2) as JSON or YAML to preview; no body previews the stored spec.",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


def _preview(
    store: RunStore,
    company: str,
    project_id: str,
    body: bytes,
    items: int | None,
    ids: list[str] | None,
    deadline: Deadline,
) -> Preview:
    try:
        existing = store.project(project_id)
    except NotFoundError:
        existing = None
    if existing is not None and existing.company_id != company:
        raise NotFoundError(f"unknown project {project_id!r}")
    if body.strip():
        # A draft may name a project that does not exist yet; it has no folder, like a PUT spec.
        spec = spec_from_body(company, project_id, body, where=f"POST /api/projects/{project_id}/preview")
        check_references(spec, SpecOrigin.REMOTE, "")  # a draft sent over the API may not read the environment
        spec_dir = None
    elif existing is None:
        raise NotFoundError(f"unknown project {project_id!r}")
    else:
        spec, spec_dir = store.project_spec(project_id)
    return preview_spec(
        spec, spec_dir=spec_dir, items=items or DEFAULT_ITEMS, ids=ids, engine=store.engine, deadline=deadline
    )


@router.post("/{project_id}/preview", response_model=Preview, responses=_RESPONSES, openapi_extra=_OPTIONAL_SPEC_BODY)
async def preview_project(
    project_id: str,
    request: Request,
    company: CurrentCompany,
    store: Store,
    items: Annotated[
        int | None, Query(ge=1, le=MAX_ITEMS, description=f"the first N items of the primary (default {DEFAULT_ITEMS})")
    ] = None,
    item: Annotated[list[str] | None, Query(description="item ids to preview instead (repeat the parameter)")] = None,
) -> Preview:
    """Run FETCH..RULES on a sample in a throwaway schema: per rule its counts, per item each change.

    The project's tables, runs and exports are untouched, and no lock is taken: a preview may run while a
    run of the project is active. A preview ends within FIREFEED_PREVIEW_DEADLINE_S (504 past it); a company
    runs at most FIREFEED_PREVIEW_PER_COMPANY at once (429) and the server FIREFEED_PREVIEW_POOL_SIZE (503).
    The answer is at most FIREFEED_PREVIEW_MAX_ANSWER_BYTES: items past it are left out and `cut` says so.
    """
    ids = None
    try:
        if item is not None and items is not None:
            raise ValueError("give either `items` or `item`, not both")
        ids = sample_ids(item) if item is not None else None
    except ValueError as err:
        raise RequestValidationError([{"loc": ("query", "item"), "msg": str(err), "type": "value_error"}]) from None
    body = await request.body()
    pool: BoundedPool = request.app.state.previews
    settings = get_settings()
    return await pool.run(
        company,
        lambda deadline: _preview(store, company, project_id, body, items, ids, deadline),
        deadline_s=settings.preview_deadline_s,
        per_company=settings.preview_per_company,
    )
