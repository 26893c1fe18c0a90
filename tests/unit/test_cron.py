"""Cron schedules are parsed without Celery, and read the way beat read them with Celery's crontab."""

from __future__ import annotations

import subprocess
import sys

import pytest
from celery.schedules import crontab

from firefeed.spec.cron import parse_cron

SAME_AS_CELERY = [
    "*/5 * * * *",
    "7 12 * * *",
    "0 3 * * 1",
    "0 3 * * 0",
    "30 23 31 * *",
    "0 0 1 1 *",
    "10-50/10 1,3,5 */2 jan-mar mon-fri",
    "0 0 * * sun",
    "15 */6 1-15 * *",
    "0 9 * * 1-5",
    "0 0 * FEB *",
    "1-59/7 * * * *",
]


@pytest.mark.parametrize("expr", SAME_AS_CELERY)
def test_an_expression_fires_at_the_minutes_celery_s_crontab_gave(expr: str) -> None:
    minute, hour, dom, month, dow = expr.split()
    celery = crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    ours = parse_cron(expr)
    assert ours.minute == set(celery.minute)
    assert ours.hour == set(celery.hour)
    assert ours.day_of_month == set(celery.day_of_month)
    assert ours.month_of_year == set(celery.month_of_year)
    assert ours.day_of_week == set(celery.day_of_week)


def test_sunday_is_zero_or_seven() -> None:
    assert parse_cron("0 0 * * 7").day_of_week == {0}
    assert parse_cron("0 0 * * 5-7").day_of_week == {5, 6, 0}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * *", "must have 5 fields"),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range 0-23"),
        ("* * 0 * *", "day of month 0 is out of range 1-31"),
        ("* * * 13 *", "month 13 is out of range 1-12"),
        ("* * * * 8", "day of week 8 is out of range 0-6"),
        ("a * * * *", "minute 'a' is not a number"),
        ("*/0 * * * *", "minute step '0' must be a positive number"),
        ("5-1 * * * *", "minute range '5-1' runs backwards"),
        ("1,,2 * * * *", "minute has an empty list item"),
    ],
)
def test_a_bad_expression_names_the_field(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cron(expr)


def test_parsing_and_evaluating_schedules_imports_no_celery() -> None:
    code = (
        "import sys; import firefeed.spec.cron, firefeed.runs.maintenance; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'kombu')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
