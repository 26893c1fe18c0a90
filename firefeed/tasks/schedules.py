"""Beat: the schedule tick task and every periodic entry `firefeed beat` sends.

Projects' cron schedules live in the database, not here: beat only sends
`firefeed.schedules.tick` every FIREFEED_SCHEDULE_TICK_S seconds, and the tick
reads the schedules afresh, so an edited schedule needs no beat restart.
"""

from __future__ import annotations

from typing import Any

from firefeed.celery_app import app
from firefeed.config import Settings

TICK_TASK = "firefeed.schedules.tick"


@app.task(name=TICK_TASK)
def tick() -> dict[str, Any]:
    """Start a run (trigger "beat") for each project whose schedule is due; returns what it did."""
    from dataclasses import asdict

    from firefeed.runs.maintenance import tick as run_tick

    return asdict(run_tick())


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Celery's `beat_schedule`: the tick and the maintenance tasks, at the intervals in the settings.

    Each message expires after one interval: when the pipeline queue is busy,
    stale ticks are dropped instead of piling up (the next tick catches up).
    """

    def every(task: str, seconds: float) -> dict[str, Any]:
        # Nobody reads a periodic task's result; on rpc:// it would pile up in beat's reply queue.
        return {"task": task, "schedule": seconds, "options": {"expires": seconds, "ignore_result": True}}

    return {
        "schedule-tick": every(TICK_TASK, settings.schedule_tick_s),
        "janitor": every("firefeed.maintenance.janitor", settings.maintenance_interval_s),
        "reap-stale-runs": every("firefeed.maintenance.reap", settings.maintenance_interval_s),
        "prune-history": every("firefeed.maintenance.prune", settings.prune_interval_s),
        "send-alerts": every("firefeed.alerts.sweep", settings.maintenance_interval_s),  # SPEC 10 C8
    }
