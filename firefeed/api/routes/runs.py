"""/api/runs/{run_id}: one run's RunReport, and cancelling it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from firefeed.api import schemas, service
from firefeed.api.auth import CurrentCompany
from firefeed.api.deps import Store

router = APIRouter(prefix="/api/runs", tags=["runs"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "unknown run (or another company's)"}
}


@router.get("/{run_id}", response_model=schemas.RunReport, responses=_NOT_FOUND)
def get_run(run_id: str, company: CurrentCompany, store: Store) -> dict[str, Any]:
    """The run's RunReport: status, trigger, step timeline, sources, rules, exports, error."""
    return service.run_report(store, company, run_id)


@router.post(
    "/{run_id}/cancel",
    response_model=schemas.CancelAnswer,
    responses={
        202: {"model": schemas.CancelAnswer, "description": "a RUNNING run: its statements are cancelled"},
        **_NOT_FOUND,
    },
)
def cancel_run(run_id: str, response: Response, company: CurrentCompany, store: Store) -> schemas.CancelAnswer:
    """Stop a PENDING run at once (200, CANCELLED) or a RUNNING one within seconds (202): the
    statements its backends run are cancelled through Postgres, on whichever machine they are.

    A finished run is left as it is (200, its final status).
    """
    answer = service.cancel_run(store, company, run_id)
    response.status_code = 202 if answer.status == "RUNNING" else 200
    return answer
