"""Cron schedules: five fields, UTC, parsed here without Celery (the core never imports it).

The reading is the one beat used before (Celery's crontab), so stored schedules keep firing at the same
minutes: `*`, lists, ranges, steps (`*/15`, `10-50/10`), day and month names, Sunday as 0 or 7; a slot
must match both day fields (not cron's "either" when both are restricted).
"""

from __future__ import annotations

from dataclasses import dataclass

_MONTHS = {
    m: i
    for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1)
}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}


@dataclass(frozen=True)
class Cron:
    """The minutes, hours, days of month, months and days of week (0 = Sunday) at which a schedule fires."""

    minute: frozenset[int]
    hour: frozenset[int]
    day_of_month: frozenset[int]
    month_of_year: frozenset[int]
    day_of_week: frozenset[int]


def _number(text: str, names: dict[str, int], label: str) -> int:
    word = text.lower()
    if word in names:
        return names[word]
    if not word.isdigit():
        raise ValueError(f"{label} {text!r} is not a number")
    return int(word)


def _field(text: str, lo: int, hi: int, label: str, names: dict[str, int] | None = None) -> frozenset[int]:
    names = names or {}
    top = 7 if label == "day of week" else hi  # 7 is Sunday too
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ValueError(f"{label} has an empty list item")
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"{label} step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _number(a, names, label), _number(b, names, label)
        else:
            first = _number(base, names, label)
            last = hi if step_text else first
        for n in (first, last):
            if not lo <= n <= top:
                raise ValueError(f"{label} {n} is out of range {lo}-{hi}")
        if first > last:
            raise ValueError(f"{label} range {base!r} runs backwards")
        values.update(n % 7 if top == 7 else n for n in range(first, last + 1, step))
    return frozenset(values)


def parse_cron(expr: str) -> Cron:
    """Parse `minute hour day-of-month month day-of-week`; ValueError names the field that is wrong."""
    parts = expr.split()
    if len(parts) != 5:
        raise ValueError(f"must have 5 fields (minute hour day month weekday), got {len(parts)}")
    minute, hour, dom, month, dow = parts
    try:
        return Cron(
            minute=_field(minute, 0, 59, "minute"),
            hour=_field(hour, 0, 23, "hour"),
            day_of_month=_field(dom, 1, 31, "day of month"),
            month_of_year=_field(month, 1, 12, "month", _MONTHS),
            day_of_week=_field(dow, 0, 6, "day of week", _DAYS),
        )
    except ValueError as err:
        raise ValueError(f"is not a valid cron expression: {err}") from None
