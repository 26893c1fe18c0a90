"""/api/projects/{id}/exports/{name}/sync: an export's channel API sync status, and a repair (SPEC 10 C10).

The same answers as `firefeed sync status --json` and `firefeed sync repair --json`, company-scoped: a
project of another company is 404. A repair lists the channel and sends what differs, which can take
minutes at a channel's pace: it runs on a thread of the routes' pool, bounded by FIREFEED_SYNC_MAX_S.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.config import get_settings
from firefeed.sync import service

router = APIRouter(prefix="/api/projects", tags=["sync"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown project (or another company's), export, or no sync"}
}


class RepairBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    delete_orphans: bool = False


@router.get("/{project_id}/exports/{export_name:path}/sync", responses=_NOT_FOUND)
async def sync_status(
    project_id: str, export_name: str, company: CurrentCompany, store: Store, refresh: bool = False
) -> dict[str, Any]:
    """The export's sync: items on the channel, pending, failed (the first 20 with the channel's code and
    message), the channel's issues and the last sync; `?refresh=true` lists the channel first."""
    found = await run_in_threadpool(
        service.status,
        project_id,
        export_name,
        settings=get_settings(),
        engine=store.engine,
        company=company,
        refresh=refresh,
    )
    return found[0]


@router.post("/{project_id}/exports/{export_name:path}/sync/repair", responses=_NOT_FOUND)
async def sync_repair(
    project_id: str, export_name: str, company: CurrentCompany, store: Store, body: RepairBody | None = None
) -> dict[str, Any]:
    """List the channel, send what it lacks or holds otherwise; orphans deleted only with `delete_orphans`."""
    return await run_in_threadpool(
        service.repair,
        project_id,
        export_name,
        delete_orphans=bool(body and body.delete_orphans),
        settings=get_settings(),
        engine=store.engine,
        company=company,
        wait=False,  # beside a running sync of the export or account: answered at once, never a thread held
    )
