"""The RunReport (SPEC section 5), rebuilt from the run row and its step timeline.

Each step stores its part of the report in its `detail`, so any process (the
batch CLI, the root Celery task, the API, the processes worker) can produce the
same report from the database alone.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from firefeed.runs.service import STEPS, RunStore

log = logging.getLogger(__name__)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _duration(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def _export_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """An export's report entry; its channel rules' `matched` pairs (kept in order through JSONB) as a mapping."""
    rules = entry.get("rules")
    if not rules:
        return entry
    return {**entry, "rules": {**rules, "matched": dict(rules.get("matched") or [])}}


def _with_feed_urls(store: RunStore, project_id: str, exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each export's feed URL and last fetch (SPEC 10 C5), as of now; a report never fails for them."""
    if not exports:
        return exports
    try:
        from firefeed.config import get_settings
        from firefeed.feeds.store import project_feeds

        found = {f.export: f.as_dict() for f in project_feeds(store.engine, get_settings(), project_id)}
    except Exception:
        log.warning("could not add the feed URLs to a run's report", exc_info=True)
        return exports
    return [
        {**e, "url": found[e["name"]]["url"], "last_fetch": found[e["name"]]["last_fetch"]}
        if e.get("name") in found
        else e
        for e in exports
    ]


def with_deliveries(engine: Any, run_id: str, exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from firefeed.deliveries.plan import with_deliveries as add

    return add(engine, run_id, exports)


def with_sync(engine: Any, run_id: str, exports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from firefeed.sync.jobs import with_sync as add

    return add(engine, run_id, exports)


def build_report(store: RunStore, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    steps = store.steps(run_id)
    details = {st.step: (st.detail or {}) for st in steps}
    sources: dict[str, dict[str, Any]] = {}
    for step in ("FETCH", "PARSE", "MERGE"):
        for entry in details.get(step, {}).get("sources", []):
            merged = sources.setdefault(
                entry["name"],
                {
                    "name": entry["name"],
                    "bytes": 0,
                    "rows": 0,
                    "not_modified": False,
                    "skipped": {"empty_key": 0, "duplicate_key": 0, "malformed": 0},
                },
            )
            for k, v in entry.items():
                if k == "skipped":
                    merged["skipped"].update(v)
                else:
                    merged[k] = v
    rules = details.get("RULES") or {"passes": 0, "matched": {}, "excluded": 0}
    report: dict[str, Any] = {
        "run_id": str(run.id),
        "company": run.company_id,
        "project": run.project_id,
        "status": run.status,
        "trigger": run.trigger,
        "requested_at": _iso(run.requested_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "duration_s": _duration(run.started_at, run.finished_at),
        "steps": [
            {
                "step": st.step,
                "status": st.status,
                "started_at": _iso(st.started_at),
                "finished_at": _iso(st.finished_at),
                "duration_s": _duration(st.started_at, st.finished_at),
                "rows_in": st.rows_in,
                "rows_out": st.rows_out,
            }
            for st in steps
            if st.step in STEPS
        ],
        "sources": list(sources.values()),
        "rules": {
            "passes": rules.get("passes", 0),
            "matched": dict(rules.get("matched") or []),
            "excluded": rules.get("excluded", 0),
            **({"lookups": rules["lookups"]} if rules.get("lookups") else {}),
        },
        **({"lookups": details["MERGE"]["lookups"]} if details.get("MERGE", {}).get("lookups") else {}),
        "exports": with_sync(
            store.engine,
            str(run.id),
            with_deliveries(
                store.engine,
                str(run.id),
                _with_feed_urls(
                    store, run.project_id, [_export_entry(e) for e in details.get("EXPORT", {}).get("exports", [])]
                ),
            ),
        ),
        # SPEC 11 I2: how the run computed its items; None for a run that ended before MERGE (or predates it).
        "incremental": details.get("MERGE", {}).get("incremental"),
        "warnings": [w for st in steps for w in (st.detail or {}).get("warnings", [])],
        "error": run.error,
    }
    return report
