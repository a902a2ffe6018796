"""Formatting and parsing of durations like "1h 05m 09s"."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+)\s*([hms])")


def split(seconds: int) -> tuple[int, int, int]:
    """(hours, minutes, seconds) of a non-negative number of seconds."""
    if seconds < 0:
        raise ValueError("durations are never negative")
    minutes, secs = divmod(seconds, 60)
    hours = minutes // 60
    minutes = minutes % 60
    return hours, minutes, secs


def format_duration(seconds: int) -> str:
    hours, minutes, secs = split(seconds)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def parse_duration(text: str) -> int:
    total, pos = 0, 0
    factor = {"h": 3600, "m": 60, "s": 1}
    text = text.strip()
    for match in _PART.finditer(text):
        if text[pos:match.start()].strip():
            break
        total += int(match.group(1)) * factor[match.group(2)]
        pos = match.end()
    if pos == 0 or text[pos:].strip():
        raise ValueError(f"not a duration: {text!r}")
    return total
