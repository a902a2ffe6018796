"""Summaries of request latencies from a load-test run (milliseconds, in arrival order)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float
    median: float
    p95: float
    worst: float


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least ``pct`` percent at or below it."""
    if not samples:
        raise ValueError("no samples")
    if not 0 < pct <= 100:
        raise ValueError("pct must be in (0, 100]")
    ordered = sorted(samples)
    rank = math.ceil(pct / 100 * len(ordered))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("no samples")
    ordered = samples
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def summarise(samples: Sequence[float]) -> Summary:
    return Summary(
        count=len(samples),
        mean=sum(samples) / len(samples),
        median=median(samples),
        p95=percentile(samples, 95),
        worst=max(samples),
    )
