"""Summaries of multiple-choice survey answers."""

from __future__ import annotations

from collections import Counter


def percent(part: int, whole: int, digits: int = 1) -> float:
    """``part`` as a percentage of ``whole`` (0.0 when ``whole`` is 0)."""
    if whole == 0:
        return 0.0
    return round(100 * part / whole, digits)


def shares(answers: list[str], options: list[str]) -> dict[str, float]:
    """Percentage of answers per option, every option listed (unanswered ones at 0.0)."""
    unknown = set(answers) - set(options)
    if unknown:
        raise ValueError(f"answers outside the options: {sorted(unknown)}")
    counts = Counter(answers)
    total = len(answers)
    return {option: percent(counts[option], total) for option in options}


def winner(answers: list[str], options: list[str]) -> str | None:
    """The most chosen option; None on a tie or without answers."""
    table = shares(answers, options)
    best = max(table.values(), default=0.0)
    top = [option for option, share in table.items() if share == best]
    return top[0] if best > 0 and len(top) == 1 else None
