"""A plain-text summary of several rectangles."""

from __future__ import annotations

from collections.abc import Sequence

from .geometry import Rect


def largest(shapes: Sequence[Rect]) -> Rect:
    """The rectangle with the largest area (the first one on ties)."""
    if not shapes:
        raise ValueError("no shapes")
    return max(shapes, key=lambda r: r.area())


def summary(shapes: Sequence[Rect]) -> str:
    """One line per rectangle, then the totals."""
    if not shapes:
        return "no shapes"
    lines = [
        f"{r.name}: {r.width:g} x {r.height:g}, area {r.area():.2f}, perimeter {r.perimeter():.2f}"
        for r in shapes
    ]
    total = sum(r.area() for r in shapes)
    lines.append(f"{len(shapes)} shapes, total area {total:.2f}")
    return "\n".join(lines)
