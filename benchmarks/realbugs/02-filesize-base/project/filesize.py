"""Human-readable file sizes, in binary units (KiB, MiB, ...)."""

from __future__ import annotations

import re

UNITS = ["B", "KiB", "MiB", "GiB", "TiB"]
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)


def naturalsize(size: int, precision: int = 1) -> str:
    """``1536`` -> ``"1.5 KiB"``; bytes are shown without decimals."""
    if size < 0:
        return "-" + naturalsize(-size, precision)
    value = float(size)
    for unit in UNITS:
        if value < 1024 or unit == UNITS[-1]:
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.{precision}f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def parse_size(text: str) -> int:
    """The inverse of :func:`naturalsize`: ``"1.5 KiB"`` -> ``1536`` (``KB`` is read as ``KiB``)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r}")
    number, unit = match.groups()
    unit = (unit or "B").upper().replace("IB", "B")
    power = [u.upper().replace("IB", "B") for u in UNITS].index(unit)
    return int(float(number) * 1024 ** power)
