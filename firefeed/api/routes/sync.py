"""/api/projects/{id}/exports/{name}/sync: an export's channel API sync status, and a repair (SPEC 10 C10).

The same answers as `firefeed sync status --json` and `firefeed sync repair --json`, company-scoped: a
project of another company is 404. A repair (and a status with `?refresh=true`) lists the channel, which
can take minutes at a channel's pace: it runs on a thread of its own, never on the routes' shared pool, at
most FIREFEED_SYNC_API_PER_COMPANY of one company (429) and FIREFEED_SYNC_API_POOL_SIZE in all (503) at
once, answered within FIREFEED_SYNC_MAX_S (504; the call goes on and its sync shows what it did). So one
company asking for repairs of all its exports holds one thread, not the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict

from firefeed.api import schemas
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store
from firefeed.config import get_settings
from firefeed.preview.deadline import Deadline
from firefeed.preview.pool import BoundedPool
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
    request: Request,
    project_id: str,
    export_name: str,
    company: CurrentCompany,
    store: Store,
    refresh: bool = False,
) -> dict[str, Any]:
    """The export's sync: items on the channel, pending, failed (the first 20 with the channel's code and
    message), the channel's issues and the last sync; `?refresh=true` lists the channel first."""
    settings = get_settings()

    def status(_deadline: Deadline | None = None) -> dict[str, Any]:
        found = service.status(
            project_id, export_name, settings=settings, engine=store.engine, company=company, refresh=refresh
        )
        return found[0]

    if not refresh:
        return await run_in_threadpool(status)
    return await _bounded(request, company, status)


@router.post("/{project_id}/exports/{export_name:path}/sync/repair", responses=_NOT_FOUND)
async def sync_repair(
    request: Request,
    project_id: str,
    export_name: str,
    company: CurrentCompany,
    store: Store,
    body: RepairBody | None = None,
) -> dict[str, Any]:
    """List the channel, send what it lacks or holds otherwise; orphans deleted only with `delete_orphans`."""
    settings = get_settings()

    def repair(_deadline: Deadline) -> dict[str, Any]:
        return service.repair(
            project_id,
            export_name,
            delete_orphans=bool(body and body.delete_orphans),
            settings=settings,
            engine=store.engine,
            company=company,
            wait=False,  # beside a running sync of the export or account: answered at once
        )

    return await _bounded(request, company, repair)


async def _bounded(request: Request, company: str, work: Callable[[Deadline], dict[str, Any]]) -> dict[str, Any]:
    """`work` in the app's pool of sync calls (see the module's docstring)."""
    settings = get_settings()
    pool: BoundedPool = request.app.state.sync_calls
    return await pool.run(company, work, deadline_s=settings.sync_max_s, per_company=settings.sync_api_per_company)
