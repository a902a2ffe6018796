"""Fault localisation: rank source statements by how strongly failing tests point at them.

Ochiai over the coverage spectra (ef / sqrt(nf * (ef + ep))) is the best single-formula
spectrum ranking in the literature for single faults; it is merged with the evidence a traceback
gives directly: lines in the failing tests' frames, and the last project line each failing test
executed.  Those two also break Ochiai's frequent ties (every line of a function that only the
failing test runs scores 1.0), and so do two more: lines the user just changed
(``repair/recent.py``: since the last commit or the last green run) rank above equally
suspicious ones by ``RECENT_BONUS``, and among equals the functions the failing tests name or
call directly come before the helpers they reach deeper down.

The traceback is more than a tie-breaker: a statement every failing test's traceback passes
through gains ``TRACEBACK_WEIGHT`` (and the last executed line ``LAST_WEIGHT``), enough to pass
a line only a little more suspicious by the spectrum (a line after the crash that earlier, passing
calls of the same function reached), never one the spectrum points at much more strongly.  And a
project's own ``raise`` is seldom the bug: the condition that let it run is, so the evidence on
a ``raise`` directly under an ``if`` counts for that ``if`` too.  On the history corpus
(62 real bugs, ``benchmarks/history/localisation.py``) the two moved the developers' first
changed line into the top five for 47% of the tasks instead of 44%, and ranked a changed line
first for 26% instead of 24%.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from ..project_paths import nodeid_file
from ..sandbox.results import RunResult
from ..sandbox.spectra import CoverageMap, is_test_file
from .recent import Changes, touches

log = logging.getLogger(__name__)

# Added to the Ochiai score of a statement the user just changed, for the ranking only: a
# changed line outranks an unchanged one of the same or a slightly higher score, never one the
# failing tests point at much more strongly than the passing ones.
RECENT_BONUS = 0.5
# Added for traceback evidence, scaled by the share of failing tests that give it (see above).
TRACEBACK_WEIGHT = 0.1
LAST_WEIGHT = 0.1
_NAMED_TESTS = 20  # failing tests whose source is read for the names they call


@dataclass(frozen=True)
class Location:
    """A statement (its header, for compound statements) ranked by suspiciousness."""

    path: str
    line: int
    end_line: int
    score: float  # Ochiai, 0..1
    frames: int = 0  # failing-test traceback frames on this statement
    last: int = 0  # failing tests whose last executed project line is here
    function: str | None = None  # enclosing function or method, e.g. "Rect.area"
    changed: bool = False  # the user changed it since the last commit or green run
    named: bool = False  # its function is named in a failing test, or called from one directly
    # An ``if`` whose body is a ``raise`` the traceback names: that raise's frames and last
    # lines, which weigh for the condition as for the raise (``_credit_guards``).
    guard_frames: int = 0
    guard_last: int = 0
    # An ``if`` or ``while`` header: the condition decides which of its branches runs.
    # ``branch``: the best Ochiai score of the first statements of its branches (``_credit_branches``).
    condition: bool = False
    branch: float = 0.0
    # After a search (``repair/evidence.py``): single edits tried here, and those that changed
    # what a failing test saw.
    edits: int = 0
    moved: int = 0

    @property
    def lines(self) -> range:
        return range(self.line, self.end_line + 1)

    def describe(self) -> str:
        where = f"{self.path}:{self.line}" + (f"-{self.end_line}" if self.end_line != self.line else "")
        extra = [f"score {self.score:.2f}"]
        if self.frames:
            extra.append(f"{self.frames} traceback frame{'s' * (self.frames > 1)}")
        if self.last:
            extra.append("last executed line")
        if self.guard_frames or self.guard_last:
            extra.append("guards the raise the traceback ends at")
        if self.branch > self.score:
            extra.append(f"decides a branch of score {self.branch:.2f}")
        if self.changed:
            extra.append("changed recently")
        if self.edits:
            extra.append(f"{self.moved} of {self.edits} edit{'s' * (self.edits > 1)} here changed the failing tests")
        return f"{where} ({', '.join(extra)})" + (f" in {self.function}" if self.function else "")


@dataclass(frozen=True)
class _Stmt:
    line: int
    end_line: int
    function: str | None


class StatementMap:
    """Maps a line to the innermost statement containing it (header only, for compound ones)."""

    def __init__(self, source: str) -> None:
        self._by_line: dict[int, _Stmt] = {}
        self._functions: dict[str, range] = {}
        self._guards: dict[int, int] = {}  # a raise's line -> the line of the `if` it sits directly in
        self._branches: dict[int, tuple[int, ...]] = {}  # an if/while's line -> its branches' first lines
        tree = ast.parse(source)
        self._walk(tree.body, None, None)

    def _walk(self, body: list[ast.stmt], cls: str | None, func: str | None) -> None:
        for node in body:
            name = func
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and func is None:
                name = f"{cls}.{node.name}" if cls else node.name
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                self._functions[name] = range(first, (node.end_lineno or node.lineno) + 1)
            children = [b for b in (getattr(node, f, None) for f in ("body", "orelse", "finalbody"))
                        if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]
            children += [h.body for h in getattr(node, "handlers", [])]
            children += [c.body for c in getattr(node, "cases", [])]
            end = node.end_lineno or node.lineno
            if isinstance(node, (ast.If, ast.While)):
                self._branches[node.lineno] = (node.body[0].lineno, *(node.orelse[0].lineno for _ in node.orelse[:1]))
            if isinstance(node, ast.If):
                for child in node.body + node.orelse:
                    if isinstance(child, ast.Raise):
                        self._guards[child.lineno] = node.lineno
            if children:  # a compound statement: its header runs up to its first child
                first = min(b[0].lineno for b in children)
                decorators = getattr(node, "decorator_list", [])
                start = min([node.lineno] + [d.lineno for d in decorators])
                end = max(start, first - 1)
                self._set(start, end, _Stmt(start, end, name))
            else:
                self._set(node.lineno, end, _Stmt(node.lineno, end, name))
            inner_cls = node.name if isinstance(node, ast.ClassDef) and cls is None and func is None else cls
            for child in children:
                self._walk(child, inner_cls, name)

    def _set(self, start: int, end: int, stmt: _Stmt) -> None:
        for line in range(start, end + 1):
            self._by_line[line] = stmt  # inner statements are walked later and win

    def statement(self, line: int) -> _Stmt | None:
        return self._by_line.get(line)

    def guard(self, line: int) -> int | None:
        """For a ``raise`` directly in an ``if`` (or its ``else``): the ``if``'s line."""
        return self._guards.get(line)

    def branches(self, line: int) -> tuple[int, ...]:
        """For an ``if`` or ``while`` header: the first line of its body (and of its ``else``)."""
        return self._branches.get(line, ())

    def function_span(self, name: str) -> range:
        """All lines of a top-level function or method (decorators included)."""
        return self._functions.get(name, range(0))


