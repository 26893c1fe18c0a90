"""/api/projects/{id}/lookups/{name}: rows added to a lookup the spec holds, and its unmatched values (#53)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from firefeed.api import lookups, schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.bodies import bounded_body
from firefeed.api.deps import Store
from firefeed.api.spec_writes import SPEC_WRITES
from firefeed.config import get_settings
from firefeed.errors import SpecError
from firefeed.runs.service import RunStore

router = APIRouter(prefix="/api/projects", tags=["lookups"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's) or lookup"}
}


def _add(store: RunStore, company: str, project_id: str, name: str, body: bytes) -> dict[str, Any]:
    with SPEC_WRITES.admitted(company):  # an apply: the PUT's bound
        store.project(project_id, company=company)  # another company's project: 404 before a word on the body
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            raise SpecError("", 'the body must be JSON: {"rows": [{"<column>": "<text>", ...}, ...]}') from None
        return lookups.add_rows(store, company, project_id, name, lookups.checked_rows(parsed))


@router.post(
    "/{project_id}/lookups/{name:path}/rows",
    responses={
        **_NOT_FOUND,
        409: {"model": schemas.ErrorBody, "description": "a lookup read from a file (`lookup_not_inline`)"},
        413: {"model": schemas.ErrorBody, "description": "the body is larger than FIREFEED_SPEC_MAX_BYTES"},
        422: {"model": schemas.SpecErrorBody, "description": "bad rows, or the spec with them fails its checks"},
        429: {"model": schemas.ErrorBody, "description": "too many spec writes of the company at once"},
    },
)
async def add_lookup_rows(
    project_id: str, name: str, request: Request, company: CurrentCompany, store: Store
) -> dict[str, Any]:
    """Append `{"rows": [{"<key column>": "value", "<column>": "..."}]}` to a lookup written in the spec
    (`rows:`): a new spec version through the apply path. Answers the PUT's answer plus `lookup` and `rows`
    (how many it now holds)."""
    cap = get_settings().spec_max_bytes
    body = await bounded_body(request, cap, f"the body is larger than {cap} bytes (FIREFEED_SPEC_MAX_BYTES)")
    return await run_in_threadpool(_add, store, company, project_id, name, body)


@router.get("/{project_id}/lookups/{name:path}/unmatched", responses=_NOT_FOUND)
def lookup_unmatched(project_id: str, name: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The last succeeded run's unmatched values of the lookup actions using it, most frequent first, with
    counts added up over the actions (`values`), and each action's counts (`actions`); `run_id` null and no
    values before a run succeeded."""
    return lookups.unmatched(store, company, project_id, name)
