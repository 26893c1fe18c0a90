"""The SQL of deliveries: what each target last received (`delivered_files`), a run's deliver jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

from firefeed.runs.contract import DeliveryResult, JobKind


def last_sha256(engine: Engine, project: str, export: str, target: str) -> str | None:
    """The sha256 of the file `target` last received for the project's export, None before any."""
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT sha256 FROM delivered_files WHERE project_id = :p AND export_name = :e AND target = :t"),
            {"p": project, "e": export, "t": target},
        ).scalar()
    return str(found) if found is not None else None


def record_delivered(engine: Engine, project: str, run_id: str, result: DeliveryResult) -> None:
    """`target` now holds this file: the next delivery of the same sha256 is `unchanged`."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO delivered_files (project_id, export_name, target, sha256, bytes, run_id) "
                "VALUES (:p, :e, :t, :s, :b, CAST(:r AS uuid)) "
                "ON CONFLICT (project_id, export_name, target) DO UPDATE "
                "SET sha256 = EXCLUDED.sha256, bytes = EXCLUDED.bytes, run_id = EXCLUDED.run_id, delivered_at = now()"
            ),
            {"p": project, "e": result.export, "t": result.target, "s": result.sha256, "b": result.bytes, "r": run_id},
        )


@dataclass(frozen=True)
class DeliverJob:
    """A deliver job of a run as `firefeed deliver` and the report read it."""

    id: int
    idx: int
    status: str
    result: DeliveryResult | None
    params: dict[str, Any] | None


def run_deliveries(engine: Engine, run_id: str) -> list[DeliverJob]:
    """The run's deliver jobs, in the order they were planned."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, idx, status, result, params FROM pipeline_jobs "
                "WHERE run_id = CAST(:r AS uuid) AND kind = :k ORDER BY idx"
            ),
            {"r": run_id, "k": JobKind.DELIVER.value},
        ).all()
    return [
        DeliverJob(
            id=int(r.id),
            idx=int(r.idx),
            status=str(r.status),
            result=DeliveryResult.from_json(r.result) if r.status == "SUCCEEDED" and r.result else None,
            params=r.params,
        )
        for r in rows
    ]


def reopen(engine: Engine, job_id: int, *, lease_s: float) -> bool:
    """A deliver job that did not deliver (failed, cancelled, never run, or its worker stopped beating for a
    lease) back to PENDING, so it runs again; False for one delivered, unchanged or being delivered now."""
    with engine.begin() as conn:
        changed = conn.execute(
            text(
                "UPDATE pipeline_jobs SET status = 'PENDING', result = NULL, error = NULL, finished_at = NULL "
                "WHERE id = :id AND kind = :k AND ("
                "  status IN ('PENDING', 'FAILED', 'CANCELLED')"
                "  OR (status = 'SUCCEEDED' AND result ->> 'status' = 'failed')"
                "  OR (status = 'RUNNING' AND heartbeat_at < now() - make_interval(secs => :lease)))"
            ),
            {"id": job_id, "k": JobKind.DELIVER.value, "lease": lease_s},
        ).rowcount
    return bool(changed)


def last_published_run(engine: Engine, project: str) -> str | None:
    """The project's latest SUCCEEDED run: its files are the published ones."""
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT id FROM pipeline_runs WHERE project_id = :p AND status = 'SUCCEEDED' "
                "ORDER BY finished_at DESC NULLS LAST, requested_at DESC LIMIT 1"
            ),
            {"p": project},
        ).scalar()
    return str(found) if found is not None else None