def localize(
    run: RunResult,
    coverage: CoverageMap,
    read: Callable[[str], str | None],
    *,
    limit: int = 20,
    recent: Changes | None = None,
) -> list[Location]:
    """Ranked statement-level locations for the failing tests of ``run``.

    ``read(path)`` returns a project file's text (None when it cannot be read); test files are
    never ranked.  ``recent``: the lines the user changed lately (``repair/recent.py``).
    """
    failing = [n for n in run.failing if n in run.tests]
    passing = {n for n, t in run.tests.items() if t.outcome == "passed"}
    if not failing:
        return []

    ef: dict[tuple[str, int], int] = defaultdict(int)
    ep: dict[tuple[str, int], int] = defaultdict(int)
    for nodeid, files in coverage.by_test.items():
        is_failing, is_passing = nodeid in failing, nodeid in passing
        if not (is_failing or is_passing):
            continue
        for path, lines in files.items():
            if is_test_file(path):
                continue
            counter = ef if is_failing else ep
            for line in lines:
                counter[(path, line)] += 1

    frames: dict[tuple[str, int], int] = defaultdict(int)
    last: dict[tuple[str, int], int] = defaultdict(int)
    for nodeid in failing:
        t = run.tests[nodeid]
        for f in t.frames:
            # "<string>", "<frozen ...>": code compiled from text (exec, a template), no file to edit.
            if not f.path.startswith(("/", "<")) and not is_test_file(f.path):
                frames[(f.path, f.line)] += 1
        if t.last and not t.last[0].startswith("<") and not is_test_file(t.last[0]):
            last[t.last] += 1

    nf = len(failing)
    maps = _statement_maps(read)
    named = _named_functions(run, failing, read)
    recent = recent or {}
    merged: dict[tuple[str, int], Location] = {}
    for key in set(ef) | set(frames) | set(last):
        path, line = key
        e_f, e_p = ef.get(key, 0), ep.get(key, 0)
        score = e_f / math.sqrt(nf * (e_f + e_p)) if e_f else 0.0
        smap = maps(path)
        stmt = smap.statement(line) if smap else None
        if smap is not None and stmt is None:
            continue  # a line with no statement (docstring continuation, blank): nothing to edit
        start, end, func = (stmt.line, stmt.end_line, stmt.function) if stmt else (line, line, None)
        loc = Location(path, start, end, score, frames.get(key, 0), last.get(key, 0), func,
                       touches(recent, path, range(start, end + 1)), _is_named(func, named),
                       condition=bool(smap.branches(start)) if smap else False)
        old = merged.get((path, start))
        if old is None:
            merged[(path, start)] = loc
        else:
            merged[(path, start)] = dataclasses.replace(
                loc, score=max(old.score, score), frames=old.frames + loc.frames, last=old.last + loc.last)
    _credit_guards(merged, maps)
    _credit_branches(merged, maps)
    # Among equals, a condition first: it decides what runs after it (conditions added, widened,
    # narrowed or negated are a third of the history corpus' fixes, benchmarks/history/shapes.py).
    ranked = sorted(merged.values(), key=lambda x: (-weight(x, nf), -x.frames - x.guard_frames, -x.named,
                                                    -x.last - x.guard_last, -x.condition, x.path, x.line))
    return ranked[:limit]


