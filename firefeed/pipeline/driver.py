"""The run driver: one run, from PENDING to its end, through the five steps of SPEC section 4.

    FETCH -> PARSE   one `source` job per source (FETCH then PARSE, on one worker)
    MERGE            one `merge` job
    RULES            the rule passes: one `rules` job, or `rules_chunk` jobs when the run fans out
    EXPORT           one `export` job per export, then publish all of them at once

Each step's jobs are rows in the database (firefeed/runs/jobs.py) handed to a
Dispatcher: the batch one (pipeline/run.py) runs them here, the Celery one
(firefeed/tasks/dispatch.py) sends them to their queues. The driver waits by
watching the rows (pipeline/watch.py), never on a broker result, so no pool can
deadlock on itself. What a job does is pipeline/jobs.py.

Around the steps, the run's lifecycle: mark it RUNNING, beat while it runs, and
at the end, on failure or cancel, stop its remaining jobs before the project is
freed, clean up, and write the RunReport.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine

from firefeed import metrics
from firefeed.config import Settings, get_settings
from firefeed.dataplane.kept import PreparedKeep
from firefeed.db.engine import get_engine
from firefeed.errors import FireFeedError, PublishBlockedError, RunCancelledError
from firefeed.export.patch import Beside
from firefeed.logging import run_context
from firefeed.pipeline import delta, delta_rules, incremental, publishing, rule_passes, steps
from firefeed.pipeline.context import RunContext, load_context
from firefeed.pipeline.heartbeat import Heartbeat
from firefeed.pipeline.jobs import describe_error
from firefeed.pipeline.watch import Watch, WatchTimes
from firefeed.rules.unread import spec_warnings
from firefeed.runs import contract
from firefeed.runs.backends import cancel_run_backends, run_statements
from firefeed.runs.contract import JobKind, JobSpec, JobState, RunStatus, Step
from firefeed.runs.jobs import JobStore
from firefeed.runs.report import build_report
from firefeed.runs.service import RunStore
from firefeed.runs.wakeups import RunWakeups

log = logging.getLogger(__name__)

T = TypeVar("T")

StepHook = Callable[[str, str, dict[str, Any]], None]
"""Called as hook(step, "start" | "end", info) so a CLI can draw progress."""


class Dispatcher(Protocol):
    """Where a run's jobs go. Constructed for the run by the driver's caller."""

    @property
    def fans_out_rules(self) -> bool:
        """True when `rules_chunk` jobs sent here run in other processes in parallel, so RULES is cut into
        chunk jobs; False: RULES runs as one job in the driver's process (firefeed/pipeline/rule_passes.py)."""
        ...

    @property
    def runs_elsewhere(self) -> bool:
        """True when submitted jobs run in other threads or processes (the driver then waits on their
        notifications); False when `submit` has run them by the time it returns."""
        ...

    def submit(self, kind: JobKind, job_ids: Sequence[int]) -> None:
        """Have the jobs run (again: a duplicate is harmless, the claim lets one through)."""
        ...

    def hint(self, kind: JobKind) -> str:
        """Where jobs of this kind should be picked up, for the message of a pickup timeout."""
        ...


