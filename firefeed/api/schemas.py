"""Shapes of the API's answers, for /docs and for typed endpoints (the RunReport is SPEC section 5)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def run_links(run_id: str, project_id: str) -> dict[str, str]:
    return {
        "self": f"/api/runs/{run_id}",
        "cancel": f"/api/runs/{run_id}/cancel",
        "project_runs": f"/api/projects/{project_id}/pipeline/runs",
    }


def project_links(project_id: str) -> dict[str, str]:
    return {
        "self": f"/api/projects/{project_id}",
        "runs": f"/api/projects/{project_id}/pipeline/runs",
        "run": f"/api/projects/{project_id}/pipeline/run",
    }


class ErrorBody(BaseModel):
    """Every error: a stable `error` code and a `message`; some add the id needed next."""

    model_config = ConfigDict(extra="allow")

    error: str
    message: str


class BusyBody(ErrorBody):
    """409 pipeline_busy: the project's active run."""

    project: str
    run_id: str | None
    links: dict[str, str]


class SpecErrorBody(ErrorBody):
    """422 spec_error: `path` names the bad key (`sources[0].url`); "" for the whole document (too large,
    not UTF-8, not YAML or JSON, not a mapping)."""

    path: str


class RunRequest(BaseModel):
    """The optional body of a run request."""

    model_config = ConfigDict(extra="forbid")

    accept_drop: bool = False
    """Publish even when an export loses more of its items than its max_drop (a person confirmed the drop)."""
    accept_invalid: bool = False
    """Publish even when more of an export's items have channel errors than its max_invalid (SPEC 10 C3)."""
    full: bool = False
    """Recompute every item even when no source, lookup or the spec changed (SPEC 11 I2)."""


class RunAccepted(BaseModel):
    run_id: str
    status: str
    links: dict[str, str]


class RunSummary(BaseModel):
    run_id: str
    project: str
    status: str
    trigger: str
    requested_at: str | None
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    cancel_requested: bool
    links: dict[str, str]


class ProjectSummary(BaseModel):
    project: str
    company: str
    name: str | None
    schedule: str | None
    updated_at: str | None
    latest_run: RunSummary | None
    links: dict[str, str]


class ProjectList(BaseModel):
    company: str
    projects: list[ProjectSummary]


class ProjectApplied(BaseModel):
    project: str
    company: str
    created: bool
    links: dict[str, str]


class RunList(BaseModel):
    project: str
    runs: list[RunSummary]


class StepReport(BaseModel):
    step: str
    status: str
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    rows_in: int
    rows_out: int


class RunReport(BaseModel):
    """The RunReport of SPEC section 5, plus `links`."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    company: str
    project: str
    status: str
    trigger: str
    started_at: str | None
    finished_at: str | None
    duration_s: float | None
    steps: list[StepReport]
    sources: list[dict[str, Any]]
    rules: dict[str, Any]
    exports: list[dict[str, Any]]
    incremental: dict[str, Any] | None = None
    """SPEC 11 I2: {mode: full|delta|unchanged, reason, items_added, items_changed, items_removed,
    items_recomputed}; null for a run that ended before MERGE."""
    error: dict[str, Any] | None
    links: dict[str, str]


class CancelAnswer(BaseModel):
    run_id: str
    status: str
    cancel_requested: bool
    links: dict[str, str]


#: The largest offset a paged route takes: Postgres's OFFSET is a bigint, and a larger one was its error (a 500).
MAX_OFFSET = 2**63 - 1
