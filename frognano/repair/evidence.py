"""Localisation after the search: what its edits did to the failing tests.

Mutation-based fault localisation (Metallaxis, MUSE) with mutants that cost nothing extra: the
search's candidates ran anyway.  An edit at the faulty statement usually changes what the
failing tests see (their outcome or message); an edit at a statement the failure does not
depend on leaves them as they were.  The spectrum ranks every line that only failing tests run
alike (with one failing test, all of them score 1.0); the edits tell them apart.

So after a search the locations are ranked again (a verified fix's statement first) by the
sum of two scores: the diagnosis's own (``localize.weight``: Ochiai, with ``RECENT_BONUS`` for a
line the user just changed and the traceback's weights) and the mutation score, in 0..1, the largest Metallaxis score of one edit there,
``moved / sqrt(failing * (moved + broken))`` (the search runs the passing tests only for edits
that fix every failing one, so the rest count none broken).  A location with no edit tried
counts ``UNTRIED``, no evidence either way.  The sum rather than the mutation score alone: a
missing statement is not found by editing the ones around it, so idle edits only lower a line
beside its equals (on the history corpus, the mutation score alone pushed such bugs out of the
top ten).  The spectrum's order breaks ties.  Edits that could not count are left out: refused
ones, and those after which the module no longer imports (the tests never ran).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from .localize import Location, weight

# The mutation score of a location no edit was tried at: below one whose edits moved half the
# failing tests or more, above one whose edits moved none.
UNTRIED = 0.5


class _Result(Protocol):
    fixed: list[str]
    changed: list[str]
    broken: list[str]
    refused: str
    worse: str

    @property
    def verified(self) -> bool: ...


class _Mutation(Protocol):
    path: str
    line: int


class _Candidate(Protocol):
    mutations: tuple[_Mutation, ...]


class _Tried(Protocol):
    candidate: _Candidate
    result: _Result


def refine(locations: Sequence[Location], tried: Iterable[_Tried], failing: int,
           fixed_at: Iterable[tuple[str, int]] = ()) -> list[Location]:
    """``locations`` (the spectrum's order) ranked again by what the single edits ``tried``
    did to the ``failing`` failing tests; each location that had edits tried says how many
    (``Location.edits``) and how many moved a failing test (``Location.moved``).  ``fixed_at``:
    the (path, line) of each edit of the verified fix, if any (a pair's two lines too)."""
    if not locations or failing <= 0:
        return list(locations)
    index = {(loc.path, line): i for i, loc in enumerate(locations) for line in loc.lines}
    edits = [0] * len(locations)
    moved = [0] * len(locations)
    score = [0.0] * len(locations)
    verified = [False] * len(locations)
    for where in fixed_at:
        if where in index:
            verified[index[where]] = True
    for t in tried:
        if len(t.candidate.mutations) != 1:  # a pair: its effect is not one statement's
            continue
        m, r = t.candidate.mutations[0], t.result
        i = index.get((m.path, m.line))
        if i is None or r.refused or r.worse.startswith("collection"):
            continue
        edits[i] += 1
        killed = len(set(r.fixed) | set(r.changed))
        moved[i] += killed > 0
        if killed:
            score[i] = max(score[i], killed / math.sqrt(failing * (killed + len(r.broken))))
        verified[i] = verified[i] or r.verified
    def key(i: int) -> tuple:
        loc = locations[i]
        spectrum = weight(loc, failing)
        return (not verified[i], -(spectrum + (score[i] if edits[i] else UNTRIED)), i)

    order = sorted(range(len(locations)), key=key)
    return [dataclasses.replace(locations[i], edits=edits[i], moved=moved[i]) for i in order]
