"""Keeping the control plane healthy: the schedule tick, the stale-run reaper, the history pruner.

Plain functions, no Celery: beat's tasks (firefeed/tasks/schedules.py and
maintenance.py) call them, and so can tests and scripts. Every decision about
time uses the database's clock, so two beat processes on two machines with
skewed clocks still agree on which cron slot is due.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.engine import Engine

from firefeed import metrics
from firefeed.db.engine import get_engine, session_factory
from firefeed.db.models import PipelineRun, Project, SpecVersion
from firefeed.errors import NotFoundError, PipelineBusyError
from firefeed.logging import run_context
from firefeed.spec.cron import Cron

log = logging.getLogger(__name__)

# How far back a cron expression is searched for its latest slot; an expression that never
# fires (`0 0 30 2 *`) must not loop, and a schedule idle for longer than this is not "due".
_CRON_LOOKBACK = timedelta(days=366 * 5)
# Scratch areas (rule previews) older than this are a crashed preview's leftovers.
SCRATCH_AREA_MAX_AGE_S = 3600.0
# Rows deleted per transaction when pruning, so a large backlog never holds long locks.
_PRUNE_BATCH = 500


def db_now(engine: Engine | None = None) -> datetime:
    """The database's current time (UTC)."""
    with (engine or get_engine()).connect() as conn:
        value = conn.execute(select(func.now())).scalar_one()
    return value.astimezone(UTC)


# -- cron ------------------------------------------------------------------------------------
def _day_matches(cron: Cron, t: datetime) -> bool:
    # day_of_week 0 is Sunday; both day fields must match (Celery's reading, kept: see spec/cron.py).
    return t.day in cron.day_of_month and (t.isoweekday() % 7) in cron.day_of_week


def latest_slot(cron: Cron, at: datetime) -> datetime | None:
    """The latest time <= `at` (to the minute, UTC) at which `cron` fires; None if none in the lookback."""
    t = at.astimezone(UTC).replace(second=0, microsecond=0)
    floor = t - _CRON_LOOKBACK
    while t >= floor:
        if t.month not in cron.month_of_year:
            t = t.replace(day=1, hour=0, minute=0) - timedelta(minutes=1)  # last minute of the previous month
        elif not _day_matches(cron, t):
            t = t.replace(hour=0, minute=0) - timedelta(minutes=1)
        elif t.hour not in cron.hour:
            t = t.replace(minute=0) - timedelta(minutes=1)
        elif t.minute not in cron.minute:
            t -= timedelta(minutes=1)
        else:
            return t
    return None


# -- the schedule tick -----------------------------------------------------------------------
@dataclass
class TickResult:
    """What one tick did, by project id."""

    started: dict[str, str] = field(default_factory=dict)  # project -> run id
    busy: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DueProject:
    project: str
    company: str
    slot: datetime


_warned: set[tuple[str, str]] = set()


def _warn_once(kind: str, key: str, message: str, *args: Any) -> None:
    """A condition that repeats every tick is logged at WARNING the first time, then at DEBUG."""
    level = logging.DEBUG if (kind, key) in _warned else logging.WARNING
    _warned.add((kind, key))
    log.log(level, message, *args)


def due_schedules(engine: Engine | None = None, now: datetime | None = None) -> tuple[list[DueProject], dict[str, str]]:
    """Projects whose cron has a slot after the one last handled (or after the spec was applied), up to `now`.

    Returns (due projects, {project: problem} for schedules that do not parse).
    The schedule is read from the database on every call, so an edit through
    the API or `firefeed apply` counts from the next tick without a restart.
    """
    from firefeed.spec.cron import parse_cron

    engine = engine or get_engine()
    now = now or db_now(engine)
    with session_factory(engine)() as s:
        rows = s.execute(
            select(
                Project.id, Project.company_id, Project.schedule, Project.last_scheduled_at, Project.updated_at
            ).where(Project.schedule.is_not(None), Project.schedule != "")
        ).all()
    due: list[DueProject] = []
    invalid: dict[str, str] = {}
    for project_id, company, schedule, last_slot, updated_at in rows:
        try:
            cron = parse_cron(str(schedule))
        except ValueError as err:
            invalid[project_id] = f"schedule {schedule!r} {err}"
            continue
        # Never scheduled: count from when the spec (and so the schedule) was applied, not from the epoch.
        anchor = last_slot or updated_at
        slot = latest_slot(cron, now)
        if slot is not None and slot > anchor:
            due.append(DueProject(project_id, company, slot))
    return due, invalid


