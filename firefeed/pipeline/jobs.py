"""Job execution: what a step worker does with a job id. The entry point of every step task.

A job is claimed atomically before it runs (a redelivered or duplicate message
finds it taken or done and does nothing), runs its kind's function under the
job's log fields, heartbeat and statement bounds (firefeed/runs/backends.py),
and records its result or its failure on its row. The driver (pipeline/driver.py)
only ever reads those rows.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Engine

from firefeed.config import Settings, get_settings
from firefeed.db.engine import database_message, get_engine, raw_connection
from firefeed.errors import FireFeedError, JobLostError, RunCancelledError, StepFailedError
from firefeed.logging import run_context
from firefeed.pipeline import rule_passes, steps
from firefeed.pipeline.context import RunContext, load_context
from firefeed.pipeline.heartbeat import Heartbeat
from firefeed.pipeline.lookups import load_lookups
from firefeed.runs import contract
from firefeed.runs.backends import run_statements, terminate_job_backends
from firefeed.runs.contract import JobKind, JobState, Step
from firefeed.runs.jobs import JobStore

log = logging.getLogger(__name__)

T = TypeVar("T")

JobOutcome = (
    contract.SourceResult
    | contract.MergeResult
    | contract.RulesResult
    | contract.ExportResult
    | contract.DeliveryResult
    | contract.SyncResult
)
JobFunc = Callable[[RunContext, JobState, JobStore], JobOutcome | None]
"""A kind's work; None when the job recorded its own SUCCEEDED (in the transaction of its effect)."""


def describe_error(step: str | None, err: BaseException) -> dict[str, Any]:
    """The RunReport `error`: which step, what kind, and a message a person can act on."""
    if isinstance(err, StepFailedError):
        return err.error
    step = getattr(err, "firefeed_step", step)
    message = err.message if isinstance(err, FireFeedError) else database_message(err)
    return {"step": step, "type": type(err).__name__, "message": message}


def run_job(job_id: int, *, settings: Settings | None = None, engine: Engine | None = None) -> None:
    """Claim and run one job; a job already done, taken or cancelled is left alone."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    jobs = JobStore(engine)
    job = claim(jobs, job_id, settings=settings, engine=engine)
    if job is None:
        return
    ctx = load_context(job.run_id, settings, engine)
    ok, outcome = _guarded(ctx, job, jobs, lambda: _JOB_FUNCS[job.kind](ctx, job, jobs))
    if ok and outcome is not None:
        _succeed(jobs, job, outcome)


def claim(jobs: JobStore, job_id: int, *, settings: Settings, engine: Engine) -> JobState | None:
    """Claim a job; one taken over from a worker that stopped beating first ends that attempt's backends.

    A worker killed during a statement leaves its backend running it (Postgres notices the lost client
    only when it next talks to it), holding its locks and its half-written tables: the attempt that
    takes over must not start beside it (firefeed/runs/backends.py).
    """
    job = jobs.claim(job_id, lease_s=settings.stale_run_s)
    if job is not None and job.attempts > 1:
        with run_context(run_id=job.run_id, step=job.step):
            terminate_job_backends(engine, job.run_id, job.step, job.id)
    return job


def run_source_jobs_phased(
    job_ids: Sequence[int], *, settings: Settings | None = None, engine: Engine | None = None
) -> None:
    """In one process: every source's FETCH first, then every PARSE, so the timeline shows the steps apart."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    jobs = JobStore(engine)
    claimed = [j for j in (claim(jobs, i, settings=settings, engine=engine) for i in job_ids) if j is not None]
    if not claimed:
        return
    ctx = load_context(claimed[0].run_id, settings, engine)
    fetched: list[tuple[JobState, contract.SourceFetched]] = []
    for i, job in enumerate(claimed):
        ok, partial = _guarded(ctx, job, jobs, lambda job=job: _fetch(ctx, job, jobs))  # type: ignore[misc]
        if not ok:
            # The step failed: the sources this process claimed but will not finish are cancelled, not left RUNNING.
            for other in [*claimed[i + 1 :], *(done for done, _ in fetched)]:
                jobs.cancel(other.id)
            return
        assert partial is not None
        fetched.append((job, partial))
    for i, (job, partial) in enumerate(fetched):
        ok, result = _guarded(ctx, job, jobs, lambda job=job, partial=partial: _parse(ctx, job, partial))  # type: ignore[misc]
        if not ok:
            for later, _ in fetched[i + 1 :]:
                jobs.cancel(later.id)
            return
        assert result is not None
        _succeed(jobs, job, result)


def _succeed(jobs: JobStore, job: JobState, outcome: JobOutcome) -> None:
    try:
        jobs.succeed(job.id, outcome.to_json())
    except JobLostError:
        log.warning("job %s was taken over by another worker; its result here is dropped", job.id)


