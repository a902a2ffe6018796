"""Fitting text into fixed-width terminal columns."""

from __future__ import annotations

ELLIPSIS = "…"


def truncate(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters, marking a cut with an ellipsis."""
    if width < 1:
        raise ValueError("width must be positive")
    if len(text) <= width:
        return text
    return text[:width - 1] + ELLIPSIS


def pad(text: str, width: int, align: str = "left") -> str:
    text = truncate(text, width)
    if align == "left":
        return text.ljust(width)
    if align == "right":
        return text.rjust(width)
    if align == "center":
        return text.center(width)
    raise ValueError(f"unknown alignment {align!r}")


def row(cells: list[str], widths: list[int], sep: str = " | ") -> str:
    if len(cells) != len(widths):
        raise ValueError("one width per cell")
    return sep.join(pad(cell, width) for cell, width in zip(cells, widths))
