"""Reading pinned requirements files ("name==version  # comment")."""

from __future__ import annotations

import re

_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$")


def significant_lines(text: str) -> list[str]:
    """Lines that declare something: no blanks, comments or trailing comments."""
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append(line.split(" #", 1)[0].strip())
    return out


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str | None]:
    """{canonical name: pinned version or None}; options such as ``-e`` or ``-r`` are skipped."""
    result: dict[str, str | None] = {}
    for line in significant_lines(text):
        if line.startswith("-"):
            continue
        match = _NAME.match(line)
        if match is None:
            raise ValueError(f"cannot read requirement {line!r}")
        name, spec = match.groups()
        version = spec[2:].strip() if spec.startswith("==") else None
        result[canonical(name)] = version
    return result
