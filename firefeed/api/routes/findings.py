"""/api/projects/{id}/exports/{name}/findings: the items behind an export's channel findings (#49)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.export.channels import CHECKS
from firefeed.export.findings_list import DEFAULT_LIMIT, MAX_LIMIT, list_findings

router = APIRouter(prefix="/api/projects", tags=["projects"])


class FindingItem(BaseModel):
    key: str
    check: str
    attribute: str
    severity: Literal["error", "warning"]
    value: str | None
    message: str


class FindingsAnswer(BaseModel):
    export: str
    run_id: str | None
    source: Literal["published", "blocked"] | None
    total: int
    offset: int
    limit: int
    next_offset: int | None
    items: list[FindingItem]
    #: why there is nothing to read (no channel, nothing published or checked yet); None when a table was read
    reason: str | None


_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or export"},
    422: {"model": schemas.SpecErrorBody, "description": "an unknown check (the message lists the checks)"},
    504: {
        "model": schemas.ErrorBody,
        "description": "the read did not finish within FIREFEED_VALUES_DEADLINE_S (`values_timeout`)",
    },
}


@router.get("/{project_id}/exports/{export:path}/findings", response_model=FindingsAnswer, responses=_ERRORS)
def export_findings(
    project_id: str,
    export: str,
    company: CurrentCompany,
    store: Store,
    check: Annotated[str | None, Query(description=f"only this check's items: {', '.join(CHECKS)}")] = None,
    offset: Annotated[int, Query(ge=0, le=schemas.MAX_OFFSET, description="skip this many items")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="at most this many items")] = DEFAULT_LIMIT,
) -> dict[str, Any]:
    """The items behind the export's channel findings, in export order: the same as `firefeed findings
    PROJECT EXPORT --json`.

    Read from the export's last run blocked before publishing (`source: blocked`) when there is one,
    else from its last published file (`published`); with neither, or without a channel, no items and a
    `reason`. `next_offset` is the offset of the next page (null on the last).
    """
    page = list_findings(store.engine, project_id, export, company=company, check=check, offset=offset, limit=limit)
    return page.to_json()