def drive_run(
    run_id: str,
    *,
    dispatcher: Dispatcher,
    hook: StepHook | None = None,
    settings: Settings | None = None,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Drive a PENDING run to its end and return its RunReport."""
    settings = settings or get_settings()
    engine = engine or get_engine()
    store = RunStore(engine)
    run = store.run(run_id)
    with run_context(run_id=run_id, project=run.project_id, company=run.company_id):
        if not store.mark_running(run_id):
            log.info("run is no longer pending (%s); nothing to do", store.run(run_id).status)
            return build_report(store, run_id)
        # Every run's first and last lines: `grep run_id=<id>` then shows where it began and how it ended.
        log.info("run started (trigger %s)", run.trigger)
        began = time.monotonic()
        ctx: RunContext | None = None
        driver: _Driver | None = None
        status, error = RunStatus.SUCCEEDED, None
        published = False  # past the publish's commit point: the run publishes whatever failed after it
        try:
            try:
                ctx = load_context(run_id, settings, engine)
                driver = _Driver(ctx, dispatcher, hook)
                with Heartbeat(lambda: store.heartbeat(run_id), settings.heartbeat_s):
                    driver.drive()
            except Exception as err:
                if ctx is None or not _past_commit(engine, run_id):
                    raise
                published = True
                log.error("run failed after recording its publish, which is finished instead: %s", err, exc_info=True)
        except RunCancelledError:
            status = RunStatus.CANCELLED
            JobStore(engine).cancel_pending(run_id)
            log.info("run cancelled during %s", driver.current if driver else None)
        except Exception as err:
            current = driver.current if driver else None
            status, error = RunStatus.FAILED, describe_error(current, err)
            if error.get("step") is None:
                error["step"] = current
            JobStore(engine).cancel_pending(run_id)
            log.error("run failed in %s: %s", current, error["message"], exc_info=not isinstance(err, FireFeedError))
            if current:
                detail = {"error": error, **getattr(err, "step_detail", {})}
                store.step_finished(run_id, current, RunStatus.FAILED, detail=detail)
        finally:
            if status != RunStatus.SUCCEEDED:
                # Still beating while the jobs drain: the reaper must not take a run whose driver is alive.
                with Heartbeat(lambda: store.heartbeat(run_id), settings.heartbeat_s):
                    _stop_jobs(store, run_id)
            if ctx is not None and not published:
                steps.cleanup(ctx)
        if published:
            return _finish_publish(store, run_id, settings)
        store.finish_run(run_id, status, report=None, error=error)
        report = build_report(store, run_id)
        store.save_report(run_id, report)
        log.info("run ended %s in %.1f s", status, time.monotonic() - began)
        return report


def _past_commit(engine: Engine, run_id: str) -> bool:
    """Whether the run recorded its publish, so it must publish (not fail); True when that cannot be read,
    so nothing the run may still have to switch is discarded: recovery decides once the lease runs out."""
    try:
        return publishing.recorded(engine, run_id)
    except Exception:
        log.warning("could not read whether the run recorded its publish; recovery decides", exc_info=True)
        return True


def _finish_publish(store: RunStore, run_id: str, settings: Settings) -> dict[str, Any]:
    """The run's recorded publish, finished here and now; if that fails too, the run stays RUNNING until
    recovery finishes it (the reaper, or a takeover of its project): failing it would leave some of its
    files published under a FAILED status."""
    try:
        publishing.recover_publish(run_id, settings=settings, engine=store.engine)
    except Exception:
        log.error("could not finish the run's publish; recovery finishes it once its lease runs out", exc_info=True)
    return build_report(store, run_id)


@dataclass(frozen=True)
class _Done:
    """What a step writes on the timeline when it succeeds."""

    rows_in: int
    rows_out: int
    detail: dict[str, Any]


def _reused(done: _Done) -> Callable[[], tuple[None, _Done]]:
    """A step's work that is the reused run's: nothing to do, its counts and detail."""
    return lambda: (None, done)


class _Driver:
    def __init__(self, ctx: RunContext, dispatcher: Dispatcher, hook: StepHook | None) -> None:
        self.ctx, self.dispatcher = ctx, dispatcher
        self.jobs = JobStore(ctx.control.engine)
        self.store = ctx.control.runs
        self.hook = hook or (lambda step, phase, info: None)
        self.current: Step | None = None
        #: Set by `drive` for a dispatcher whose jobs run elsewhere (the batch one runs them in `submit`).
        self.wakeups: RunWakeups | None = None
        #: A delta's change of the kept result, begun once RULES has its rows (`rules_delta`), for EXPORT to commit.
        self.prepared: PreparedKeep | None = None
        #: a delta's UPDATE of the items table (`delta.ItemsUpdate`), begun by MERGE and awaited before the publish
        self.items_update: delta.ItemsUpdate | None = None

    def drive(self) -> None:
        if not self.dispatcher.runs_elsewhere:
            self.steps()
            return
        with RunWakeups(self.ctx.control.engine, self.ctx.run_id) as wakeups:
            self.wakeups, self.jobs, self.store.held = wakeups, JobStore(self.ctx.control.engine, held=wakeups), wakeups
            try:
                self.steps()
            finally:
                self.wakeups, self.jobs, self.store.held = None, JobStore(self.ctx.control.engine), None

    def check_cancel(self) -> None:
        """RunCancelledError once a cancel of the run is recorded (read through the driver's job store)."""
        if self.jobs.cancel_requested(self.ctx.run_id):
            raise RunCancelledError(f"run {self.ctx.run_id} was cancelled")

    def steps(self) -> None:
        run = self.store.run(self.ctx.run_id)
        # Whether the last run's files are still in place, read beside FETCH and PARSE for the decision.
        published = incremental.PublishedCheck.begin(self.ctx, run)
        # The kept result's rows of a patched source's changed records, searched while PARSE goes on.
        watch = self.watch_patches(published)
        try:
            try:
                parsed = self.fetch_and_parse()
                decision = incremental.decide(
                    self.ctx,
                    parsed,
                    full=run.full,
                    accept_invalid=run.accept_invalid,
                    published=published,
                )
            finally:
                if published is not None:
                    published.close()
            log.info("refresh: %s (%s)", decision.mode, decision.reason)
            metrics.run_mode(decision.mode)
            if decision.mode == "unchanged":
                self.reuse(decision)
                return
            early = watch.take(parsed) if watch is not None and decision.mode == "delta" else None
        finally:
            if watch is not None:
                watch.close()
        # The exports' spares, made beside MERGE and RULES where a published file has none (steps.prefill_spares).
        spared = Beside(lambda: steps.prefill_spares(self.ctx), name="spares")
        try:
            if decision.mode == "delta":
                self.take_delta(parsed, decision, spared, early)
                return
            merged = self.step(Step.MERGE, lambda: self.merge(parsed, decision))
            rules = self.step(Step.RULES, lambda: self.rules(merged))
            spared.result()
            self.step(Step.EXPORT, lambda: self.export(rules))
        finally:
            spared.result()

    # -- a delta run (SPEC 11 I1, pipeline/delta.py): MERGE and RULES for the changed items, EXPORT in full
    def watch_patches(self, published: incremental.PublishedCheck | None) -> delta_rules.PatchWatch | None:
        """A watch of PARSE's patches (`delta_rules.PatchWatch`) where a delta may follow: a last succeeded run
        whose files the check reads (no `--full`, the same spec and exports)."""
        from firefeed.dataplane.names import kept_result_table

        if published is None:
            return None
        return delta_rules.PatchWatch.watch(
            self.ctx,
            kept_result_table(incremental.computed_by(published.previous)),
            whole=not self.dispatcher.fans_out_rules,
        )

    def take_delta(
        self,
        parsed: list[contract.SourceResult],
        decision: incremental.Decision,
        spared: Beside | None = None,
        early: delta_rules.EarlyFound | None = None,
    ) -> None:
        from firefeed.dataplane.names import kept_result_table

        assert decision.computed_by is not None
        # The kept result's rows of the patched records' keys, found while PARSE or MERGE runs (RULES takes them).
        try:
            early = early or delta_rules.EarlyFound.begin(
                self.ctx,
                parsed,
                kept_result_table(decision.computed_by),
                # Whole rows where RULES may take the changed items' kept rows (a batch RULES: not fanned out).
                whole=not self.dispatcher.fans_out_rules,
            )
        except Exception:  # not the run's: RULES finds them itself
            log.warning("the kept result's rows were not searched beside MERGE", exc_info=True)
        try:
            try:
                merged, tables = self.step(Step.MERGE, lambda: self.merge_delta(parsed, decision))
                rules = self.step(Step.RULES, lambda: self.rules_delta(merged, tables, decision, early))
            finally:
                if early is not None:
                    early.settle()
            if spared is not None:
                spared.result()
            self.step(Step.EXPORT, lambda: self.export(rules))
        finally:
            if self.items_update is not None:  # not awaited by EXPORT: the run fails once it is done
                self.items_update.settle()
                self.items_update = None
            if self.prepared is not None:  # begun by RULES, never taken by EXPORT: the run did not publish
                self.prepared.abandon()
                self.prepared = None

    def merge_delta(
        self, parsed: list[contract.SourceResult], decision: incremental.Decision
    ) -> tuple[tuple[contract.MergeResult, delta.DeltaTables], _Done]:
        previous = decision.previous
        assert previous is not None
        merged, tables = delta.merge_delta(self.ctx, parsed, previous)
        try:
            rows = previous.rows[Step.MERGE][1]  # an enrich source adds no item
            detail: dict[str, Any] = {"sources": merged.sources_report(), "fields": merged.fields}
            detail["changed_by"] = tables.found_by
            lookups = previous.details.get(Step.MERGE, {}).get("lookups")
            if lookups:
                detail["lookups"] = lookups
            incremental.delta_merge_detail(decision, self.ctx, detail, tables.changed)
        except BaseException:
            tables.items_update.settle()
            raise
        return (merged, tables), _Done(merged.rows_in, rows, detail)

    def rules_delta(
        self,
        merged: contract.MergeResult,
        tables: delta.DeltaTables,
        decision: incremental.Decision,
        early: delta_rules.EarlyFound | None = None,
    ) -> tuple[contract.RulesResult, _Done]:
        from firefeed.dataplane.names import kept_result_table

        previous, computed_by = decision.previous, decision.computed_by
        assert previous is not None and computed_by is not None
        notes: dict[str, Any] = {}

        def begun(keep: PreparedKeep) -> None:
            self.prepared = keep  # from now on abandoned by `take_delta` unless EXPORT commits it

        try:
            result = delta_rules.rules_delta(
                self.ctx,
                tables,
                merged.fields,
                kept_result_table(computed_by),
                previous.details.get(Step.RULES, {}),
                previous.rows[Step.RULES],
                # Fanned out, the changed items' new rows are ruled as chunk jobs when they are more than a chunk.
                run_chunks=self.run_chunks if self.dispatcher.fans_out_rules else None,
                early=early,
                notes=notes,
                keep_begun=begun,
            )
        except BaseException:
            tables.items_update.settle()
            raise
        # The kept result's change (`delta.prepare_keep`) begun now unless RULES began it, while the items table's
        # UPDATE may still run (on the 1M stock delta a core is idle then), and committed once EXPORT has published.
        self.prepared = delta.prepare_keep(
            self.ctx.data.schema, self.ctx.spec.company, self.ctx.run_id, result.table, self.prepared
        )
        # The items table's UPDATE runs on beside EXPORT (delta.ItemsUpdate), which reads only the rules result and
        # the kept one: it is awaited before the publish, so a failed UPDATE fails the run before anything is
        # published (on the 1M stock delta's first refresh it took 1.2 s, which RULES waited for).
        self.items_update = tables.items_update
        detail = result.report() | notes
        warnings = spec_warnings(self.ctx.spec, merged.fields, result.fields)
        if warnings:
            detail["warnings"] = warnings
        return result, _Done(result.rows_in, result.rows_out, detail)

    # -- an unchanged run (SPEC 11 I2): MERGE, RULES and EXPORT are the last succeeded run's, nothing is written
    def reuse(self, decision: incremental.Decision) -> None:
        for name in (Step.MERGE, Step.RULES):
            self.step(name, _reused(_Done(*incremental.reused_step(decision, name))))
        self.step(Step.EXPORT, lambda: self.export_unchanged(decision))

    def export_unchanged(self, decision: incremental.Decision) -> tuple[None, _Done]:
        """The files in place are this run's (their sha256 repeated): checked as a full run checks them, the
        step recorded as published with no file to switch, then delivered and synced as any run's."""
        entries = incremental.unchanged_exports(decision)
        self.check_cancel()
        warnings = self.check_publish(entries)
        detail: dict[str, Any] = {"exports": entries, "reused_from": decision.reused_from}
        if warnings:
            detail["warnings"] = warnings
        done = _Done(*incremental.export_rows(decision), detail)
        publishing.publish(self.ctx, [], rows_in=done.rows_in, rows_out=done.rows_out, detail=detail)
        steps.drop_unnamed_tables(self.ctx)  # a table an earlier run left because someone held it
        self.deliver(entries, detail)
        self.sync(entries, incremental.result_fields(decision), detail)
        return None, done

    # -- FETCH and PARSE run together, one job per source; their timeline comes from the jobs' own clocks.
    def fetch_and_parse(self) -> list[contract.SourceResult]:
        ctx = self.ctx
        self.current = Step.FETCH
        self.store.step_started(ctx.run_id, Step.FETCH)
        self.hook(Step.FETCH, "start", {})
        fetch_done = False

        def on_poll(states: list[JobState]) -> None:
            nonlocal fetch_done
            if not fetch_done and all(contract.SourceFetched.present(s.result) for s in states):
                fetch_done = True
                self._finish_fetch(states)

        specs = [JobSpec(JobKind.SOURCE, idx=i) for i in range(len(ctx.spec.sources))]
        states = self.run_jobs(JobKind.SOURCE, specs, on_poll)
        if not fetch_done:
            self._finish_fetch(states)
        results = [contract.SourceResult.from_json(s.result_doc()) for s in states]
        self.current = Step.PARSE
        rows = sum(r.parsed.rows for r in results)
        self.store.step_finished(
            ctx.run_id,
            Step.PARSE,
            RunStatus.SUCCEEDED,
            rows_in=0,
            rows_out=rows,
            detail={
                # How each changed source was staged (patched or in full, steps.parse.STAGING) is the step's
                # detail, not the report's source entry: a patched parse reports what a full one does.
                "sources": [{k: v for k, v in r.parse.items() if k != steps.STAGING} for r in results],
                "staging": {r.parsed.name: r.parse[steps.STAGING] for r in results if steps.STAGING in r.parse},
                "warnings": [f"source {r.parsed.name!r}: {w}" for r in results for w in r.warnings],
            },
            at=max(r.parse_finished for r in results),
        )
        self.hook(Step.PARSE, "end", {"rows_in": 0, "rows_out": rows})
        return results

    def _finish_fetch(self, states: list[JobState]) -> None:
        parts = [contract.SourceResult.fetched_part(s.result_doc()) for s in states]
        first = min(started for _, started, _ in parts)
        last = max(finished for _, _, finished in parts)
        self.store.step_started(self.ctx.run_id, Step.FETCH, at=first)
        self.store.step_finished(
            self.ctx.run_id, Step.FETCH, RunStatus.SUCCEEDED, detail={"sources": [p for p, _, _ in parts]}, at=last
        )
        self.hook(Step.FETCH, "end", {"rows_in": 0, "rows_out": 0})
        self.current = Step.PARSE
        self.store.step_started(self.ctx.run_id, Step.PARSE, at=first)
        self.hook(Step.PARSE, "start", {})

    # -- MERGE
    def merge(
        self, parsed: list[contract.SourceResult], decision: incremental.Decision
    ) -> tuple[contract.MergeResult, _Done]:
        params = contract.MergeParams([r.parsed for r in parsed])
        (job,) = self.run_jobs(JobKind.MERGE, [JobSpec(JobKind.MERGE, params=params)])
        merged = contract.MergeResult.from_json(job.result_doc())
        detail: dict[str, Any] = {"sources": merged.sources_report(), "fields": merged.fields}
        if merged.lookups:
            detail["lookups"] = merged.lookups
        # What the next run compares to reuse this one's work, and this run's `incremental` part.
        incremental.merge_detail(self.ctx, decision, detail, merged.rows)
        return merged, _Done(merged.rows_in, merged.rows, detail)

    # -- RULES: the one pass loop; fanned out, each pass runs as chunk jobs, else all of it as one job
    def rules(self, merged: contract.MergeResult) -> tuple[contract.RulesResult, _Done]:
        ctx = self.ctx
        # Items that fit one slice gain nothing from chunk jobs (one slice per pass, plus the slicing's own
        # index and queries): the whole of RULES is then one job, on the rules queue all the same.
        if self.dispatcher.fans_out_rules and merged.rows > ctx.settings.chunk_rows:
            result = rule_passes.run_rules_as_chunks(
                ctx.data.engine,
                ctx.data.schema,
                company=ctx.spec.company,
                run_id=ctx.run_id,
                source_table=ctx.items_table,
                fields=merged.fields,
                rules=ctx.spec.parsed_rules,
                chunk_rows=ctx.settings.chunk_rows,
                max_slices=ctx.settings.rules_max_slices,
                run_chunks=self.run_chunks,
                rows=merged.rows,
                cancel_check=self.check_cancel,
                view_last=steps.read_once(ctx.spec),
            )
        else:
            params = contract.RulesParams(merged.fields, merged.rows)
            (job,) = self.run_jobs(JobKind.RULES, [JobSpec(JobKind.RULES, params=params)])
            result = contract.RulesResult.from_json(job.result_doc())
        detail = result.report()
        warnings = spec_warnings(ctx.spec, merged.fields, result.fields)
        if warnings:
            detail["warnings"] = warnings
        return result, _Done(result.rows_in, result.rows_out, detail)

    def run_chunks(self, pass_no: int, slices: list[contract.RulesChunkParams]) -> list[contract.ChunkResult]:
        specs = [JobSpec(JobKind.RULES_CHUNK, idx=i, pass_no=pass_no, params=s) for i, s in enumerate(slices)]
        return [contract.ChunkResult.from_json(s.result_doc()) for s in self.run_jobs(JobKind.RULES_CHUNK, specs)]

    # -- EXPORT: every export written beside its published name, checked, then all published at once
    def export(self, rules: contract.RulesResult) -> tuple[None, _Done]:
        from firefeed.pipeline.delta import prepare_keep

        ctx = self.ctx
        params = contract.ExportParams(rules.table, rules.fields, rules.rows_out)
        specs = [JobSpec(JobKind.EXPORT, idx=i, params=params) for i in range(len(ctx.spec.exports))]
        # A delta's change of the kept result, begun by RULES (or beside the exports) and committed once they are
        # published.
        prepared, self.prepared = self.prepared, None
        if prepared is None:
            prepared = prepare_keep(ctx.data.schema, ctx.spec.company, ctx.run_id, rules.table)
        try:
            states = self.run_jobs(JobKind.EXPORT, specs) if specs else []
            exports = [contract.ExportResult.from_json(s.result_doc()) for s in states]
            entries = [e.entry for e in exports]
            # How a delta run wrote each export (patched, or full and why): the step's detail, not the report's.
            written = {e["name"]: e.pop("written") for e in entries if "written" in e}
            # Each local file's stamp as its writer left it: the publish keeps its identity by it, not reported.
            stamps = {e["name"]: e.pop(publishing.WRITTEN_STAMP) for e in entries if publishing.WRITTEN_STAMP in e}
            self.check_cancel()
            warnings = self.check_publish(entries)
            detail: dict[str, Any] = {"exports": entries} | ({"written": written} if written else {})
            if warnings:
                detail["warnings"] = warnings
            done = _Done(rules.rows_out, sum(e.rows for e in exports), detail)
            update, self.items_update = self.items_update, None
            if update is not None:
                update.result()
            # Recorded with the step's success, then switched: from here the run publishes, whatever dies when.
            publishing.publish(
                ctx, entries, rows_in=done.rows_in, rows_out=done.rows_out, detail=detail, written=stamps
            )
            # The diff baselines and the kept rules result are tables apart: kept side by side, on a connection
            # each (a delta's take-over and in-place keep: ~0.45 s and ~0.2 s of 1M items, one after the other).
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="promote") as pool:
                promoted = pool.submit(contextvars.copy_context().run, self.promote, entries)
                self.keep_result(rules, prepared)
                promoted.result()
        finally:
            if prepared is not None:
                prepared.abandon()  # rolled back unless committed: the run did not publish
        steps.drop_unnamed_tables(ctx)
        self.deliver(entries, detail)
        self.sync(entries, rules.fields, detail)
        return None, done

    def deliver(self, entries: list[dict[str, Any]], detail: dict[str, Any]) -> None:
        """SPEC 10 C7: each published file to its export's targets, as deliver jobs; a failed delivery is a
        `delivery_failed` warning (recorded with the step), never the run's failure."""
        from firefeed.deliveries import plan

        try:
            specs = plan.plan(self.ctx, [e["name"] for e in entries])
            if not specs:
                return
            states = self.run_jobs(JobKind.DELIVER, specs)
            failed = plan.warnings([contract.DeliveryResult.from_json(s.result_doc()) for s in states])
        except Exception as err:  # published already: `firefeed deliver PROJECT` sends what is left
            log.warning("the deliveries did not finish: %s", err, exc_info=not isinstance(err, FireFeedError))
            failed = [f"delivery_failed: the deliveries did not finish ({type(err).__name__}): `firefeed deliver`"]
        if failed:
            detail["warnings"] = [*detail.get("warnings", []), *failed]

    def sync(self, entries: list[dict[str, Any]], fields: Sequence[str], detail: dict[str, Any]) -> None:
        """SPEC 10 C9-C10: each published export with `sync` sends its changes to its channel, as sync jobs; a
        refused sync is a `sync_failed` warning (recorded with the step), never the run's failure."""
        from firefeed.sync import jobs as sync_jobs

        try:
            specs = sync_jobs.plan(self.ctx, [e["name"] for e in entries], fields)
            if not specs:
                return
            states = self.run_jobs(JobKind.SYNC, specs)
            failed = sync_jobs.warnings([contract.SyncResult.from_json(s.result_doc()) for s in states])
        except Exception as err:  # published already: the next run or `firefeed sync repair` sends what is left
            log.warning("the syncs did not finish: %s", err, exc_info=not isinstance(err, FireFeedError))
            failed = [f"sync_failed: the syncs did not finish ({type(err).__name__}): `firefeed sync repair`"]
        if failed:
            detail["warnings"] = [*detail.get("warnings", []), *failed]

    def check_publish(self, exports: list[dict[str, Any]]) -> list[str]:
        """fail_on and the drop guard (#9), before anything is published; a block fails the run."""
        from firefeed.export.guard import check_publish

        try:
            run = self.store.run(self.ctx.run_id)
            return check_publish(
                self.ctx.spec,
                exports,
                accept_drop=run.accept_drop,
                accept_invalid=run.accept_invalid,
                previous=self.previous_definitions(),
            )
        except PublishBlockedError as err:
            err.step_detail = {"exports": exports}  # type: ignore[attr-defined]  # the failed run still reports them
            self.keep_checked(exports)
            raise

    def previous_definitions(self) -> dict[str, str | None]:
        """Each export's definition in the project's last succeeded run (P31); none before any."""
        for run in self.store.runs_of_project(self.ctx.spec.project):
            if str(run.id) != self.ctx.run_id and run.status == RunStatus.SUCCEEDED and run.report:
                return {e["name"]: e.get("definition") for e in run.report.get("exports", [])}
        return {}

    def promote(self, exports: list[dict[str, Any]]) -> None:
        """The published exports' diff rows become the next run's baseline."""
        from firefeed.export.guard import promote

        try:
            promote(self.ctx.data.schema, self.ctx.spec, self.ctx.run_id, exports)
        except Exception:  # the files are published; only the next run's diff baseline is older
            log.exception("could not keep the published exports' diff rows; the next run diffs against older ones")

    def keep_checked(self, exports: list[dict[str, Any]]) -> None:
        """A blocked run's export rows stay, for the findings list of what blocked it."""
        from firefeed.export.guard import keep_checked

        try:
            keep_checked(self.ctx.data.schema, self.ctx.spec, self.ctx.run_id, exports)
        except Exception:  # the run fails anyway; only its findings list is lost
            log.exception("could not keep the blocked exports' rows for their findings list")

    def keep_result(self, rules: contract.RulesResult, prepared: PreparedKeep | None = None) -> None:
        """The rules' result stays, renamed, for `firefeed values` (its pass tables are not dropped at the end)."""
        from firefeed.pipeline.values import keep_result

        ctx = self.ctx
        keep_result(
            ctx.data.schema,
            company=ctx.spec.company,
            project=ctx.spec.project,
            run_id=ctx.run_id,
            table=rules.table,
            prepared=prepared,
        )

    # -- the plumbing every step shares
    def step(self, name: Step, fn: Callable[[], tuple[T, _Done]]) -> T:
        """One step on the timeline: started, its work, finished with its rows and its RunReport part."""
        self.current = name
        self.check_cancel()
        with (
            run_context(step=name),
            run_statements(self.ctx.control.engine, self.ctx.run_id, name, settings=self.ctx.settings),
        ):
            self.store.step_started(self.ctx.run_id, name)
            self.hook(name, "start", {})
            value, done = fn()
            self.store.step_finished(
                self.ctx.run_id,
                name,
                RunStatus.SUCCEEDED,
                rows_in=done.rows_in,
                rows_out=done.rows_out,
                detail=done.detail,
            )
            self.hook(name, "end", {"rows_in": done.rows_in, "rows_out": done.rows_out})
            log.info("%s done: %d rows in, %d rows out", name, done.rows_in, done.rows_out)
        return value

    def run_jobs(
        self, kind: JobKind, specs: Sequence[JobSpec], on_poll: Callable[[list[JobState]], None] | None = None
    ) -> list[JobState]:
        """Create the jobs, hand them to the dispatcher, and wait until all of them succeeded."""
        ids = self.jobs.create(self.ctx.run_id, specs)
        self.dispatcher.submit(kind, ids)
        settings = self.ctx.settings
        return Watch(
            jobs=self.jobs,
            run_id=self.ctx.run_id,
            kind=kind,
            ids=ids,
            times=WatchTimes(settings.stale_run_s, settings.heartbeat_s, settings.job_pickup_timeout_s),
            resend=lambda lost: self.dispatcher.submit(kind, lost),
            check_cancel=self.check_cancel,
            on_poll=on_poll,
            hint=self.dispatcher.hint(kind),
            wakeups=self.wakeups,
        ).until_done()


# How long a failed or cancelled run waits for its still-running jobs to notice and stop.
_DRAIN_S = 30.0
# How often the drain cancels the run's statements again (a job may have started one after the first cancel).
_SWEEP_S = 1.0


def _stop_jobs(store: RunStore, run_id: str) -> None:
    """Before the project is freed: flag the cancel, drop queued jobs, give running ones time to stop.

    Otherwise a job of the failed run could still be writing a staging table that
    the project's next run is already rebuilding.
    """
    jobs = JobStore(store.engine)
    try:
        store.request_cancel(run_id)
        jobs.cancel_pending(run_id)
        deadline = time.monotonic() + _DRAIN_S
        next_sweep = time.monotonic() + _SWEEP_S
        while jobs.running_count(run_id) and time.monotonic() < deadline:
            if time.monotonic() >= next_sweep:
                cancel_run_backends(store.engine, run_id)
                next_sweep += _SWEEP_S
            time.sleep(0.05)
    except Exception:  # the run must still end; the reaper and the lease cover what is left
        log.warning("could not stop the run's jobs", exc_info=True)
