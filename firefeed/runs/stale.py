"""A run whose driver stopped: taken over and ended, by whoever finds it first.

A RUNNING run's driver beats on its row (pipeline/heartbeat.py). One that has not beaten for longer
than the lease (FIREFEED_STALE_RUN_S) lost its driver: a `firefeed run` or an API killed with -9, a
worker that crashed or lost the database. Such a run would hold its project for good, so every entry
point that finds one in its way takes it over (runs/service.py `request_run`), a cancel of it does
(`request_cancel`), and beat's reaper sweeps the rest (runs/maintenance.py `reap_stale_runs`): the same
function for all, so no deployment needs beat to keep its projects free.

The takeover is decided in one statement under the project's advisory lock: the heartbeat is set to
now only if it is still older than the lease. So a run whose driver beats is never touched, and of two
entry points (or an entry point and the reaper) only one takes it over. The run then stays RUNNING,
beaten by its new holder, while its leftovers are cleaned: the project stays busy meanwhile, so no new
run starts beside a half-cleaned one, and a holder that dies in turn leaves it stale again.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from sqlalchemy import func, select, text, update
from sqlalchemy.engine import Engine

from firefeed import metrics
from firefeed.config import get_settings
from firefeed.db.engine import get_engine
from firefeed.db.models import PipelineRun, PipelineStep
from firefeed.logging import run_context
from firefeed.pipeline.heartbeat import Heartbeat
from firefeed.runs.contract import RunStatus
from firefeed.runs.lock import project_lock_key

if TYPE_CHECKING:
    from firefeed.runs.service import RunStore

log = logging.getLogger(__name__)

_STALE = text("make_interval(secs => :stale)")


def take_over_stale_run(
    run_id: str,
    *,
    by: str,
    status: RunStatus = RunStatus.FAILED,
    stale_after_s: float | None = None,
    engine: Engine | None = None,
) -> bool:
    """End a RUNNING run whose heartbeat is older than `stale_after_s` (FIREFEED_STALE_RUN_S) as its driver
    would have; True when it ended, False when it is not ours to end (it beat, it ended, another holder
    decides right now, or its recorded publish could not be finished yet).

    A run past its publish's commit point is finished (SUCCEEDED, pipeline/publishing.py). Any other
    ends `status`: FAILED with a StaleRun error naming `by` ("the reaper", "a new run request"), or
    CANCELLED when a cancel found it. Before it ends, its queued jobs are cancelled and its statements
    too (a killed driver's backend runs its statement on), its rules_tmp tables dropped and its
    unpublished files discarded.
    """
    engine = engine or get_engine()
    settings = get_settings()
    stale_after_s = stale_after_s if stale_after_s is not None else settings.stale_run_s
    company = _claim(engine, run_id, stale_after_s)
    if company is None:
        return False
    from firefeed.runs.service import RunStore

    store = RunStore(engine)
    with run_context(run_id=run_id, company=company):
        # Beaten while it is cleaned: the reaper or another entry point must not take it over again.
        with Heartbeat(lambda: store.heartbeat(run_id), settings.heartbeat_s):
            published = _finish_publish(run_id, engine)
            if published is not False:
                return bool(published)
            error = _error(engine, run_id, by, stale_after_s) if status is RunStatus.FAILED else None
            _clean(engine, store, run_id, company)
        store.finish_run(run_id, status, report=None, error=error)
        from firefeed.runs.report import build_report

        store.save_report(run_id, build_report(store, run_id))
        metrics.runs_reaped(1)
        log.warning("took over run %s (no heartbeat for more than %gs): %s by %s", run_id, stale_after_s, status, by)
    return True


def _claim(engine: Engine, run_id: str, stale_after_s: float) -> str | None:
    """Hold the stale run (its heartbeat set to now), under its project's lock; its company, or None."""
    try:
        key = uuid.UUID(str(run_id))
    except ValueError:
        return None
    with engine.connect() as conn, conn.begin():
        project = conn.execute(select(PipelineRun.project_id).where(PipelineRun.id == key)).scalar()
        if project is None:
            return None
        # Never waits: a request creating a run or another takeover of this project decides now.
        if not conn.execute(select(func.pg_try_advisory_xact_lock(project_lock_key(project)))).scalar():
            return None
        company = conn.execute(
            update(PipelineRun)
            .where(
                PipelineRun.id == key,
                PipelineRun.status == RunStatus.RUNNING,
                PipelineRun.heartbeat_at < func.now() - _STALE,
            )
            .values(heartbeat_at=func.now())
            .returning(PipelineRun.company_id),
            {"stale": stale_after_s},
        ).scalar()
    return None if company is None else str(company)


def _finish_publish(run_id: str, engine: Engine) -> bool | None:
    """A run that recorded its publish is finished, never failed nor cancelled (pipeline/publishing.py):
    True when it now SUCCEEDED, None when a file could not be switched (it stays RUNNING, held by no one,
    and the next takeover tries again once the lease ran out), False when it recorded nothing."""
    from firefeed.pipeline.publishing import recover_publish

    try:
        # Whatever its heartbeat's age: the claim above set it to now.
        return recover_publish(run_id, stale_after_s=None, engine=engine)
    except Exception:
        log.warning("could not finish the publish the run recorded; it is tried again after a lease", exc_info=True)
        return None


def _error(engine: Engine, run_id: str, by: str, stale_after_s: float) -> dict[str, str | None]:
    """The StaleRun error, naming the step the driver was in."""
    with engine.connect() as conn:
        step = conn.execute(
            select(PipelineStep.step).where(
                PipelineStep.run_id == uuid.UUID(run_id), PipelineStep.status == RunStatus.RUNNING
            )
        ).scalar()
    message = (
        f"no heartbeat for more than {stale_after_s:g}s: the process driving the run stopped "
        f"(crashed, killed, or lost the database); {by} took the run over and marked it failed"
    )
    return {"step": step, "type": "StaleRun", "message": message}


def _clean(engine: Engine, store: RunStore, run_id: str, company: str) -> None:
    """What the dead driver would have done before the project is freed (each part on its own: the run must
    still end when one fails)."""
    from firefeed.dataplane.run_tables import RunTables
    from firefeed.runs.backends import cancel_run_backends
    from firefeed.runs.jobs import JobStore
    from firefeed.schema.service import SchemaService

    try:
        store.request_cancel(run_id)  # its jobs still running on live workers stop at their next check
        JobStore(engine).cancel_pending(run_id)
        cancel_run_backends(engine, run_id)
        RunTables(SchemaService(engine)).drop_rules_tmp_for_run(company, run_id)
    except Exception:
        log.warning("could not stop all of the taken-over run's work", exc_info=True)
    _discard_run_files(run_id, engine)


def _discard_run_files(run_id: str, engine: Engine) -> None:
    """What the dead driver would have cleaned: unpublished exports and downloads, removed through the storage.

    With FIREFEED_STORAGE_URL set they are reachable from any machine; with the
    default local folders only this machine's copies can be removed.
    """
    from firefeed.pipeline.context import load_context
    from firefeed.pipeline.steps import cleanup

    try:
        cleanup(load_context(run_id, engine=engine))
    except Exception:  # a spec that no longer parses, storage out of reach: nothing more to do here
        log.warning("could not remove the taken-over run's files", exc_info=True)
