"""/api/projects/{id}/items/{key}: one item as each source brought it, through each rule, in each export (#53).

The key may hold a slash (`{key:path}`): SKUs like `A/1` are common.

It runs where previews run (the app's preview pool, preview/pool.py), bounded as they are.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.api.items import item_view
from firefeed.config import get_settings
from firefeed.preview.pool import BoundedPool

router = APIRouter(prefix="/api/projects", tags=["items"])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's), or no item of that key"},
    422: {"model": schemas.ErrorBody, "description": "a source that may not or cannot be read (as a preview's)"},
    429: {"model": schemas.ErrorBody, "description": "the company already runs FIREFEED_PREVIEW_PER_COMPANY previews"},
    502: {"model": schemas.ErrorBody, "description": "a source's server failed"},
    503: {"model": schemas.ErrorBody, "description": "every preview worker is busy"},
    504: {"model": schemas.ErrorBody, "description": "not done within FIREFEED_PREVIEW_DEADLINE_S"},
}


@router.get("/{project_id}/items/{key:path}", responses=_RESPONSES)
async def get_item(
    project_id: str, key: str, request: Request, company: CurrentCompany, store: Store
) -> dict[str, Any]:
    """The item under the stored spec: `sources` (its row in each source that has it), `rules` (what each rule
    did, as a preview's item), `fields`/`values`/`origin`/`changed` (after the project's rules), and `exports`
    (each one's `columns`, the row's `cells` or null, `excluded_by` (a rule, `where`, or null) and the
    channel checks' `findings` on that row)."""
    pool: BoundedPool = request.app.state.previews
    settings = get_settings()
    found: dict[str, Any] = await pool.run(
        company,
        lambda deadline: item_view(store, company, project_id, key, deadline),
        deadline_s=settings.preview_deadline_s,
        per_company=settings.preview_per_company,
    )
    return found
