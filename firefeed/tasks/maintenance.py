"""Maintenance tasks run by beat: the janitor (rules_tmp tables, temporary export files), the reaper, the pruner.

Thin: each calls one plain function of firefeed/runs/maintenance.py. Their beat
entries are in firefeed/tasks/schedules.py.
"""

from __future__ import annotations

from firefeed.celery_app import app


@app.task(name="firefeed.maintenance.janitor")
def janitor() -> list[str]:
    """Drop `rules_tmp_*` tables whose run is no longer PENDING or RUNNING; remove its temporary export files.

    Returns the dropped tables, as before the files were added.
    """
    from firefeed.runs.maintenance import drop_orphan_tmp_tables, remove_stale_export_temporaries

    dropped = drop_orphan_tmp_tables()
    remove_stale_export_temporaries()
    return dropped


@app.task(name="firefeed.maintenance.reap")
def reap() -> list[str]:
    """Mark FAILED the RUNNING runs whose heartbeat is older than FIREFEED_STALE_RUN_S; returns their ids.

    Also sends again the root task of runs PENDING for longer than that (a lost message).
    """
    from firefeed.runs.maintenance import reap_stale_runs, resend_pending_runs
    from firefeed.tasks.dispatch import enqueue_run

    resend_pending_runs(enqueue_run)
    return reap_stale_runs()


@app.task(name="firefeed.maintenance.prune")
def prune() -> int:
    """Delete finished runs older than FIREFEED_RUN_RETENTION_DAYS; returns how many."""
    from firefeed.runs.maintenance import prune_history

    return prune_history()