def _claim_slot(engine: Engine, project_id: str, slot: datetime) -> bool:
    """Move the project's last handled slot forward to `slot`; False when another tick already did."""
    with session_factory(engine)() as s, s.begin():
        won = s.execute(
            update(Project)
            .where(
                Project.id == project_id,
                or_(Project.last_scheduled_at.is_(None), Project.last_scheduled_at < slot),
            )
            .values(last_scheduled_at=slot)
            .returning(Project.id)
        ).scalar()
        return won is not None


def tick(
    engine: Engine | None = None,
    now: datetime | None = None,
    start: Callable[[str], str] | None = None,
) -> TickResult:
    """Start one run (trigger "beat") for each project whose schedule is due.

    Each due slot is claimed first with a compare-and-set on the project row,
    so two beat processes (or two ticks at once) start it once: the loser
    counts a `duplicate` and warns once that another beat is running. A slot
    missed while beat was down is started once, not once per missed slot. A
    project still busy with another run skips that slot, counted as `busy` and
    logged once (the slot is spent, so the next tick does not log it again).
    """
    engine = engine or get_engine()
    if start is None:
        from firefeed.runs.requests import start_run
        from firefeed.runs.service import RunStore

        store = RunStore(engine)

        def start(project_id: str) -> str:
            return start_run(project_id, "beat", store=store)

    result = TickResult()
    due, invalid = due_schedules(engine, now)
    for project_id, problem in invalid.items():
        metrics.schedule_outcome("invalid")
        result.invalid[project_id] = problem
        _warn_once("invalid", f"{project_id}:{problem}", "project %s is not scheduled: %s", project_id, problem)
    for item in due:
        with run_context(project=item.project, company=item.company):
            if not _claim_slot(engine, item.project, item.slot):
                metrics.schedule_outcome("duplicate")
                result.duplicate.append(item.project)
                _warn_once(
                    "duplicate",
                    "beat",
                    "slot %s of project %s was already taken by another tick: is a second beat running? "
                    "(no double run: each slot starts once)",
                    item.slot.isoformat(),
                    item.project,
                )
                continue
            try:
                run_id = start(item.project)
            except PipelineBusyError as err:
                metrics.schedule_outcome("busy")
                result.busy.append(item.project)
                log.info(
                    "scheduled run of %s at %s skipped: the project is busy with run %s",
                    item.project,
                    item.slot.isoformat(),
                    err.run_id,
                )
                continue
            except NotFoundError:
                continue  # deleted between the read and the start
            except Exception as err:
                metrics.schedule_outcome("error")
                result.errors[item.project] = f"{type(err).__name__}: {err}"
                log.error("scheduled run of %s at %s could not start: %s", item.project, item.slot.isoformat(), err)
                continue
            metrics.schedule_outcome("started")
            result.started[item.project] = run_id
            with run_context(run_id=run_id):
                log.info("scheduled run started for slot %s", item.slot.isoformat())
    return result


