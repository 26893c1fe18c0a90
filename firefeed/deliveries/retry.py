"""Retrying a published run's deliveries (`firefeed deliver`): the jobs that did not deliver run again."""

from __future__ import annotations

from sqlalchemy import Engine

from firefeed.config import Settings
from firefeed.deliveries import store
from firefeed.deliveries.plan import plan
from firefeed.errors import NotFoundError
from firefeed.pipeline.context import load_context
from firefeed.runs.contract import DeliverParams, DeliveryResult
from firefeed.runs.jobs import JobStore


def retry_deliveries(project: str, export: str | None, *, settings: Settings, engine: Engine) -> list[DeliveryResult]:
    """Every target of the project's last published run (of `export` only, if named), each delivered now
    unless it was already; their outcomes, in the spec's order. The run's saved report is rewritten."""
    from firefeed.pipeline.jobs import run_job
    from firefeed.runs.report import build_report
    from firefeed.runs.service import RunStore

    run_id = store.last_published_run(engine, project)
    if run_id is None:
        raise NotFoundError(f"project {project!r} has no published run")
    ctx = load_context(run_id, settings, engine)
    names = [e.name for e in ctx.spec.exports]
    if export is not None and export not in names:
        raise NotFoundError(f"project {project!r} has no export {export!r}")
    # Planned again (idempotent per run and place): the jobs of a driver that died before creating them.
    specs = [
        s for s in plan(ctx, names) if isinstance(s.params, DeliverParams) and export in (None, names[s.params.export])
    ]
    wanted = JobStore(engine).create(run_id, specs)
    for job_id in wanted:
        if store.reopen(engine, job_id, lease_s=settings.stale_run_s):
            run_job(job_id, settings=settings, engine=engine)
    results = {j.id: j.result for j in store.run_deliveries(engine, run_id)}
    runs = RunStore(engine)
    runs.save_report(run_id, build_report(runs, run_id))
    return [r for r in (results.get(i) for i in wanted) if r is not None]
