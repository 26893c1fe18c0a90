"""/api/projects/{id}/spec, /validate and /versions: the spec as the page edits it (issue #53).

Validation and restore hold one of the company's SPEC_WRITES places while they run, as a PUT does:
both are the PUT's CPU-bound checks (a restore is an apply).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from firefeed.api import schemas, specs
from firefeed.api.auth import CurrentCompany
from firefeed.api.bodies import bounded_body
from firefeed.api.deps import Store
from firefeed.api.spec_writes import SPEC_WRITES, busy_response, spec_body
from firefeed.config import get_settings
from firefeed.runs.service import RunStore

router = APIRouter(prefix="/api/projects", tags=["specs"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or version"}
}
_WRITES = busy_response()
_SPEC_BODY = spec_body("The project spec (SPEC section 2) as JSON or YAML, as PUT takes it.")


@router.get("/{project_id}/spec", responses=_NOT_FOUND)
def get_spec(project_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The current spec: `version` (its spec version id), `yaml` (text in the document's key order), `spec`
    (the object) and `applied_at`."""
    return specs.spec_document(store, company, project_id)


def _validate(store: RunStore, company: str, project_id: str, body: bytes) -> dict[str, Any]:
    with SPEC_WRITES.admitted(company):
        return specs.validate(store, company, project_id, body)


@router.post(
    "/{project_id}/validate",
    responses={
        **_NOT_FOUND,
        413: {"model": schemas.ErrorBody, "description": "the body is larger than FIREFEED_SPEC_MAX_BYTES"},
        **_WRITES,
    },
    openapi_extra=_SPEC_BODY,
)
async def validate_spec(project_id: str, request: Request, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The PUT's checks on a draft, storing nothing: `{"ok": true}` or `{"ok": false, "errors": [...]}`, each
    error with its `path`, `line`, `column` (1-based, in the text sent), `message` and `suggestion` (or null).

    A project that does not exist yet may be validated (the page creates projects); another company's is 404.
    No body checks the stored spec again.
    """
    cap = get_settings().spec_max_bytes
    body = await bounded_body(request, cap, f"the spec is larger than {cap} bytes (FIREFEED_SPEC_MAX_BYTES)")
    return await run_in_threadpool(_validate, store, company, project_id, body)


@router.get("/{project_id}/versions", responses=_NOT_FOUND)
def list_versions(project_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The project's stored spec versions, newest first: `version`, `created_at`, `bytes`, `current`, `runs`."""
    return specs.versions(store, company, project_id)


@router.get("/{project_id}/versions/{version}", responses=_NOT_FOUND)
def get_version(project_id: str, version: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """One stored version: `version`, `yaml`, `spec`, `created_at`."""
    return specs.version_document(store, company, project_id, version)


def _restore(store: RunStore, company: str, project_id: str, version: str) -> schemas.ProjectApplied:
    with SPEC_WRITES.admitted(company):
        return specs.restore(store, company, project_id, version)


@router.post(
    "/{project_id}/versions/{version}/restore",
    response_model=schemas.ProjectApplied,
    responses={
        **_NOT_FOUND,
        422: {"model": schemas.SpecErrorBody, "description": "the old document fails today's checks"},
        **_WRITES,
    },
)
async def restore_version(
    project_id: str, version: str, response: Response, company: CurrentCompany, store: Store
) -> schemas.ProjectApplied:
    """Apply that version's document as the project's spec (a new apply, as PUT): the PUT's answer."""
    applied = await run_in_threadpool(_restore, store, company, project_id, version)
    response.status_code = 201 if applied.created else 200
    return applied
