"""Semantic keys of candidate edits (``repair/dedupe.py``)."""

from frognano.repair.dedupe import SemanticKeys

BEFORE = '''\
import math


def area(r):
    if r is None:
        return 0

    return math.pi * r * r


def total(xs):
    return sum(xs)
'''


def _insert(before: str, after_line: int, text: str) -> str:
    lines = before.splitlines(keepends=True)
    return "".join(lines[:after_line] + [text] + lines[after_line:])


def test_an_insertion_on_a_blank_line_inside_a_function_is_keyed_by_that_function():
    """A guard inserted at the blank line between two statements: keyed by ``area`` alone (a
    unit key names the function's first line), and the same guard spelled otherwise is the same
    key, while a different guard is not."""
    keys = SemanticKeys()
    guard = _insert(BEFORE, 6, "    if r < 0:\n        raise ValueError(r)\n")
    spelled = _insert(BEFORE, 6, "    if (r < 0):\n        raise ValueError( r )\n")
    other = _insert(BEFORE, 6, "    if r <= 0:\n        raise ValueError(r)\n")
    path, first, after, _ = keys.key("m.py", BEFORE, guard)
    assert (path, first) == ("m.py", 4) and after == 4  # lines 4-8 are `area`; 4 follow it
    assert keys.key("m.py", BEFORE, spelled) == keys.key("m.py", BEFORE, guard)
    assert keys.key("m.py", BEFORE, other) != keys.key("m.py", BEFORE, guard)


def test_an_insertion_between_two_functions_is_keyed_by_the_module():
    """The blank lines after ``area`` are not part of it: a statement put there is keyed by the
    whole module (first line 0), not by the function above."""
    keys = SemanticKeys()
    after = _insert(BEFORE, 9, "CONSTANT = 1\n")
    assert keys.key("m.py", BEFORE, after)[1:3] == (0, 0)