def weight(loc: Location, failing: int) -> float:
    """How suspicious ``loc`` is, of ``failing`` failing tests: the spectrum's score, the
    recent-change bonus and the traceback's weights.  The one rule, for the diagnosis's ranking
    and for the ranking after a search (``repair/evidence.refine``)."""
    return (max(loc.score, loc.branch) + RECENT_BONUS * loc.changed + TRACEBACK_WEIGHT * min(1.0, (loc.frames + loc.guard_frames) / failing)
            + LAST_WEIGHT * min(1.0, (loc.last + loc.guard_last) / failing))


def _credit_guards(merged: dict[tuple[str, int], Location], maps: Callable[[str], StatementMap | None]) -> None:
    """The traceback evidence on a ``raise`` also counts for the ``if`` that let it run."""
    credit: dict[tuple[str, int], tuple[int, int]] = {}
    for (path, line), loc in merged.items():
        smap = maps(path) if loc.frames or loc.last else None
        guard = smap.guard(line) if smap else None
        if guard is not None and (path, guard) in merged:
            frames, last = credit.get((path, guard), (0, 0))
            credit[(path, guard)] = (frames + loc.frames, last + loc.last)
    for key, (frames, last) in credit.items():
        old = merged[key]
        merged[key] = dataclasses.replace(old, guard_frames=frames, guard_last=last)


def _credit_branches(merged: dict[tuple[str, int], Location], maps: Callable[[str], StatementMap | None]) -> None:
    """An ``if`` or ``while`` scores at least as high as the first statement of its most
    suspicious branch.  A wrong condition shows in the spectrum as the branch it wrongly takes
    (run by the failing tests, not by the passing ones), while the condition itself runs in
    every test and scores low: statement-level Ochiai's blind spot for predicates.  On the
    history corpus this moved the first changed line into the top five for 2 more of 56 tasks
    (a ``gettz`` condition from rank 60 to 6)."""
    for key, loc in list(merged.items()):
        smap = maps(loc.path) if loc.condition else None
        if smap is None:
            continue
        best = max((merged[(loc.path, b)].score for b in smap.branches(loc.line) if (loc.path, b) in merged),
                   default=0.0)
        if best > loc.score:
            merged[key] = dataclasses.replace(loc, branch=best)


def _named_functions(run: RunResult, failing: list[str], read: Callable[[str], str | None]) -> set[str]:
    """Names the failing tests' own code uses (calls, attributes), and the functions their
    tracebacks enter first from test code: what a test exercises directly."""
    names: set[str] = set()
    texts: dict[str, str | None] = {}
    for nodeid in failing[:_NAMED_TESTS]:
        path = nodeid_file(nodeid)
        if path not in texts:
            texts[path] = read(path)
        text = texts[path]
        test = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        if text is not None:
            for used in _functions(text).get(test, ()):
                names.update(used)
        frames = run.tests[nodeid].frames
        for outer, inner in zip(frames, frames[1:]):  # the first step from test code into the project
            if is_test_file(outer.path) and not is_test_file(inner.path) and inner.function:
                names.add(inner.function.rsplit(".", 1)[-1])
                break
    return names


@lru_cache(maxsize=8)
def _functions(text: str) -> dict[str, tuple[frozenset[str], ...]]:
    """The names each function of a module uses, by function name, once per text: the editor
    localises at every save, and each of 24 failing tests walked more-itertools' 5,000-line
    test module again (1-2.6 s of a save; the module had not changed)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, list[frozenset[str]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, []).append(frozenset(_used_names(node)))
    return {name: tuple(used) for name, used in out.items()}


def _used_names(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _is_named(function: str | None, named: set[str]) -> bool:
    """``Rect.area`` is named by a test that uses ``area`` (or calls ``Rect(...)`` for its
    ``__init__``); ``area`` by one that uses ``area``."""
    if function is None or not named:
        return False
    parts = function.split(".")
    return parts[-1] in named or (len(parts) > 1 and parts[-1].startswith("__") and parts[0] in named)


@lru_cache(maxsize=16)
def statement_map(text: str) -> StatementMap:
    """``StatementMap(text)``, built once per text (a save re-ranks with the same sources)."""
    return StatementMap(text)


def _statement_maps(read: Callable[[str], str | None]) -> Callable[[str], StatementMap | None]:
    @lru_cache(maxsize=None)
    def get(path: str) -> StatementMap | None:
        text = read(path)
        if text is None:
            return None
        try:
            return statement_map(text)
        except (SyntaxError, ValueError):
            log.info("cannot parse %s; ranking its lines without statements", path)
            return None

    return get
