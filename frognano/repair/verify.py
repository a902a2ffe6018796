"""Verification of candidate patches in the shadow copy (DESIGN.md invariant 2).

A candidate is checked in two steps, cheapest first: the originally failing tests (most
candidates fail here), then the originally passing tests that cover the changed code.  The one
fix that is offered is then confirmed once against every originally passing test of the run.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field

from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
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

    @property
    def verified(self) -> bool:
        return bool(self.fixed) and not self.still_failing and not self.broken


def changed_lines(before: str, after: str) -> set[int]:
    """Lines of ``before`` that an edit touches (an insertion touches the lines around it)."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        lines.update(range(i1 + 1, i2 + 1) if i2 > i1 else (i1, i1 + 1))
    return {ln for ln in lines if ln >= 1}


class Verifier:
    def __init__(self, ws: Workspace, runner: TestRunner, baseline: RunResult,
                 coverage: CoverageMap, *, timeout: float, factor: float) -> None:
        self.ws = ws
        self.runner = runner
        self.failing = baseline.failing
        self.passing = baseline.passing
        self.coverage = coverage
        # A candidate that turns a loop infinite must cost seconds, not the full timeout.
        self.timeouts = {
            n: min(timeout, max(2.0, factor * t.duration + 1.0)) for n, t in baseline.tests.items()
        }
        self.runs = 0

    def covering(self, patch: Patch) -> list[str]:
        """Originally passing tests that run the code a patch changes.

        Lines are widened to their enclosing function: a changed default argument or a def line
        is executed at import time, never inside a test, yet every caller depends on it.
        """
        if not self.coverage:
            return list(self.passing)
        selected: set[str] = set()
        for e in patch.edits:
            lines = changed_lines(e.before, e.after)
            try:
                smap = StatementMap(e.before)
            except (SyntaxError, ValueError):
                smap = None
            spans = set(lines)
            for ln in lines:
                stmt = smap.statement(ln) if smap else None
                if stmt is None or stmt.function is None:
                    spans = None  # module-level change: every test of this file's code
                    break
                spans |= set(smap.function_span(stmt.function))
            selected |= self.coverage.tests_covering(e.path, spans)
        passing = set(self.passing)
        return [n for n in self.passing if n in selected and n in passing]

    def check(self, patch: Patch) -> CandidateResult:
        result = CandidateResult()
        with self.ws.edited(patch.texts()):
            first = self.runner.run(self.failing, timeouts=self.timeouts)
            self.runs += 1
            for n in self.failing:
                t = first.tests.get(n)
                (result.fixed if t is not None and t.passed else result.still_failing).append(n)
            if result.still_failing or first.collect_errors:
                result.still_failing = result.still_failing or list(self.failing)
                return result
            covering = self.covering(patch)
            if covering:
                second = self.runner.run(covering, timeouts=self.timeouts)
                self.runs += 1
                result.checked = len(covering)
                result.broken = [n for n in covering
                                 if n not in second.tests or not second.tests[n].passed]
        return result

    def confirm(self, patch: Patch) -> Verification | None:
        """Run every test of the baseline with the patch; a Verification only if all hold."""
        wanted = [*self.failing, *self.passing]
        with self.ws.edited(patch.texts()):
            run = self.runner.run(wanted, timeouts=self.timeouts)
        self.runs += 1
        fixed = [n for n in self.failing if n in run.tests and run.tests[n].passed]
        kept = [n for n in self.passing if n in run.tests and run.tests[n].passed]
        if len(fixed) != len(self.failing) or len(kept) != len(self.passing) or run.collect_errors:
            log.info("candidate passed its covering tests but not the whole run")
            return None
        return Verification(fail_to_pass=fixed, pass_to_pass=len(kept), scope="suite")
