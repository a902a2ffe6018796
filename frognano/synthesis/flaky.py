"""Flaky tests: a test goes into a task only once it has passed ``needed`` runs on the clean code.

A task's PASS_TO_PASS says "these pass, before and after the fix", and its FAIL_TO_PASS "these
pass after it": a test that fails now and then at random would score a correct fix 0.  A test
failing a fraction ``rate`` of its runs passes ``n`` independent runs in a row with probability
``(1 - rate) ** n``; ``runs_needed()`` is the smallest ``n`` that makes this at most ``missed``:
10 runs for a 40%-flaky test and 1% (0.6 ** 10 = 0.006).

The counting is per test and lazy: the baseline and the reversed run of set-up are two passes
of every test a candidate may use, and each pass in a candidate's runs counts too (a failure
there is the bug's); validation then runs the tests a new task would name, on the clean code,
until each has its ``needed`` passes (a few short warm runs of a dozen tests, once
per test and process: a proven test stays proven).  Set-up's spare shadow slot, idle once its
reversed run is done, runs the suite again until the coverage baseline ends
(``rerun_while``): on a suite that is quick beside its coverage run most tests are proven
before the first candidate.  A test that fails, errors, hangs, crashes
or goes missing in such a run is flaky: it is dropped from that task's PASS_TO_PASS, a task
whose FAIL_TO_PASS holds it is refused, and no later candidate uses it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner

__all__ = ["FLAKY_RATE", "MISSED", "SETUP_RUNS", "Stability", "rerun_while", "runs_needed"]

FLAKY_RATE = 0.4  # the failure rate a test is guaranteed to be caught at ...
MISSED = 0.01  # ... with at most this probability of passing every run
SETUP_RUNS = 2  # set-up runs every usable test passed: the baseline and the reversed run


def runs_needed(rate: float = FLAKY_RATE, missed: float = MISSED) -> int:
    """Passing runs in a row after which a test that fails ``rate`` of its runs has been caught
    with probability at least ``1 - missed``."""
    return math.ceil(math.log(missed) / math.log(1.0 - rate))


@dataclass
class Stability:
    """Per test: the clean-code runs it passed; and the tests found flaky."""

    needed: int = field(default_factory=runs_needed)
    passes: dict[str, int] = field(default_factory=dict)
    flaky: set[str] = field(default_factory=set)

    @classmethod
    def after_setup(cls, tests: Iterable[str], runs: int = SETUP_RUNS) -> Stability:
        """``tests`` each passed ``runs`` runs of the clean code already."""
        return cls(passes={n: runs for n in tests})

    def proven(self, name: str) -> bool:
        return name not in self.flaky and self.passes.get(name, 0) >= self.needed

    def observe(self, run: RunResult, tests: Iterable[str]) -> None:
        """Count a run of the clean code: each of ``tests`` passed one more run, or is flaky."""
        for name in tests:
            result = run.tests.get(name)
            if result is not None and result.passed:
                self.passes[name] = self.passes.get(name, 0) + 1
            else:
                self.flaky.add(name)

    def count_passes(self, run: RunResult) -> None:
        """Count the passes of a run whose other outcomes have another explanation (a bug
        injected, or a test run alone in reverse that depends on its order)."""
        for name, result in run.tests.items():
            if result.passed:
                self.passes[name] = self.passes.get(name, 0) + 1

    def prove(self, runner: TestRunner, tests: Iterable[str],
              timeouts: Mapping[str, float]) -> set[str] | None:
        """Run those of ``tests`` not proven yet on the clean code until each is proven or
        flaky; returns the flaky ones among ``tests``, None when a run was cancelled or did not
        collect (no verdict)."""
        tests = list(dict.fromkeys(tests))
        todo = [n for n in tests if n not in self.flaky and not self.proven(n)]
        while todo:
            run = runner.run(todo, timeouts=dict(timeouts))
            if run.cancelled or run.collect_errors:
                return None
            self.observe(run, todo)
            todo = [n for n in todo if n not in self.flaky and not self.proven(n)]
        return {n for n in tests if n in self.flaky}


def rerun_while(runner: TestRunner, tests: list[str], stop: threading.Event, record: Stability) -> None:
    """Run ``tests`` on the clean code again and again, counting into ``record``, until ``stop``
    is set or each is proven or flaky: a use for a spare runner while something else runs.  The
    run in flight when ``stop`` is set is killed; the tests it finished count."""
    todo = [n for n in tests if n not in record.flaky and not record.proven(n)]
    while todo and not stop.is_set():
        run = runner.run(todo, cancel=stop)
        if run.collect_errors:
            return
        record.observe(run, [n for n in todo if n in run.tests] if run.cancelled else todo)
        todo = [n for n in todo if n not in record.flaky and not record.proven(n)]
