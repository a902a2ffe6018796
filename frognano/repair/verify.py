"""Verification of candidate patches in the shadow copy (DESIGN.md invariant 2).

A candidate is checked in two steps, cheapest first: the originally failing tests (most
candidates fail here), then the originally passing tests that cover the changed code.  The one
fix that is offered is then confirmed once against every originally passing test of the run.

The tests are the specification (invariant 6): a patch that touches a test module, a
conftest.py, pytest's configuration or ``[tool.frognano]`` is refused before anything runs,
whatever produced it, unless the user opted in to test edits (then configuration still is).
Every run starts from the pristine test files (the user's text, restored in the shadow if an
earlier run rewrote them), and a run during which the code under test rewrote them verifies
nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.specification import Specification
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .localize import StatementMap
from .patch import Patch, Verification

log = logging.getLogger(__name__)


@dataclass
class CandidateResult:
    fixed: list[str] = field(default_factory=list)  # originally failing, now passing
    still_failing: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # originally passing, now failing
    checked: int = 0  # originally passing tests run in step two
    refused: str = ""  # why the patch was not run at all, or why its run does not count

    @property
    def verified(self) -> bool:
        return bool(self.fixed) and not self.still_failing and not self.broken and not self.refused


def changed_lines(before: str, after: str) -> set[int]:
    """Lines of ``before`` that an edit touches (an insertion touches the lines around it).

    One span from the first line that differs to the last: exact for the one-place edits that
    candidates and most saves are, and a superset for scattered ones.  (difflib took a third of
    a second on a 5,000-line module, per candidate.)"""
    first, end, _ = changed_span(before.splitlines(), after.splitlines())
    if end > first:
        return set(range(first + 1, end + 1))
    return {ln for ln in (first, first + 1) if ln >= 1}  # a pure insertion after line `first`


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


def function_lines(before: str, after: str) -> set[int] | None:
    """The lines of ``before`` whose tests an edit can affect: the whole of each function it
    changes; None when it changes module-level code (every test of the file's code)."""
    lines = changed_lines(before, after)
    try:
        smap = StatementMap(before)
    except (SyntaxError, ValueError):
        return None
    spans = set(lines)
    for ln in lines:
        stmt = smap.statement(ln)
        if stmt is None or stmt.function is None:
            return None
        spans |= set(smap.function_span(stmt.function))
    return spans


class Verifier:
    def __init__(self, ws: Workspace, runner: TestRunner, baseline: RunResult,
                 coverage: CoverageMap, *, timeout: float, factor: float,
                 allow_test_edits: bool = False, spec: Specification | None = None) -> None:
        self.ws = ws
        self.runner = runner
        self.failing = baseline.failing
        self.passing = baseline.passing
        self.coverage = coverage
        self.allow_test_edits = allow_test_edits
        self.spec = spec or Specification.of_workspace(ws, [*baseline.tests, *baseline.collected])
        self._protected = self.spec.protected(ws.entries)
        self._strays = self.spec.strays(ws.entries)
        # A candidate that turns a loop infinite must cost seconds, not the full timeout.
        self.timeouts = {
            n: min(timeout, max(2.0, factor * t.duration + 1.0)) for n, t in baseline.tests.items()
        }
        self.runs = 0

    def lane(self, ws: Workspace, runner: TestRunner) -> Verifier:
        """The same verdicts, given on another shadow copy with its own runner (a parallel lane)."""
        import copy

        other = copy.copy(self)
        other.ws, other.runner, other.runs = ws, runner, 0
        other._protected = self.spec.protected(ws.entries)
        other._strays = self.spec.strays(ws.entries)
        return other

    def covering(self, patch: Patch) -> list[str]:
        """Originally passing tests that run the code a patch changes.

        Lines are widened to their enclosing function: a changed default argument or a def line
        is executed at import time, never inside a test, yet every caller depends on it.
        """
        if not self.coverage:
            return list(self.passing)
        selected: set[str] = set()
        for e in patch.edits:
            selected |= self.coverage.tests_covering(e.path, function_lines(e.before, e.after))
        passing = set(self.passing)
        return [n for n in self.passing if n in selected and n in passing]

    def refuses(self, patch: Patch) -> str:
        """Why ``patch`` may not be a fix (it touches the specification); "" when it may."""
        for e in patch.edits:
            why = self.spec.reason(e.path, e.before, e.after, allow_test_edits=self.allow_test_edits)
            if why:
                return why
        return ""

    def edits_tests(self, patch: Patch) -> bool:
        return self.spec.edits_tests(patch.files)

    def _run(self, patch: Patch, nodeids: list[str]) -> tuple[RunResult, list[str]]:
        """Run ``nodeids`` from pristine specification files; also what the run rewrote of them."""
        keep = set(patch.files)  # an opted-in test edit is the patch's own text, not a rewrite
        protected = [r for r in self._protected if r not in keep]
        self.ws.ensure_pristine(protected, self._strays)
        run = self.runner.run(nodeids, timeouts=self.timeouts)
        self.runs += 1
        return run, self.ws.ensure_pristine(protected, self._strays)

    def check(self, patch: Patch) -> CandidateResult:
        result = CandidateResult()
        refused = self.refuses(patch)
        if refused:
            log.info("refused a candidate: %s", refused)
            return CandidateResult(still_failing=list(self.failing), refused=refused)
        with self.ws.edited(patch.texts()):
            first, rewrote = self._run(patch, self.failing)
            if rewrote:
                return CandidateResult(still_failing=list(self.failing), refused=_rewrote(rewrote))
            for n in self.failing:
                t = first.tests.get(n)
                (result.fixed if t is not None and t.passed else result.still_failing).append(n)
            if result.still_failing or first.collect_errors:
                result.still_failing = result.still_failing or list(self.failing)
                return result
            covering = self.covering(patch)
            if covering:
                second, rewrote = self._run(patch, covering)
                result.refused = _rewrote(rewrote) if rewrote else ""
                result.checked = len(covering)
                result.broken = [n for n in covering
                                 if n not in second.tests or not second.tests[n].passed]
        return result

    def confirm(self, patch: Patch) -> Verification | None:
        """Run every test of the baseline with the patch; a Verification only if all hold."""
        if self.refuses(patch):
            return None
        wanted = [*self.failing, *self.passing]
        with self.ws.edited(patch.texts()):
            run, rewrote = self._run(patch, wanted)
        if rewrote:
            log.info("candidate rejected: %s", _rewrote(rewrote))
            return None
        fixed = [n for n in self.failing if n in run.tests and run.tests[n].passed]
        kept = [n for n in self.passing if n in run.tests and run.tests[n].passed]
        if len(fixed) != len(self.failing) or len(kept) != len(self.passing) or run.collect_errors:
            log.info("candidate passed its covering tests but not the whole run")
            return None
        return Verification(fail_to_pass=fixed, pass_to_pass=len(kept), scope="suite")


def _rewrote(paths: list[str]) -> str:
    return f"the tests ran with {', '.join(paths[:3])} rewritten by the code under test (restored)"
