"""Which deliver jobs a run creates after its publish, and what their outcomes add to its RunReport."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from firefeed.deliveries import store
from firefeed.pipeline.context import RunContext
from firefeed.runs.contract import DeliverParams, DeliveryResult, DeliveryStatus, JobKind, JobSpec

log = logging.getLogger(__name__)


def plan(ctx: RunContext, published: Sequence[str]) -> list[JobSpec]:
    """One deliver job per target of each published export (by name), numbered in the spec's order."""
    from firefeed.pipeline.steps import export_key

    names = set(published)
    specs: list[JobSpec] = []
    for i, export in enumerate(ctx.spec.exports):
        if export.name not in names:
            continue
        key = export_key(ctx, i)
        for t in range(len(export.deliver)):
            specs.append(JobSpec(JobKind.DELIVER, idx=len(specs), params=DeliverParams(i, t, key)))
    return specs


def warnings(results: Sequence[DeliveryResult]) -> list[str]:
    """The run's `delivery_failed` warnings: the run stays SUCCEEDED, its files stay published."""
    return [
        f"delivery_failed: export {r.export!r} to {r.target}: {r.error}"
        for r in results
        if r.status is DeliveryStatus.FAILED
    ]


def with_deliveries(engine: Engine, run_id: str, exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each export's `deliveries` as its deliver jobs recorded them (a retry by `firefeed deliver` included);
    a report never fails for them."""
    if not exports:
        return exports
    try:
        jobs = store.run_deliveries(engine, run_id)
    except Exception:
        log.warning("could not add the deliveries to a run's report", exc_info=True)
        return exports
    found: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        if job.result is not None:
            found.setdefault(job.result.export, []).append(job.result.report())
    return [{**e, "deliveries": found[e["name"]]} if e.get("name") in found else e for e in exports]
