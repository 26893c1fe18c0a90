"""Maintenance tasks run by beat: the rules_tmp janitor and the stale-run reaper."""

from __future__ import annotations

from firefeed.celery_app import app


@app.task(name="firefeed.maintenance.janitor")
def janitor() -> list[str]:
    """Drop `rules_tmp_*` tables whose run is no longer PENDING or RUNNING."""
    from firefeed.schema.service import SchemaService

    return SchemaService().drop_orphan_tmp_tables()
