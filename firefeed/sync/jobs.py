"""The sync jobs of a run (SPEC 10 C9-C10): one per published export with `sync`, after the deliveries.

`plan` says which jobs the driver creates, `sync_job` is what a `sync` worker (or the batch process)
runs for one, `warnings` the run's `sync_failed` lines, and `with_sync` merges each job's outcome into
the RunReport's `exports[i].sync`, as deliveries are merged (firefeed/deliveries/plan.py).
A sync never fails its job for the channel's sake: the outcome says what happened.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine, text

from firefeed.config import Settings
from firefeed.pipeline.context import RunContext
from firefeed.runs.contract import JobKind, JobSpec, JobState, SyncParams, SyncResult
from firefeed.runs.jobs import JobStore
from firefeed.spec.model import ExportSpec, ProjectSpec
from firefeed.sync.channel import ChannelDown
from firefeed.sync.engine import LOCK_WAIT_S, SyncTarget, sync_export

log = logging.getLogger(__name__)


def plan(ctx: RunContext, published: Sequence[str], fields: Sequence[str]) -> list[JobSpec]:
    """One sync job per published export with `sync`, numbered in the spec's order."""
    names = set(published)
    specs: list[JobSpec] = []
    for i, export in enumerate(ctx.spec.exports):
        if export.sync is not None and export.name in names:
            specs.append(JobSpec(JobKind.SYNC, idx=len(specs), params=SyncParams(i, list(fields))))
    return specs


def export_columns(export: ExportSpec, fields: Sequence[str]) -> list[str]:
    """The export's output column names for the run's fields: the names of each payload's values, in order."""
    from firefeed.export.select import output_columns

    return [c.name for c in output_columns(list(fields), export, export.list_fields)]


def target_of(spec: ProjectSpec, export: ExportSpec, columns: Sequence[str], run_id: str | None) -> SyncTarget:
    assert export.sync is not None
    return SyncTarget(
        company=spec.company,
        project=spec.project,
        export=export.name,
        to=export.sync.to,
        account=export.sync.account_key,
        ledger_of=export.sync.ledger_key,
        columns=list(columns),
        run_id=run_id,
    )


def run_sync(
    spec: ProjectSpec,
    spec_dir: Any,
    export: ExportSpec,
    columns: Sequence[str],
    *,
    settings: Settings,
    engine: Engine,
    run_id: str | None = None,
    list_status: bool | None = None,
    repair: bool = False,
    delete_orphans: bool = False,
    lock_wait_s: float | None = None,
) -> tuple[SyncResult, dict[str, Any] | None]:
    """Build the export's client (its secret resolved here, in the worker) and sync; a refused sync is an
    outcome with `error`, never an exception. The secret's value is masked out of every message."""
    from firefeed.secrets.store import resolver_for
    from firefeed.sync.clients import client_for, columns_not_sent

    assert export.sync is not None
    target = target_of(spec, export, columns, run_id)
    not_sent = columns_not_sent(export.sync.to, columns)
    references = resolver_for(spec.company, spec_dir, settings=settings, engine=engine)
    try:
        client = client_for(export.sync, references, settings)
    except ChannelDown as err:
        error = references.mask(err.message)
        return SyncResult(export.name, export.sync.to, error=error, columns_not_sent=not_sent), None
    except Exception as err:  # a secret the company lacks, a malformed credential: said without its value
        references.scrub(err)
        message = getattr(err, "message", None) or str(err)
        error = references.mask(str(message))
        return SyncResult(export.name, export.sync.to, error=error, columns_not_sent=not_sent), None
    try:
        result, found = sync_export(
            target,
            client,
            settings=settings,
            engine=engine,
            list_status=list_status,
            repair=repair,
            delete_orphans=delete_orphans,
            lock_wait_s=LOCK_WAIT_S if lock_wait_s is None else lock_wait_s,
        )
    finally:
        client.close()
    if result.error is not None:
        result = SyncResult.from_json({**result.to_json(), "error": references.mask(result.error)})
    return replace(result, columns_not_sent=not_sent), found


def sync_job(ctx: RunContext, job: JobState, jobs: JobStore) -> SyncResult:
    """One export's sync within its run; a channel's refusal is the outcome's `error` and a `sync_failed`
    warning, never the run's failure."""
    params = SyncParams.from_json(job.params_doc())
    export = ctx.spec.exports[params.export]
    columns = export_columns(export, params.fields)
    result, _ = run_sync(
        ctx.spec, ctx.spec_dir, export, columns, settings=ctx.settings, engine=ctx.control.engine, run_id=ctx.run_id
    )
    if result.error is not None:
        _alert(ctx, export.name, result.error)
    return result


def _alert(ctx: RunContext, export: str, error: str) -> None:
    from firefeed.alerts.events import record_sync_failed

    record_sync_failed(ctx.run_id, export, error, settings=ctx.settings, engine=ctx.control.engine)


def warnings(results: Sequence[SyncResult]) -> list[str]:
    """The run's `sync_failed` warnings: a sync the channel refused, or one that left failed or pending items;
    `sync_columns_not_sent`: columns of the export the channel has no field for; `sync_attributes_left_out`:
    items sent without an optional attribute whose value FireFeed could not put in the channel's form."""
    lines = []
    for r in results:
        if r.columns_not_sent:
            lines.append(
                f"sync_columns_not_sent: export {r.export!r} to {r.to}: the channel has no field for "
                + ", ".join(r.columns_not_sent)
            )
        if r.error is not None:
            lines.append(f"sync_failed: export {r.export!r} to {r.to}: {r.error}")
        elif r.failed:
            lines.append(f"sync_failed: export {r.export!r} to {r.to}: {r.failed} items refused (see its errors)")
        if r.left_out:
            lines.append(
                f"sync_attributes_left_out: export {r.export!r} to {r.to}: {r.left_out} items sent without an "
                "attribute FireFeed could not read (see its warnings)"
            )
        if r.pending and r.error is None:
            lines.append(
                f"sync_pending: export {r.export!r} to {r.to}: {r.pending} operations left for the next run "
                "(`firefeed sync repair`)"
            )
    return lines


def with_sync(engine: Engine, run_id: str, exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each export's `sync` as its sync job recorded it; a report never fails for it."""
    if not exports:
        return exports
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT result FROM pipeline_jobs WHERE run_id = CAST(:r AS uuid) AND kind = :k "
                    "AND status = 'SUCCEEDED' AND result IS NOT NULL ORDER BY idx"
                ),
                {"r": run_id, "k": JobKind.SYNC.value},
            ).all()
    except Exception:
        log.warning("could not add the syncs to a run's report", exc_info=True)
        return exports
    found = {SyncResult.from_json(r.result).export: SyncResult.from_json(r.result).report() for r in rows}
    return [{**e, "sync": found[e["name"]]} if e.get("name") in found else e for e in exports]