def _guarded(ctx: RunContext, job: JobState, jobs: JobStore, work: Callable[[], T]) -> tuple[bool, T | None]:
    """Run a job's work with its log fields, heartbeat and statement bounds; a failure is recorded on its row."""
    with run_context(run_id=ctx.run_id, project=ctx.spec.project, company=ctx.spec.company, step=job.step):
        try:
            with (
                Heartbeat(lambda: jobs.heartbeat(job.id), ctx.settings.heartbeat_s),
                # Its connections carry the job's name (a cancel finds them anywhere) and the step's time limit.
                run_statements(ctx.control.engine, ctx.run_id, job.step, settings=ctx.settings, job_id=job.id),
            ):
                return True, work()
        except RunCancelledError:
            # A cancel seen inside a job is the run's cancel, not the job's failure.
            jobs.cancel(job.id)
            return False, None
        except JobLostError:
            log.warning("job %s was taken over by another worker; this attempt is dropped", job.id)
            return False, None
        except Exception as err:
            error = describe_error(job.step, err)
            # A source job fetches, then parses: its line names the step that failed, as the report does.
            with run_context(step=error["step"]):
                log.error("%s job failed: %s", job.kind, error["message"], exc_info=not isinstance(err, FireFeedError))
            jobs.fail(job.id, error)
            return False, None


# -- the kinds' work ------------------------------------------------------------------------
def _now() -> datetime:
    return datetime.now().astimezone()


def _fetch(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.SourceFetched:
    started = _now()
    try:
        fetched = steps.fetch_one(ctx, job.idx)
    except Exception as err:
        err.firefeed_step = Step.FETCH  # type: ignore[attr-defined]
        raise
    partial = contract.SourceFetched(
        fetch=fetched.report(), fetch_started=started, fetch_finished=_now(), fetched=dataclasses.asdict(fetched)
    )
    # Saved now: the driver closes FETCH on the timeline once every source has its partial result.
    jobs.save_partial(job.id, partial.to_json())
    return partial


def _parse(ctx: RunContext, job: JobState, fetched: contract.SourceFetched) -> contract.SourceResult:
    ctx.check_cancel()
    parsed = steps.parse_one(ctx, job.idx, steps.FetchOutcome(**fetched.fetched))
    return contract.SourceResult(
        fetch=fetched.fetch,
        parse=parsed.report(),
        parsed=contract.ParsedSource(parsed.name, parsed.table, list(parsed.fields), parsed.rows),
        warnings=list(parsed.warnings),
        fetch_started=fetched.fetch_started,
        fetch_finished=fetched.fetch_finished,
        parse_finished=_now(),
    )


def _source_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.SourceResult:
    """FETCH then PARSE one source: one job, so the download never leaves the worker that made it."""
    return _parse(ctx, job, _fetch(ctx, job, jobs))


def _merge_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.MergeResult:
    params = contract.MergeParams.from_json(job.params_doc())
    parsed = [steps.ParseOutcome(name=p.name, table=p.table, fields=p.field_names, rows=p.rows) for p in params.sources]
    merged = steps.merge(ctx, parsed)
    tables = load_lookups(ctx) if ctx.spec.lookups else []
    return contract.MergeResult(
        fields=list(merged.fields),
        rows=merged.rows,
        rows_in=sum(p.rows for p in parsed),
        skipped={name: contract.SourceSkips(s.empty_key, s.duplicate_key) for name, s in merged.sources.items()},
        lookups=[t.report() for t in tables],
    )


def _rules_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.RulesResult:
    """Every rule pass in this process (the run does not fan RULES out)."""
    params = contract.RulesParams.from_json(job.params_doc())
    return rule_passes.run_rules(
        ctx.data.engine,
        ctx.data.schema,
        company=ctx.spec.company,
        run_id=ctx.run_id,
        source_table=ctx.items_table,
        fields=params.fields,
        rules=ctx.spec.parsed_rules,
        cancel_check=ctx.check_cancel,
        rows=params.rows,
        view_last=steps.read_once(ctx.spec),
    )


def _rules_chunk_job(ctx: RunContext, job: JobState, jobs: JobStore) -> None:
    """One part of one rules pass; its table and its job's SUCCEEDED land in one transaction."""
    chunk = contract.RulesChunkParams.from_json(job.params_doc())
    plan = rule_passes.pass_plan(ctx.run_id, ctx.spec.parsed_rules, chunk.fields, job.pass_no)
    # The pass table (data plane) and the job row (control plane) in one transaction: this needs both on one
    # server, as they are today; a company placed elsewhere would need the job's success recorded after.
    with raw_connection(ctx.data.engine) as conn:
        result = rule_passes.execute_chunk(
            conn, ctx.data.schema, plan, chunk, company=ctx.spec.company, run_id=ctx.run_id
        )
        jobs.succeed(job.id, result.to_json(), conn=conn)


def _export_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.ExportResult:
    params = contract.ExportParams.from_json(job.params_doc())
    return contract.ExportResult(steps.export_one(ctx, job.idx, params.table, params.fields, params.rows))


def _deliver_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.DeliveryResult:
    from firefeed.deliveries.deliver import deliver_job

    return deliver_job(ctx, job, jobs)


def _sync_job(ctx: RunContext, job: JobState, jobs: JobStore) -> contract.SyncResult:
    from firefeed.sync.jobs import sync_job

    return sync_job(ctx, job, jobs)


_JOB_FUNCS: dict[JobKind, JobFunc] = {
    JobKind.SOURCE: _source_job,
    JobKind.MERGE: _merge_job,
    JobKind.RULES: _rules_job,
    JobKind.RULES_CHUNK: _rules_chunk_job,
    JobKind.EXPORT: _export_job,
    JobKind.DELIVER: _deliver_job,
    JobKind.SYNC: _sync_job,
}
