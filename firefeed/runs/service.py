"""Projects and runs in the control plane: apply a spec, request a run, record its timeline."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from firefeed import metrics
from firefeed.config import get_settings
from firefeed.db.engine import get_engine, raw_connection, session_factory
from firefeed.db.models import (
    Company,
    Export,
    PipelineRun,
    PipelineStep,
    Project,
    PublishedFile,
    Rule,
    Source,
    SpecVersion,
)
from firefeed.db.sqlfile import load_queries
from firefeed.errors import NotFoundError, PipelineBusyError, RunCancelledError, SpecChangedError
from firefeed.runs.contract import RunStatus
from firefeed.runs.lock import ACTIVE, Db, active_run_id, project_head, with_project_pipeline_lock
from firefeed.runs.spec_versions import spec_digest as spec_digest  # its old home: callers import it here
from firefeed.runs.spec_versions import store_version
from firefeed.runs.stale import take_over_stale_run
from firefeed.runs.statements import HeldConnection, run_statement
from firefeed.secrets.references import check_spec as check_references
from firefeed.secrets.references import origin_of
from firefeed.secrets.store import SecretStore
from firefeed.spec.loader import parse_spec
from firefeed.spec.model import ProjectSpec
from firefeed.spec.server_checks import check_server_side

STEPS = ("FETCH", "PARSE", "MERGE", "RULES", "EXPORT")
TRIGGERS = ("cli", "api", "beat", "task", "process")
#: how many of a project's latest spec versions a run that succeeded looks back on for tables to drop
#: (each applied spec that was run is one)
FORMER_SPECS = 50

log = logging.getLogger(__name__)


def now() -> datetime:
    return datetime.now(UTC)


def _insert_run(db: Db, values: dict[str, Any]) -> str:
    run_id = uuid.uuid4()
    db.execute(insert(PipelineRun).values(id=run_id, status="PENDING", requested_at=now(), **values))
    return str(run_id)


class RunStore:
    """Reads and writes projects, runs and steps; one short transaction per call."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine or get_engine()
        self.sessions = session_factory(self.engine)
        #: The run driver's connection while it drives a run: the timeline's writes go there
        #: (firefeed/runs/statements.py). Only the driver's own thread may use a store that holds one.
        self.held: HeldConnection | None = None

    # -- projects ---------------------------------------------------------
    def apply_spec(
        self, spec: ProjectSpec, *, spec_dir: Path | None, company: str | None = None, expected: int | None = None
    ) -> bool:
        """Create or update the company, project, sources, rules and exports. True when created.

        `company`, when given, is the caller's company (API token): a project id
        owned by another company is refused as unknown rather than taken over.
        A spec without a folder (API, processes) may not name an environment variable.
        `expected`: the spec version the caller's change was made on (an edit of the current document,
        such as rows added to a lookup); SpecChangedError, nothing written, when another apply came first.
        """
        check_references(spec, origin_of(spec_dir), get_settings().spec_env_allow)
        check_server_side(spec, spec_dir, get_settings(), lambda c: (x.name for x in SecretStore(self.engine).list(c)))
        raw = spec.model_dump(mode="json", exclude_unset=True)
        with self.sessions() as s, s.begin():
            s.execute(pg_insert(Company).values(id=spec.company).on_conflict_do_nothing())
            # Created by this statement, or left as it is: two first applies of one new project at once
            # both INSERTed, and the second's unique violation was a 500. Now the second waits for the
            # first's commit, then locks and updates the row like any later apply.
            inserted = s.execute(
                pg_insert(Project)
                .values(id=spec.project, company_id=spec.company, spec=raw)
                .on_conflict_do_nothing()
                .returning(Project.id)
            ).first()
            existing = s.get(Project, spec.project, with_for_update=True)
            assert existing is not None
            if existing.company_id != spec.company:
                # A caller of one company (API, processes) gets the answer of a missing project, word for word.
                if company is not None:
                    raise NotFoundError(f"unknown project {spec.project!r}")
                raise NotFoundError(f"project {spec.project!r} belongs to another company")
            created = inserted is not None
            existing.name = spec.name
            existing.key_field = spec.key
            existing.schedule = spec.schedule
            existing.spec = raw
            existing.spec_dir = str(spec_dir) if spec_dir else None
            existing.updated_at = now()
            previous = existing.spec_version_id
            if expected is not None and previous != expected:
                # Checked under the project row's lock: no apply can come between this and the write.
                raise SpecChangedError(f"project {spec.project!r} changed while the edit was made")
            s.flush()
            # Stored once per distinct document (not per run): a run refers to the version current when it was
            # requested. The company's versions are cut back to their bound in this same transaction.
            existing.spec_version_id = store_version(
                s, spec.company, spec.project, raw, existing.spec_dir, previous=previous
            )
            old_sources = {src.name: src for src in s.scalars(select(Source).where(Source.project_id == spec.project))}
            for i, src in enumerate(spec.sources):
                definition = src.model_dump(mode="json", exclude_none=True)
                row = old_sources.pop(src.name, None)
                if row is None:
                    row = Source(project_id=spec.project, name=src.name)
                    s.add(row)
                elif row.definition != definition:
                    # A changed definition must be parsed again even if the file did not change.
                    row.parse_signature = None
                row.position, row.url, row.definition = i, src.url, definition
            for row in old_sources.values():
                s.delete(row)
            s.execute(delete(Rule).where(Rule.project_id == spec.project))
            s.execute(delete(Export).where(Export.project_id == spec.project))
            for rule in spec.parsed_rules:
                s.add(
                    Rule(
                        project_id=spec.project,
                        position=rule.index,
                        name=rule.name,
                        enabled=rule.enabled,
                        definition=raw["rules"][rule.index - 1],
                    )
                )
            for i, exp in enumerate(spec.exports):
                s.add(
                    Export(
                        project_id=spec.project,
                        name=exp.name,
                        position=i,
                        format=exp.format,
                        path=exp.path,
                        definition=exp.model_dump(mode="json", exclude_none=True),
                    )
                )
        from firefeed.schema.service import SchemaService

        SchemaService(self.engine).create_company_schema(spec.company)
        return created

    def project(self, project_id: str, *, company: str | None = None) -> Project:
        with self.sessions() as s:
            row = s.get(Project, project_id)
            if row is None or (company is not None and row.company_id != company):
                raise NotFoundError(f"unknown project {project_id!r}")
            return row

    def project_spec(self, project_id: str) -> tuple[ProjectSpec, Path | None]:
        row = self.project(project_id)
        return parse_spec(row.spec), Path(row.spec_dir) if row.spec_dir else None

    def run_spec(self, run_id: str) -> tuple[ProjectSpec, Path | None]:
        """The spec version a run was requested with (runs from before snapshots: the project's current spec)."""
        try:
            key = uuid.UUID(str(run_id))
        except ValueError:
            raise NotFoundError(f"unknown run {run_id!r}") from None
        with self.sessions() as s:
            row = s.execute(
                select(PipelineRun.project_id, SpecVersion.spec, SpecVersion.spec_dir)
                .outerjoin(SpecVersion, SpecVersion.id == PipelineRun.spec_version_id)
                .where(PipelineRun.id == key)
            ).one_or_none()
        if row is None:
            raise NotFoundError(f"unknown run {run_id!r}")
        if row.spec is None:
            return self.project_spec(row.project_id)
        return parse_spec(row.spec), Path(row.spec_dir) if row.spec_dir else None

    def former_names(self, project_id: str) -> tuple[set[str], set[str]]:
        """(source names, lookup names) of the latest FORMER_SPECS spec versions the project's runs were
        requested with, failed runs' included.

        Such a run may have staged and keyed tables that the run succeeding now no longer names. Their
        names are computed from the project's id and these names, so they are found even where the
        identifier limit cut the project's id (`identifiers.project_file_table` cannot tell those from
        a longer project's). Not only since the previous success: a table that success found in use
        (`_drop_unless_busy`) is found again. Only the two lists are read, not whole documents."""
        with self.sessions() as s:
            versions = (
                select(PipelineRun.spec_version_id)
                .where(PipelineRun.project_id == project_id, PipelineRun.spec_version_id.is_not(None))
                .group_by(PipelineRun.spec_version_id)
                .order_by(func.max(PipelineRun.requested_at).desc())
                .limit(FORMER_SPECS)
            )
            rows = s.execute(
                select(SpecVersion.spec["sources"], SpecVersion.spec["lookups"]).where(
                    SpecVersion.id.in_(versions.scalar_subquery())
                )
            ).all()
        return _names(row[0] for row in rows), _names(row[1] for row in rows)

    def source_rows(self, project_id: str) -> dict[str, Source]:
        with self.sessions() as s:
            return {r.name: r for r in s.scalars(select(Source).where(Source.project_id == project_id))}

    def update_source(self, project_id: str, name: str, **values: Any) -> None:
        with self.sessions() as s, s.begin():
            s.execute(update(Source).where(Source.project_id == project_id, Source.name == name).values(**values))

    def published_identities(self, project_id: str) -> dict[str, tuple[str, dict[str, Any]]]:
        """Each export's kept published-file identity: {export name: (storage key, identity)}."""
        with self.sessions() as s:
            rows = s.scalars(select(PublishedFile).where(PublishedFile.project_id == project_id))
            return {r.export_name: (r.path, dict(r.identity)) for r in rows}

    def keep_published_identity(self, project_id: str, export_name: str, path: str, identity: dict[str, Any]) -> None:
        self.keep_published_identities(project_id, {export_name: (path, identity)})

    def keep_published_identities(self, project_id: str, identities: Mapping[str, tuple[str, dict[str, Any]]]) -> None:
        """Keep each export's published-file identity ({export name: (storage key, identity)}), in one
        transaction: a publish keeps those of all its files at once."""
        if not identities:
            return
        with self.sessions() as s, s.begin():
            stmt = pg_insert(PublishedFile).values(
                [
                    {"project_id": project_id, "export_name": name, "path": path, "identity": identity}
                    for name, (path, identity) in identities.items()
                ]
            )
            s.execute(
                stmt.on_conflict_do_update(
                    index_elements=[PublishedFile.project_id, PublishedFile.export_name],
                    set_={"path": stmt.excluded.path, "identity": stmt.excluded.identity},
                )
            )

    # -- runs ---------------------------------------------------------------
    def request_run(
        self,
        project_id: str,
        trigger: str,
        *,
        company: str | None = None,
        accept_drop: bool = False,
        accept_invalid: bool = False,
        full: bool = False,
    ) -> str:
        """Create a PENDING run through the project lock; PipelineBusyError when one is active.

        `accept_drop`: a person confirmed this run may publish exports that lose more than their max_drop;
        `accept_invalid`: exports with more items in channel error than their max_invalid (SPEC 10 C3);
        `full`: recompute every item even when no input changed (SPEC 11 I2, `--full`).
        The hot path of every trigger (a 409 under a burst most of all): one connection, Core statements,
        and the run refers to the project's spec version rather than copying the document.
        """
        if trigger not in TRIGGERS:
            raise ValueError(f"unknown trigger {trigger!r}")
        lease_s = get_settings().stale_run_s
        with self.engine.connect() as conn:
            head = project_head(conn, project_id, lease_s=lease_s)
            if head is None or (company is not None and head.company_id != company):
                raise NotFoundError(f"unknown project {project_id!r}")
            if head.stale_run_id is not None:
                # Its driver is gone (killed, crashed): ended here rather than waited for, so no entry
                # point needs beat's reaper to get its project back. Then the lock decides as usual.
                take_over_stale_run(head.stale_run_id, by=f"a new run request ({trigger})", engine=self.engine)
                head = dataclasses.replace(head, active_run_id=None)
            values = {
                "project_id": project_id,
                "company_id": head.company_id,
                "trigger": trigger,
                # Read by the INSERT itself, not taken from `head`: an apply committed since then may have let
                # the version `head` saw go (runs/spec_versions.py keeps only the one before the current).
                "spec_version_id": select(Project.spec_version_id).where(Project.id == project_id).scalar_subquery(),
                "accept_drop": accept_drop,
                "accept_invalid": accept_invalid,
                "full": full,
            }
            try:
                if head.active_run_id is not None:  # committed and active: busy, no lock needed to say so
                    raise PipelineBusyError(project_id, head.active_run_id)
                run_id = with_project_pipeline_lock(
                    conn, project_id, lambda db: _insert_run(db, values), name_winner=True
                )
                conn.commit()
            except IntegrityError:
                # The partial unique index caught a run created outside the lock.
                conn.rollback()
                metrics.lock_refused(trigger)  # metrics (#5)
                raise PipelineBusyError(project_id, active_run_id(conn, project_id)) from None
            except PipelineBusyError:
                metrics.lock_refused(trigger)  # metrics (#5)
                raise
        return run_id

    def run(self, run_id: str) -> PipelineRun:
        try:
            key = uuid.UUID(str(run_id))
        except ValueError:
            raise NotFoundError(f"unknown run {run_id!r}") from None
        with self.sessions() as s:
            row = s.get(PipelineRun, key)
            if row is None:
                raise NotFoundError(f"unknown run {run_id!r}")
            return row

    def steps(self, run_id: str) -> list[PipelineStep]:
        with self.sessions() as s:
            rows = list(s.scalars(select(PipelineStep).where(PipelineStep.run_id == uuid.UUID(run_id))))
        order = {name: i for i, name in enumerate(STEPS)}
        return sorted(rows, key=lambda r: order.get(r.step, 99))

    def runs_of_project(self, project_id: str, limit: int = 20) -> list[PipelineRun]:
        with self.sessions() as s:
            return list(
                s.scalars(
                    select(PipelineRun)
                    .where(PipelineRun.project_id == project_id)
                    .order_by(PipelineRun.requested_at.desc())
                    .limit(limit)
                )
            )

    def mark_running(self, run_id: str) -> bool:
        """PENDING -> RUNNING; False when the run is no longer pending (cancelled, or already taken)."""
        with self.sessions() as s, s.begin():
            trigger = s.execute(
                update(PipelineRun)
                .where(PipelineRun.id == uuid.UUID(run_id), PipelineRun.status == "PENDING")
                .values(status="RUNNING", started_at=now(), heartbeat_at=now())
                .returning(PipelineRun.trigger)  # metrics (#5)
            ).scalar()
        if trigger is not None:
            metrics.run_started(trigger)  # metrics (#5)
        return trigger is not None

    def heartbeat(self, run_id: str) -> None:
        with self.sessions() as s, s.begin():
            s.execute(update(PipelineRun).where(PipelineRun.id == uuid.UUID(run_id)).values(heartbeat_at=now()))

    def check_cancel(self, run_id: str) -> None:
        """Raise RunCancelledError when a cancel was recorded for the run."""
        # Plain psycopg2, no ORM session: the watch loop asks at every poll.
        with raw_connection(self.engine) as conn, conn.cursor() as cur:
            cur.execute(load_queries("firefeed.runs")["cancel_requested"], {"run_id": str(run_id)})
            row = cur.fetchone()
        if row is not None and row[0]:
            raise RunCancelledError(f"run {run_id} was cancelled")

    def request_cancel(self, run_id: str) -> str:
        """Record the cancel first (it must hold even if a revoke is lost); returns the status after.

        Then the statements the run's backends are running are cancelled, wherever its
        workers are: the jobs see the flag when their statement fails (firefeed/runs/backends.py).
        A RUNNING run whose driver stopped beating for longer than the lease has no one left to see
        the flag: it is taken over and ended CANCELLED here (firefeed/runs/stale.py).
        """
        with self.sessions() as s, s.begin():
            run = s.get(PipelineRun, uuid.UUID(run_id), with_for_update=True)
            if run is None:
                raise NotFoundError(f"unknown run {run_id!r}")
            if run.status in ACTIVE:
                run.cancel_requested = True
                if run.status == "PENDING":
                    run.status, run.finished_at = "CANCELLED", now()
                    metrics.run_finished(run.trigger, "CANCELLED", None, None)  # metrics (#5)
            status = run.status
        if status == "RUNNING" and take_over_stale_run(
            run_id, by="a cancel", status=RunStatus.CANCELLED, engine=self.engine
        ):
            return self.run(run_id).status  # CANCELLED, or SUCCEEDED when it had recorded its publish
        if status == "RUNNING":
            from firefeed.runs.backends import cancel_run_backends

            try:
                cancel_run_backends(self.engine, run_id)
            except Exception:  # the flag is recorded: the run still stops at its next check
                log.warning("could not cancel the statements of run %s", run_id, exc_info=True)
        return status

    def step_started(self, run_id: str, step: str, at: datetime | None = None) -> None:
        run_statement(self.engine, self.held, "step_started", {"run_id": str(run_id), "step": step, "at": at or now()})

    def step_finished(
        self,
        run_id: str,
        step: str,
        status: str,
        *,
        rows_in: int = 0,
        rows_out: int = 0,
        detail: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> None:
        at = at or now()
        rows = run_statement(
            self.engine,
            self.held,
            "step_finished",
            {
                "run_id": str(run_id),
                "step": step,
                "status": status,
                "at": at,
                "rows_in": rows_in,
                "rows_out": rows_out,
                "detail": None if detail is None else json.dumps(detail),
            },
        )
        started_at = rows[0].started_at if rows else None
        metrics.step_finished(step, status, started_at, at, rows_in, rows_out)  # metrics (#5)

    def finish_run(
        self, run_id: str, status: str, *, report: dict[str, Any] | None, error: dict[str, Any] | None
    ) -> None:
        rows = run_statement(
            self.engine,
            self.held,
            "finish_run",
            {
                "run_id": str(run_id),
                "status": status,
                "report": None if report is None else json.dumps(report),
                "error": None if error is None else json.dumps(error),
            },
        )
        before = rows[0] if rows else None
        if before is not None and before.status in ACTIVE:
            metrics.run_finished(before.trigger, status, before.started_at, now())  # metrics (#5)

    def save_report(self, run_id: str, report: dict[str, Any]) -> None:
        """The report of a run `finish_run` ended (its finished_at stays the one the report shows).

        Every ended run's report passes here (the driver, a takeover, a recovered publish), so here its
        alerts are recorded (SPEC 10 C8): recorded only, sent elsewhere, never holding up the run.
        """
        run_statement(self.engine, self.held, "save_report", {"run_id": str(run_id), "report": json.dumps(report)})
        from firefeed.alerts.events import record_run_end

        record_run_end(str(run_id), report, engine=self.engine)


def _names(sections: Iterable[Any]) -> set[str]:
    """The `name` of each entry of stored `sources` or `lookups` lists (any shape they were stored in)."""
    names: set[str] = set()
    for entries in sections:
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.add(entry["name"])
    return names
