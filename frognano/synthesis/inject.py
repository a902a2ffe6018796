"""Candidate bugs for synthesis: operator sites in code the test suite actually runs (docs/ARCHITECTURE.md §5).

A function counts as *covered* when some test executes a line of its body.  Sites are taken
from the shared operator catalogue (``frognano.operators.mutations``) in covered functions of
non-test files only, and mutants that are cheap to recognise as useless are dropped before any
test runs:

* no-op edits (``old == new``);
* edits inside a docstring (never observable by a behavioural test);
* edits in body lines no test ever executed (dead code for this suite: the mutant would survive).

Edits outside the body (a parameter default on the ``def`` line, run at import time) are kept
when their function is covered.
"""

from __future__ import annotations

import ast
import random
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..operators import Mutation, OperatorError, mutations, prepare
from ..sandbox.specification import Specification
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace

__all__ = ["CandidateStream", "FunctionSpan", "candidate_bugs", "function_spans"]


@dataclass(frozen=True)
class FunctionSpan:
    qualname: str
    def_line: int  # the `def` line (decorators excluded)
    body: range  # body lines (docstring included)
    docstring: range  # lines of the docstring statement, empty when none


def function_spans(source: str) -> dict[str, FunctionSpan]:
    """Top-level functions and methods of top-level classes (the operators' scope)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    found: dict[str, FunctionSpan] = {}

    def add(fn: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> None:
        first = fn.body[0]
        doc = range(0)
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            doc = range(first.lineno, (first.end_lineno or first.lineno) + 1)
        found[qualname] = FunctionSpan(qualname, fn.lineno, range(first.lineno, (fn.end_lineno or fn.lineno) + 1), doc)

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(stmt, stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(sub, f"{stmt.name}.{sub.name}")
    return found


def _useful(m: Mutation, span: FunctionSpan, covered: set[int]) -> bool:
    if m.old == m.new:
        return False
    lines = range(m.line, max(m.line, m.end_line) + 1)
    if span.docstring and all(line in span.docstring for line in lines):
        return False
    if m.line in span.body:
        return any(line in covered for line in lines)
    return True  # signature (defaults): executed at import time; the function itself is covered


class CandidateStream:
    """The candidate bugs of a workspace, in a deterministic order, computed only as far as read.

    Listing every mutation of a 4,700-line module costs seconds (libcst parse, positions, and
    rendering each edit), while a synthesis run validates a few dozen candidates: so the cheap
    part is done up front (``ast`` spans of every covered non-test file: which functions a test
    runs) and a function's mutations are listed only when the stream first reaches it, each
    file parsed once by libcst.

    Order, for ``seed``: the covered functions shuffled, then rounds: round r yields the r-th
    candidate (of that function's own shuffled list) of every function that has more than r.
    Every covered function gets a bug before any gets a second, so tasks spread over the code
    instead of piling up in the functions with the most sites.  ``seed=None``: source order
    (files by path, functions and sites in source order), listed eagerly.

    ``skips`` counts what was passed over and why: "non-Python file" (files of the workspace
    that are not Python), "does not parse", "no test covers it" (functions).
    """

    def __init__(self, ws: Workspace, coverage: CoverageMap, *, operators: Iterable[str] | None = None,
                 seed: int | None = None, parsed: dict | None = None) -> None:
        self.ws = ws
        self.operators = list(operators) if operators is not None else None
        self.seed = seed
        self.skips: Counter = Counter()
        self._sources: dict[str, str] = {}
        self._spans: dict[str, dict[str, FunctionSpan]] = {}
        self._covered: dict[str, set[int]] = {}
        # path -> operators.prepare(source) (False: does not parse); ``parsed`` from pre_parse
        self._prepared: dict[str, object] = {}
        for path, prepared in (parsed or {}).items():
            if prepared is False or (prepared.source == ws.read(path)):
                self._prepared[path] = prepared
        self.functions: list[tuple[str, str]] = []  # (path, qualname) of every covered function
        python = set(ws.python_files())
        self.skips["non-Python file"] = sum(1 for rel, e in ws.entries.items()
                                            if rel not in python and not e.external)
        # Never a bug in the specification (test modules, conftest.py: sandbox/specification.py).
        spec = Specification.of_workspace(ws, coverage.by_test)
        for path in sorted(python):
            if spec.reason(path):
                continue
            covered = set(coverage.index.get(path, {}))
            source = ws.read(path)
            spans = function_spans(source)
            if not spans:
                if covered and not _parses(source):
                    self.skips["does not parse"] += 1
                continue
            live = [name for name, s in spans.items() if covered.intersection(s.body)]
            self.skips["no test covers it"] += len(spans) - len(live)
            if live:
                self._sources[path], self._spans[path], self._covered[path] = source, spans, covered
                self.functions.extend((path, name) for name in live)
        self.skips = +self.skips  # drop zero counts

    def mutations_of(self, path: str, qualname: str) -> list[Mutation]:
        """The useful mutations of one covered function, in source order."""
        source = self._sources[path]
        prepared = self._prepared.get(path)
        if prepared is None:
            try:
                prepared = self._prepared[path] = prepare(source)
            except OperatorError:
                prepared = self._prepared[path] = False
                self.skips["does not parse"] += 1
        if prepared is False:
            return []
        span, covered = self._spans[path][qualname], self._covered[path]
        found = mutations(source, path, functions={qualname}, operators=self.operators, prepared=prepared)
        return [m for m in found if m.function == qualname and _useful(m, span, covered)]

    def __iter__(self) -> Iterator[Mutation]:
        if self.seed is None:
            for path, name in self.functions:
                yield from self.mutations_of(path, name)
            return
        order = list(self.functions)
        random.Random(self.seed).shuffle(order)
        lists: dict[tuple[str, str], list[Mutation]] = {}
        r = 0
        while True:
            more = False
            for key in order:
                found = lists.get(key)
                if found is None:
                    found = lists[key] = self.mutations_of(*key)
                    random.Random(f"{self.seed}:{key[0]}:{key[1]}").shuffle(found)
                if r < len(found):
                    more = True
                    yield found[r]
            if not more:
                return
            r += 1


def pre_parse(ws: Workspace, parsed: dict, stop: threading.Event) -> None:
    """Parse the workspace's non-test Python files with libcst into ``parsed`` (path ->
    ``prepare(source)``, or False when it does not parse), largest first, until ``stop`` is set:
    a use for a spare core while the baseline run goes on (``CandidateStream(parsed=...)``)."""
    spec = Specification.of_workspace(ws)
    paths = [p for p in ws.python_files() if not spec.reason(p)]
    paths.sort(key=lambda p: -ws.entries[p].size)
    for path in paths:
        if stop.is_set():
            return
        try:
            parsed[path] = prepare(ws.read(path))
        except OperatorError:
            parsed[path] = False
        except (OSError, UnicodeDecodeError):
            continue


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def candidate_bugs(ws: Workspace, coverage: CoverageMap, *, operators: Iterable[str] | None = None,
                   seed: int | None = None) -> list[Mutation]:
    """Every useful mutation in covered functions of the workspace's non-test Python files, in
    ``CandidateStream`` order (source order when ``seed`` is None)."""
    return list(CandidateStream(ws, coverage, operators=operators, seed=seed))
