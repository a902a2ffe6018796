"""Smoothing of numeric series (sensor readings, daily counts)."""

from __future__ import annotations


def moving_average(values: list[float], size: int) -> list[float]:
    """Mean of each full window of ``size`` consecutive values."""
    if size < 1:
        raise ValueError("window size must be positive")
    out = []
    for end in range(size, len(values) + 1):
        window = values[end - size:end]
        out.append(sum(window) / len(values))
    return out


def exponential(values: list[float], alpha: float) -> list[float]:
    """Exponentially weighted average; ``alpha`` is the weight of the newest value."""
    if not 0 < alpha <= 1:
        raise ValueError("alpha must be in (0, 1]")
    out: list[float] = []
    for value in values:
        out.append(value if not out else alpha * value + (1 - alpha) * out[-1])
    return out


def peaks(values: list[float]) -> list[int]:
    """Indices of the values greater than both neighbours."""
    return [i for i in range(1, len(values) - 1) if values[i - 1] < values[i] > values[i + 1]]