# -- the reaper ------------------------------------------------------------------------------
def resend_pending_runs(
    enqueue: Callable[[str], object], engine: Engine | None = None, stale_after_s: float | None = None
) -> list[str]:
    """Send again the root task of every run PENDING for longer than a lease (FIREFEED_STALE_RUN_S).

    Its message may be gone (a broker restarted without persistence, a purged queue), and a run
    that never starts holds its project for good. A run that is only queued behind others gets a
    duplicate message, which is harmless: its PENDING -> RUNNING claim lets one driver through.
    While PENDING a run has no heartbeat, so `heartbeat_at` records the last send: one UPDATE
    claims each resend, so two beats never both send, and a run is sent at most once a lease.
    """
    from firefeed.config import get_settings

    engine = engine or get_engine()
    stale_after_s = stale_after_s if stale_after_s is not None else get_settings().stale_run_s
    with session_factory(engine)() as s, s.begin():
        due = [
            str(key)
            for key in s.execute(
                update(PipelineRun)
                .where(
                    PipelineRun.status == "PENDING",
                    func.coalesce(PipelineRun.heartbeat_at, PipelineRun.requested_at)
                    < func.now() - text("make_interval(secs => :stale)"),
                )
                .values(heartbeat_at=func.now())
                .returning(PipelineRun.id)
                .execution_options(synchronize_session=False),
                {"stale": stale_after_s},
            ).scalars()
        ]
    for run_id in due:
        with run_context(run_id=run_id):
            try:
                enqueue(run_id)
                log.warning("run was still PENDING after %gs: its root task was sent again", stale_after_s)
            except Exception:  # the broker is down: the next tick tries again
                log.warning("could not send the PENDING run's root task again", exc_info=True)
    return due


def reap_stale_runs(engine: Engine | None = None, stale_after_s: float | None = None) -> list[str]:
    """Take over and fail every RUNNING run whose heartbeat is older than `stale_after_s` (FIREFEED_STALE_RUN_S).

    The driver of such a run is gone (its worker crashed, was killed or lost the
    database), and the run would hold its project's lock until someone asks for
    the project again: the sweep for projects nobody asks for. Each run is ended by
    the same takeover an entry point uses (runs/stale.py), decided under the
    project's lock and only while the heartbeat is still stale, so a run whose
    driver beats again is left alone.
    """
    from firefeed.config import get_settings
    from firefeed.runs.stale import take_over_stale_run

    engine = engine or get_engine()
    stale_after_s = stale_after_s if stale_after_s is not None else get_settings().stale_run_s
    with session_factory(engine)() as s:
        candidates = list(
            s.execute(
                select(PipelineRun.id).where(
                    PipelineRun.status == "RUNNING",
                    PipelineRun.heartbeat_at < func.now() - text("make_interval(secs => :stale)"),
                ),
                {"stale": stale_after_s},
            ).scalars()
        )
    return [
        str(key)
        for key in candidates
        if take_over_stale_run(str(key), by="the reaper", stale_after_s=stale_after_s, engine=engine)
    ]


# -- history ---------------------------------------------------------------------------------
def prune_history(retention_days: int | None = None, engine: Engine | None = None) -> int:
    """Delete finished runs (their steps and jobs cascade) older than the retention; returns runs deleted.

    Each project's latest run is kept whatever its age, so `firefeed status
    PROJECT` always has something to show. Deletes in small batches.
    """
    from firefeed.config import get_settings

    engine = engine or get_engine()
    days = retention_days if retention_days is not None else get_settings().run_retention_days
    latest = (
        select(PipelineRun.id)
        .ext(distinct_on(PipelineRun.project_id))
        .order_by(PipelineRun.project_id, PipelineRun.requested_at.desc())
    )
    victims = (
        select(PipelineRun.id)
        .where(
            PipelineRun.status.not_in(("PENDING", "RUNNING")),
            func.coalesce(PipelineRun.finished_at, PipelineRun.requested_at)
            < func.now() - text("make_interval(days => :days)"),
            PipelineRun.id.not_in(latest),
        )
        .limit(_PRUNE_BATCH)
    )
    total = _delete_in_batches(engine, victims, PipelineRun, {"days": days})
    if total:
        metrics.runs_pruned(total)
        log.info("pruned %d runs older than %d days", total, days)
    versions = prune_spec_versions(engine)
    if versions:
        log.info("pruned %d spec versions no run or project refers to", versions)
    return total


