"""Working-day arithmetic for invoices and SLAs: weekends and listed holidays are not worked."""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, timedelta

ONE_DAY = timedelta(days=1)


def is_workday(day: date, holidays: Collection[date] = ()) -> bool:
    return day.weekday() < 5 and day not in holidays


def business_days(start: date, end: date, holidays: Collection[date] = ()) -> int:
    """Working days from ``start`` to ``end``, both included; 0 when ``end`` is before ``start``."""
    count = 0
    day = start
    while day < end:
        if is_workday(day, holidays):
            count += 1
        day += ONE_DAY
    return count


def add_business_days(start: date, days: int, holidays: Collection[date] = ()) -> date:
    """The working day ``days`` working days after ``start`` (``start`` itself when ``days`` is 0)."""
    if days < 0:
        raise ValueError("days must not be negative")
    day = start
    while days:
        day += ONE_DAY
        if is_workday(day, holidays):
            days -= 1
    return day
