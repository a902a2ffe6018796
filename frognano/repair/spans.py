"""Where an edit changed a file, as line spans: cheap text comparisons, no parsing.

Used by verification (which tests an edit can affect), the tampering check (only what an edit
adds counts), deduplication and the incremental session.  A module of its own so that those
can share it without importing each other.
"""

from __future__ import annotations


def changed_span(old: list[str], new: list[str]) -> tuple[int, int, int]:
    """``(head, end, delta)``: lines ``old[head:end]`` were replaced (0-based, end exclusive), and
    the lines after them moved by ``delta``."""
    shortest = min(len(old), len(new))
    head = 0
    while head < shortest and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < shortest - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, len(old) - tail, len(new) - len(old)


def changed_lines(before: str, after: str) -> set[int]:
    """Lines of ``before`` that an edit touches (an insertion touches the lines around it).

    One span from the first line that differs to the last: exact for the one-place edits that
    candidates and most saves are, and a superset for scattered ones.  (difflib took a third of
    a second on a 5,000-line module, per candidate.)"""
    first, end, _ = changed_span(before.splitlines(), after.splitlines())
    if end > first:
        return set(range(first + 1, end + 1))
    return {ln for ln in (first, first + 1) if ln >= 1}  # a pure insertion after line `first`
