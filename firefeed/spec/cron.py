"""Cron schedules (five fields, UTC), validated and evaluated by Celery's own crontab."""

from __future__ import annotations

from celery.schedules import crontab


def parse_cron(expr: str) -> crontab:
    """A celery crontab for `minute hour day-of-month month day-of-week`; ValueError names the problem."""
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(f"must have 5 fields (minute hour day month weekday), got {len(parts)}")
    minute, hour, dom, month, dow = parts
    try:
        return crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    except Exception as err:  # celery raises ValueError and friends with terse messages
        raise ValueError(f"is not a valid cron expression: {err}") from None
