"""What the endpoints do, without HTTP: company scoping, spec upload, run listings, cancel.

Every lookup takes the caller's company: an object of another company is
reported exactly like a missing one (NotFoundError -> 404).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from firefeed.api import schemas
from firefeed.db.models import PipelineRun, Project
from firefeed.errors import NotFoundError, SpecError
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from firefeed.spec.loader import check_spec_size, load_spec
from firefeed.spec.model import ProjectSpec


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def cancel_asked(run: PipelineRun) -> bool:
    """Whether somebody asked to cancel the run.

    A failing run raises the same flag itself, to stop its own jobs before the project is freed
    (pipeline/driver.py, `_stop_jobs`), so on a FAILED run the flag says nothing about a person.
    """
    return bool(run.cancel_requested) and run.status != "FAILED"


def run_summary(run: PipelineRun) -> schemas.RunSummary:
    duration = (run.finished_at - run.started_at).total_seconds() if run.started_at and run.finished_at else None
    return schemas.RunSummary(
        run_id=str(run.id),
        project=run.project_id,
        status=run.status,
        trigger=run.trigger,
        requested_at=_iso(run.requested_at),
        started_at=_iso(run.started_at),
        finished_at=_iso(run.finished_at),
        duration_s=round(duration, 3) if duration is not None else None,
        cancel_requested=cancel_asked(run),
        links=schemas.run_links(str(run.id), run.project_id),
    )


def list_projects(store: RunStore, company: str) -> schemas.ProjectList:
    """The company's projects, each with its latest run (one query each, not one per project)."""
    with store.sessions() as s:
        projects = list(s.scalars(select(Project).where(Project.company_id == company).order_by(Project.id)))
        newest_first = (
            select(
                PipelineRun,
                func.row_number()
                .over(partition_by=PipelineRun.project_id, order_by=PipelineRun.requested_at.desc())
                .label("n"),
            )
            .where(PipelineRun.company_id == company)
            .subquery()
        )
        run = aliased(PipelineRun, newest_first)
        latest = {r.project_id: r for r in s.scalars(select(run).where(newest_first.c.n == 1))}
    return schemas.ProjectList(
        company=company,
        projects=[
            schemas.ProjectSummary(
                project=p.id,
                company=p.company_id,
                name=p.name,
                schedule=p.schedule,
                updated_at=_iso(p.updated_at),
                latest_run=run_summary(latest[p.id]) if p.id in latest else None,
                links=schemas.project_links(p.id),
            )
            for p in projects
        ],
    )


#: Keys GET /api/projects/{id} adds to the stored spec; a PUT of that answer ignores them.
READ_ONLY_KEYS = frozenset({"feed_urls"})


def project_spec(store: RunStore, company: str, project_id: str) -> dict[str, Any]:
    """The stored spec of one of the company's projects, and each export's feed URL (`feed_urls`, SPEC 10 C4)."""
    from firefeed.config import get_settings
    from firefeed.feeds.store import project_feeds

    doc = dict(store.project(project_id, company=company).spec)
    doc["feed_urls"] = [f.as_dict() for f in project_feeds(store.engine, get_settings(), project_id, company=company)]
    return doc


def spec_from_body(company: str, project_id: str, body: bytes, *, where: str) -> ProjectSpec:
    """A YAML or JSON spec sent over HTTP, which must name the URL's project and the token's company."""
    check_spec_size(len(body))  # before decoding: a spec is a few kilobytes, a larger body a mistake or an attack
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("", "the spec must be UTF-8 text (YAML or JSON)") from None
    spec = load_spec(text, filename=where, read_only=READ_ONLY_KEYS)
    if spec.project != project_id:
        raise SpecError("project", f"must be {project_id!r}, the project id in the URL (got {spec.project!r})")
    if spec.company != company:
        raise SpecError("company", f"must be {company!r}, the company of your token (got {spec.company!r})")
    return spec


def apply_project(store: RunStore, company: str, project_id: str, body: bytes) -> schemas.ProjectApplied:
    """Create or update a project from a YAML or JSON spec sent over HTTP.

    The body must name the URL's project and the token's company. A spec sent
    over the API has no folder: its sources are URLs, or local files under
    FIREFEED_LOCAL_SOURCES_ROOT.
    """
    spec = spec_from_body(company, project_id, body, where=f"PUT /api/projects/{project_id}")
    created = store.apply_spec(spec, spec_dir=None, company=company)
    return schemas.ProjectApplied(
        project=project_id, company=company, created=created, links=schemas.project_links(project_id)
    )


def project_runs(store: RunStore, company: str, project_id: str, limit: int) -> schemas.RunList:
    store.project(project_id, company=company)
    return schemas.RunList(project=project_id, runs=[run_summary(r) for r in store.runs_of_project(project_id, limit)])


def company_run(store: RunStore, company: str, run_id: str) -> PipelineRun:
    """The run, if it belongs to the company; NotFoundError otherwise."""
    run = store.run(run_id)
    if run.company_id != company:
        raise NotFoundError(f"unknown run {run_id!r}")
    return run


def run_report(store: RunStore, company: str, run_id: str) -> dict[str, Any]:
    run = company_run(store, company, run_id)
    report = build_report(store, str(run.id))
    report["cancel_requested"] = cancel_asked(run)
    report["links"] = schemas.run_links(str(run.id), run.project_id)
    return report


def cancel_run(store: RunStore, company: str, run_id: str) -> schemas.CancelAnswer:
    """Record the cancel in the database; that is what stops the run.

    A PENDING run becomes CANCELLED at once and its root task, when it starts,
    finds it no longer pending and does nothing; a RUNNING run sees the flag at
    its next check (between jobs and while waiting for them). No Celery revoke
    is needed for either, so a lost broker message cannot undo a cancel.
    """
    run = company_run(store, company, run_id)
    status = store.request_cancel(str(run.id))
    return schemas.CancelAnswer(
        run_id=str(run.id),
        status=status,
        cancel_requested=status in ("RUNNING", "CANCELLED"),
        links=schemas.run_links(str(run.id), run.project_id),
    )
