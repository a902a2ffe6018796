"""Snapping for a diagram editor: dragged shapes stick to the grid and to nearby guide lines."""

from __future__ import annotations

from collections.abc import Sequence


def snap_to_grid(value: float, step: float) -> float:
    if step <= 0:
        raise ValueError("grid step must be positive")
    return round(value / step) * step


def nearest(candidates: Sequence[float], value: float) -> float:
    """The candidate closest to ``value``; the earlier one on a tie."""
    if not candidates:
        raise ValueError("no candidates")
    return min(candidates, key=lambda candidate: abs(candidate - value))


def snap(value: float, guides: Sequence[float] = (), tolerance: float = 4.0, step: float | None = None) -> float:
    """A guide within ``tolerance`` wins; otherwise the grid, when there is one; otherwise ``value``."""
    if guides:
        guide = nearest(guides, value)
        if abs(guide - value) <= tolerance:
            return guide
    if step is not None:
        return snap_to_grid(value, step)
    return value


def snap_box(left: float, width: float, guides: Sequence[float], tolerance: float = 4.0) -> float:
    """New ``left`` for a box: whichever of its edges is closer to a guide snaps to it."""
    snapped_left = snap(left, guides, tolerance)
    snapped_right = snap(left + width, guides, tolerance)
    left_moved = abs(snapped_left - left)
    right_moved = abs(snapped_right - (left + width))
    if snapped_right != left + width and (snapped_left == left or right_moved < left_moved):
        return snapped_right - width
    return snapped_left
