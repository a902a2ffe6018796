"""Merge log files from two services into one timeline.

Each log is already sorted by timestamp; lines look like ``2024-03-04T10:15:00 api GET /users``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Entry:
    timestamp: str  # ISO 8601, so text order is time order
    source: str
    message: str


def parse_line(line: str) -> Entry:
    timestamp, source, message = line.rstrip("\n").split(" ", 2)
    return Entry(timestamp, source, message)


def merge(a: list[Entry], b: list[Entry]) -> list[Entry]:
    """One sorted list from two sorted ones; on equal timestamps ``a``'s entry comes first."""
    merged: list[Entry] = []
    i = j = 0
    while i < len(a) and j < len(a):
        if b[j].timestamp < a[i].timestamp:
            merged.append(b[j])
            j += 1
        else:
            merged.append(a[i])
            i += 1
    merged.extend(a[i:])
    merged.extend(b[j:])
    return merged


def merge_text(first: str, second: str) -> list[str]:
    """Merge two logs given as text; blank lines are skipped."""
    a = [parse_line(line) for line in first.splitlines() if line.strip()]
    b = [parse_line(line) for line in second.splitlines() if line.strip()]
    return [f"{e.timestamp} {e.source} {e.message}" for e in merge(a, b)]
