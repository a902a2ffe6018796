"""Working hours from timesheet entries ({"day": ..., "start": "HH:MM", "end": "HH:MM"})."""

from __future__ import annotations

from collections import defaultdict


def parse_clock(text: str) -> int:
    """Minutes since midnight of a "HH:MM" clock reading."""
    hours, _, minutes = text.strip().partition(":")
    if not minutes:
        raise ValueError(f"not a clock time: {text!r}")
    h, m = int(hours), int(minutes)
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(f"not a clock time: {text!r}")
    return h * 60 + m


def shift_minutes(entry: dict) -> int:
    """Length of one shift; a shift that ends before it starts runs past midnight."""
    start = parse_clock(entry["start"])
    end = parse_clock(entry["start"])
    if end < start:
        end += 24 * 60
    return end - start


def hours_per_day(entries: list[dict]) -> dict[str, float]:
    totals: dict[str, int] = defaultdict(int)
    for entry in entries:
        totals[entry["day"]] += shift_minutes(entry)
    return {day: round(minutes / 60, 2) for day, minutes in sorted(totals.items())}


def overtime(entries: list[dict], daily_limit: float = 8.0) -> float:
    """Hours worked beyond ``daily_limit`` on each day, summed."""
    return round(sum(max(0.0, h - daily_limit) for h in hours_per_day(entries).values()), 2)