def prune_spec_versions(engine: Engine | None = None) -> int:
    """Delete the spec versions nothing refers to: no run (pruned ones included) and no project's current
    spec; returns how many.

    Every apply of a different document stores a version, so a tenant that applies specs in a loop
    would otherwise grow the table without bound; a version is only ever read through a run or its
    project. Rows being applied again right now are locked by that apply's upsert and skipped
    (`SKIP LOCKED`), so an apply never loses the version it is about to point its project at.
    """
    engine = engine or get_engine()
    victims = (
        select(SpecVersion.id)
        .where(
            ~select(PipelineRun.id).where(PipelineRun.spec_version_id == SpecVersion.id).exists(),
            ~select(Project.id).where(Project.spec_version_id == SpecVersion.id).exists(),
        )
        .limit(_PRUNE_BATCH)
        .with_for_update(skip_locked=True)
    )
    return _delete_in_batches(engine, victims, SpecVersion)


def _delete_in_batches(
    engine: Engine, victims: Any, model: type[PipelineRun] | type[SpecVersion], params: dict[str, Any] | None = None
) -> int:
    """Delete the rows of `model` whose ids `victims` selects (at most _PRUNE_BATCH of them), a transaction per
    batch until a batch comes back short, so a large backlog never holds long locks; returns how many."""
    total = 0
    sessions = session_factory(engine)
    while True:
        with sessions() as s, s.begin():
            ids = list(s.execute(victims, params or {}).scalars())
            if ids:
                s.execute(delete(model).where(model.id.in_(ids)))
        total += len(ids)
        if len(ids) < _PRUNE_BATCH:
            return total


def drop_orphan_tmp_tables(engine: Engine | None = None) -> list[str]:
    """The janitor: drop rules_tmp tables whose run is not PENDING or RUNNING (never a live run's)."""
    from firefeed.dataplane.run_tables import RunTables
    from firefeed.schema.service import SchemaService

    schema = SchemaService(engine)
    dropped = RunTables(schema).drop_orphan_tmp_tables()
    if dropped:
        metrics.rules_tmp_dropped(len(dropped))
    # A preview's scratch area lives seconds; one an hour old was left by a preview that crashed.
    schema.drop_stale_scratch_areas(older_than_s=SCRATCH_AREA_MAX_AGE_S)
    return dropped


def remove_stale_export_temporaries(engine: Engine | None = None, stale_after_s: float | None = None) -> list[str]:
    """The janitor: remove FireFeed's temporary export files a killed worker left in the local export folder.

    Only files of FireFeed's own temporary shape (`firefeed.storage.leftovers`),
    unchanged for longer than `stale_after_s` (FIREFEED_STALE_RUN_S) and of a
    run that is no longer PENDING or RUNNING, so another project's run writing
    into the same folder right now never loses its file. A bucket has no such
    files (its writers spool elsewhere). Returns the removed files.
    """
    from firefeed.config import get_settings
    from firefeed.storage import export_storage
    from firefeed.storage.leftovers import stale_leftovers
    from firefeed.storage.local import LocalStorage
    from firefeed.storage.spares import orphans

    settings = get_settings()
    storage = export_storage(settings)
    if not isinstance(storage, LocalStorage) or not storage.root.is_dir():
        return []
    stale_after_s = stale_after_s if stale_after_s is not None else settings.stale_run_s
    engine = engine or get_engine()
    # Read before the folder is walked: a run that starts later writes files younger than the lease.
    with session_factory(engine)() as s:
        active = {
            str(run_id)[:8]
            for run_id in s.execute(
                select(PipelineRun.id).where(PipelineRun.status.in_(("PENDING", "RUNNING")))
            ).scalars()
        }
    removed: list[str] = []
    for path in stale_leftovers(storage.root, older_than_s=stale_after_s, active_runs=active):
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("could not remove the leftover temporary export file %s: %s", path, exc)
            continue
        removed.append(str(path))
        log.info("removed the leftover temporary export file %s (%d bytes) of an ended run", path, size)
    # The copies kept beside large exports (storage/spares.py) whose export is gone (a path changed, a
    # project deleted): nothing would write over them again.
    for path in orphans(storage.root):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(str(path))
            log.info("removed the spare copy %s of an export that is gone", path)
    return removed
