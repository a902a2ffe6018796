"""Verification of candidate patches in the shadow copy (docs/ARCHITECTURE.md, invariant 2).

A candidate is checked in two steps, cheapest first: the originally failing tests (most
candidates fail here; with several, the fastest of them alone first, and the others only if it
passes), then the originally passing tests that cover the changed code.  The one
fix that is offered is then confirmed once against every originally passing test of the run.

The tests are the specification (invariant 6): a patch that touches a test module, a
conftest.py, pytest's configuration or ``[tool.frognano]`` is refused before anything runs,
whatever produced it, unless the user opted in to test edits (then configuration still is).
Every run starts from the pristine test files (the user's text, restored in the shadow if an
earlier run rewrote them), and a run during which the code under test rewrote them verifies
nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field

from ..project_paths import nodeid_file
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.specification import Specification
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from . import tampering
from .localize import statement_map
from .patch import Patch, Verification
from .spans import changed_lines

log = logging.getLogger(__name__)

# A gate run of its own pays when the other failing tests cost more in a run than a run's fixed
# cost.  What a test costs a run is its baseline duration and the runner's work per test
# (pytest's protocol, the plugin's record, the failure's report): measured in more-itertools'
# warm session, one failing test ran in 40 ms, seventeen in 100-120 ms (their durations summed
# to 37 ms).  Counting durations alone against 0.25 s, the windowed bug's 16 other failing tests
# never gated, and every candidate paid for them all.
GATE_FROM = 0.05  # seconds: about a warm run's fixed cost
PER_TEST_S = 0.004  # seconds a run spends on each test beyond its own duration


@dataclass
class CandidateResult:
    fixed: list[str] = field(default_factory=list)  # originally failing, now passing
    still_failing: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # originally passing, now failing
    checked: int = 0  # originally passing tests run in step two
    refused: str = ""  # why the patch was not run at all, or why its run does not count
    # What the failing-test run showed short of a fix, for the pair search: failing tests whose
    # outcome or message moved from the baseline's, and why the edit made things worse (the
    # module no longer imports, a test now hangs or crashes), "" when it did not.
    changed: list[str] = field(default_factory=list)
    worse: str = ""
    unseen: list[str] = field(default_factory=list)  # failing tests not run: the gate failed first

    @property
    def verified(self) -> bool:
        return bool(self.fixed) and not self.still_failing and not self.broken and not self.refused


def function_lines(before: str, after: str) -> set[int] | None:
    """The lines of ``before`` whose tests an edit can affect: the whole of each function it
    changes; None when it changes module-level code (every test of the file's code)."""
    lines = changed_lines(before, after)
    try:
        smap = statement_map(before)  # built once per text: every save and candidate asks
    except (SyntaxError, ValueError):
        return None
    spans = set(lines)
    for ln in lines:
        stmt = smap.statement(ln)
        if stmt is None or stmt.function is None:
            return None
        spans |= set(smap.function_span(stmt.function))
    return spans


HUNG = frozenset({"timeout"})  # baseline outcomes whose duration says nothing about the test
HANG_FLOOR = 0.5  # seconds: the least a candidate's run of a test that hung may take
# A candidate's test may take ``factor`` times its baseline duration plus CANDIDATE_MARGIN, at
# least CANDIDATE_FLOOR.  The baseline is the traced diagnosis run (about TRACE_SLOWDOWN times
# slower than a candidate's untraced one), so a 3 ms test gets 0.5 s, some 500 times what it
# needs: a candidate that makes it loop costs half a second (0.75 s when the loop is in C code,
# past the alarm, with the runner's kill), not the 2 s + 1 s it cost when the floor was 2 s.
CANDIDATE_FLOOR = 0.5
CANDIDATE_MARGIN = 0.25
# The confirmation is the last word on a fix and runs once per fix, in a fresh interpreter: a
# roomier floor, so a machine busy at that moment cannot turn a fix away.
CONFIRM_FLOOR = 2.0


def _parent(nodeid: str) -> str:
    """A test's class (``file::Class``), else its module: the group whose tests it resembles."""
    base = _function_id(nodeid)
    return base[:base.rindex("::")] if "::" in base else base


def hang_bound(baseline: RunResult, timeout: float, factor: float, nodeid: str | None = None) -> float:
    """The limit of a candidate's run of a test (``nodeid``) that hung in the baseline.

    Its own duration is only the limit it hit, so the bound comes from the tests that finished:
    ``factor`` times the slowest that passed (else the slowest that failed) plus a quarter of a
    second, at least half a second and at most ``timeout``.  The tests are its nearest
    neighbours that finished: those of its class, else its module, else the suite.  A cured
    loop runs like its neighbours (milliseconds, in a unit suite); an uncured one then costs
    well under a second per candidate instead of ``timeout``, and candidates that leave the
    loop alone are most of them (53 of 118 on realbugs/42).  The suite's slowest test is no
    guide: more-itertools' slowest (1.4 s traced, a Fourier transform) made every candidate of
    a loop in ``padded()`` cost 14 s, where ``PaddedTest``'s others take milliseconds."""
    finished = [(n, t) for n, t in baseline.tests.items() if t.outcome not in HUNG and t.outcome != "crashed"]
    if nodeid is not None:
        for near in (_parent(nodeid), nodeid_file(nodeid)):
            close = [(n, t) for n, t in finished if n.startswith(near + "::")]
            if close:
                finished = close
                break
    passed = [t.duration for _, t in finished if t.passed] or [t.duration for _, t in finished]
    if not passed:
        return min(timeout, 2.0)  # nothing finished to learn from: the floor of a passing test
    return min(timeout, max(HANG_FLOOR, factor * max(passed) + 0.25))


def candidate_timeouts(baseline: RunResult, timeout: float, factor: float,
                       floor: float = CANDIDATE_FLOOR) -> dict[str, float]:
    """Each baseline test's limit in a candidate's run: ``factor`` times its own duration plus
    ``CANDIDATE_MARGIN`` (at least ``floor``, at most ``timeout``); a test that hung gets
    ``hang_bound``."""
    return {n: hang_bound(baseline, timeout, factor, n) if t.outcome in HUNG
            else min(timeout, max(floor, factor * t.duration + CANDIDATE_MARGIN)) for n, t in baseline.tests.items()}


class Verifier:
    def __init__(self, ws: Workspace, runner: TestRunner, baseline: RunResult,
                 coverage: CoverageMap, *, timeout: float, factor: float,
                 allow_test_edits: bool = False, spec: Specification | None = None,
                 outside: RunResult | None = None) -> None:
        """``outside``: a run (with coverage) of the tests a ``-k`` selection left out.  A fix
        is judged by every test that covers its change, not only the selection's: those of
        them that passed join the originally passing tests (their failures stay out of it)."""
        self.ws = ws
        self.runner = runner
        self.failing = baseline.failing
        self.outside = 0  # passing tests outside the -k selection that judge candidates too
        if outside is not None:
            kept = {n: t for n, t in outside.tests.items() if t.outcome == "passed" and n not in baseline.tests}
            baseline = RunResult(tests={**baseline.tests, **kept}, collected=[*baseline.collected, *outside.collected])
            # (an outside test without coverage is in no test's map, so ``covering`` would never
            # pick it: the outside run has coverage, and the confirmation runs them all anyway)
            coverage = CoverageMap({**CoverageMap.from_run(outside).by_test, **coverage.by_test})
            self.outside = len(kept)
        self.passing = baseline.passing
        # Fresh-interpreter confirmations so far, and the seconds they took (benchmarks/confirmation.py).
        self.confirms, self.confirm_seconds = 0, 0.0
        # What the failing tests said (assertion messages, exception text): literal ingredients.
        self.messages = [baseline.tests[n].message for n in self.failing if n in baseline.tests]
        self.coverage = coverage
        self.allow_test_edits = allow_test_edits
        self.spec = spec or Specification.of_workspace(ws, [*baseline.tests, *baseline.collected])
        self._protected = self.spec.protected(ws.entries)
        self._strays = self.spec.strays(ws.entries)
        # A candidate that turns a loop infinite must cost half a second, not the full timeout;
        # and one that does not cure a test that hung in the baseline, about as much
        # (``hang_bound``: from the test's neighbours).
        self.timeouts = candidate_timeouts(baseline, timeout, factor)
        self.confirm_timeouts = candidate_timeouts(baseline, timeout, factor, CONFIRM_FLOOR)
        self.runs = 0
        self._baseline = baseline.tests
        # The fastest failing test is the gate: most candidates fail it, and it alone costs least.
        # Worth a run of its own only when the other failing tests cost more than a run's fixed
        # cost (slow or hanging tests, or many: ``PER_TEST_S`` each); else one run of them all
        # also says which ones an edit fixes, which the pair search and the report of partial
        # fixes use.
        timed = sorted((n for n in self.failing if n in baseline.tests), key=lambda n: baseline.tests[n].duration)
        rest = sum(baseline.tests[n].duration + PER_TEST_S for n in timed[1:])
        self.gate = timed[0] if len(timed) > 1 and rest >= GATE_FROM else None

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
        """Why ``patch`` may not be a fix (it touches the specification, or its edit of the code
        under test reaches into the test runner); "" when it may."""
        for e in patch.edits:
            why = self.spec.reason(e.path, e.before, e.after, allow_test_edits=self.allow_test_edits)
            if why:
                return why
            if e.path.endswith(".py") and not self.spec.edits_tests([e.path]):
                why = tampering.refusal(e.path, e.before, e.after)
                if why:
                    return why
        return ""

    def edits_tests(self, patch: Patch) -> bool:
        return self.spec.edits_tests(patch.files)

    def _run(self, patch: Patch, nodeids: list[str], *, fresh: bool = False) -> tuple[RunResult, list[str]]:
        """Run ``nodeids`` from pristine specification files; also what the run rewrote of them.
        ``fresh``: in a new interpreter (``TestRunner.run``), as a confirmation (its limits)."""
        keep = set(patch.files)  # an opted-in test edit is the patch's own text, not a rewrite
        protected = [r for r in self._protected if r not in keep]
        self.ws.ensure_pristine(protected, self._strays)
        timeouts = self.confirm_timeouts if fresh else self.timeouts
        run = self.runner.run(nodeids, timeouts=timeouts, fresh=fresh)
        self.runs += 1
        if _ids_not_found(run, nodeids):
            run = self._run_unstable(nodeids, timeouts, fresh)
        return run, self.ws.ensure_pristine(protected, self._strays)

    def _run_unstable(self, nodeids: list[str], timeouts: dict[str, float], fresh: bool) -> RunResult:
        """Run ``nodeids`` again by their test functions when pytest found some of them no more.

        A test parametrized by a value that changes from one collection to the next (marshmallow's
        ``test_invalid_datetime_deserialization[03:48:40 2026-12-07]``, from ``datetime.now()``)
        has another id in every run: pytest refuses the baseline's id ("not found", exit 4) and
        runs nothing, so every confirmation failed, the developers' own fix's too.  Run again
        naming each parametrized test by its function, and let the ids it collected now stand
        for the baseline's (``_stand_in``)."""
        functions = list(dict.fromkeys(_function_id(n) for n in nodeids))
        run = self.runner.run(functions, timeouts=timeouts, fresh=fresh)
        self.runs += 1
        stood = _stand_in(run, nodeids)
        if stood:
            log.info("%d test ids changed since the baseline (parametrized by a value that changes between "
                     "runs, e.g. the time), e.g. %s: each stands for its function's new parametrizations, "
                     "all of which must pass", len(stood), stood[0])
        return run

    def check(self, patch: Patch) -> CandidateResult:
        result = CandidateResult()
        refused = self.refuses(patch)
        if refused:
            log.info("refused a candidate: %s", refused)
            return CandidateResult(still_failing=list(self.failing), refused=refused)
        self.runner.ready()  # a warm-up collects from the shadow: not with this edit in it
        with self.ws.edited(patch.texts()):
            first, rewrote = self._run_failing(patch)
            if rewrote:
                return CandidateResult(still_failing=list(self.failing), refused=_rewrote(rewrote))
            if first.tampered:
                return CandidateResult(still_failing=list(self.failing), refused=_tampered(first))
            for n in self.failing:
                t = first.tests.get(n)
                (result.fixed if t is not None and t.passed else result.still_failing).append(n)
            result.changed, result.worse = self._effect(first)
            result.unseen = [n for n in self.failing if n not in first.tests]
            if result.still_failing or first.collect_errors:
                result.still_failing = result.still_failing or list(self.failing)
                return result
            covering = self.covering(patch)
            if covering:
                second, rewrote = self._run(patch, covering)
                result.refused = _rewrote(rewrote) if rewrote else _tampered(second) if second.tampered else ""
                result.checked = len(covering)
                result.broken = [n for n in covering
                                 if n not in second.tests or not second.tests[n].passed]
        return result

    def _run_failing(self, patch: Patch) -> tuple[RunResult, list[str]]:
        """The originally failing tests: the gate alone first, the others only if it passes."""
        if self.gate is None:
            return self._run(patch, self.failing)
        run, rewrote = self._run(patch, [self.gate])
        t = run.tests.get(self.gate)
        if rewrote or run.collect_errors or t is None or not t.passed:
            return run, rewrote
        rest, rewrote = self._run(patch, [n for n in self.failing if n != self.gate])
        run.merge(rest)
        return run, rewrote

    def _effect(self, run: RunResult) -> tuple[list[str], str]:
        """Failing tests ``run`` moved from their baseline outcome, and how it made things worse."""
        changed, worse = [], ""
        if run.collect_errors:
            worse = f"collection fails: {run.collect_errors[0].summary}"
        for n in self.failing:
            t, was = run.tests.get(n), self._baseline.get(n)
            if t is None or was is None:
                continue
            # A test that still hangs has not moved, though its message names another limit
            # (the candidate's bound, not the baseline's timeout or stall).
            still_hangs = t.outcome == was.outcome and t.outcome in HUNG
            if (t.outcome, t.summary) != (was.outcome, was.summary) and not still_hangs:
                changed.append(n)
            if t.outcome in ("timeout", "crashed") and was.outcome != t.outcome and not worse:
                worse = f"{n} now {'hangs' if t.outcome == 'timeout' else 'crashes'}"
        return changed, worse

    def confirm(self, patch: Patch) -> Verification | None:
        """Run every test of the baseline with the patch; a Verification only if all hold.

        The last word on a fix, so it is what the user's own pytest would see: a fresh
        interpreter (never the warm server's fork, never a body swap), which imports the changed
        modules from their edited text and runs their module-level code, from pristine test
        files; and pytest's exit status, read from outside the tests' process, must agree that
        every selected test passed (0) with what the plugin recorded.
        """
        if self.refuses(patch):
            return None
        wanted = [*self.failing, *self.passing]
        started = time.monotonic()
        self.runner.ready()
        with self.ws.edited(patch.texts()):
            run, rewrote = self._run(patch, wanted, fresh=True)
        self.confirms += 1
        self.confirm_seconds += time.monotonic() - started
        if rewrote:
            log.info("candidate rejected: %s", _rewrote(rewrote))
            return None
        if run.tampered:
            log.info("candidate rejected: %s", _tampered(run))
            return None
        fixed = [n for n in self.failing if n in run.tests and run.tests[n].passed]
        kept = [n for n in self.passing if n in run.tests and run.tests[n].passed]
        if len(fixed) != len(self.failing) or len(kept) != len(self.passing) or run.collect_errors:
            log.info("candidate passed its covering tests but not the whole run in a fresh interpreter: %s",
                     _shortfall(run, [*self.failing, *self.passing]))
            return None
        if run.returncode != 0 or run.exitstatus not in (0, None):  # a fresh run always has its code
            # Every test reported passing, yet pytest's process said otherwise: the results
            # were written by something else than pytest's own verdict.
            log.info("candidate rejected: the tests reported passing but pytest exited %s (status %s)",
                     run.returncode, run.exitstatus)
            return None
        return Verification(fail_to_pass=fixed, pass_to_pass=len(kept), scope="suite")


def _function_id(nodeid: str) -> str:
    """``file::Class::test[param]`` -> ``file::Class::test``: every parametrization of it."""
    return nodeid.split("[", 1)[0] if nodeid.endswith("]") else nodeid


def _ids_not_found(run: RunResult, nodeids: list[str]) -> bool:
    """pytest stopped before running anything because a parametrized id it was given is not
    collected any more (a usage error: exit status 4, "ERROR: not found: ...")."""
    return (not run.tests and run.exitstatus == 4 and "not found" in run.log_tail
            and any(_function_id(n) != n for n in nodeids))


def _stand_in(run: RunResult, wanted: list[str]) -> list[str]:
    """Give each wanted id ``run`` did not collect, of a parametrized test, the verdict of its
    function's ids that ``run`` collected instead: passed only when there are at least as many
    of them as the wanted ids they replace and all of them passed (else the first that did
    not).  The ids that stood in, in ``wanted``'s order."""
    wanted_set = set(wanted)
    lost: dict[str, list[str]] = {}
    for n in wanted:
        if n not in run.tests and _function_id(n) != n:
            lost.setdefault(_function_id(n), []).append(n)
    stood: list[str] = []
    for function, ids in lost.items():
        new = [t for n, t in run.tests.items() if _function_id(n) == function and n not in wanted_set]
        if len(new) < len(ids):
            continue  # fewer parametrizations than before: the missing ones did not run
        verdict = next((t for t in new if not t.passed), new[0])
        for n in ids:
            run.tests[n] = dataclasses.replace(verdict, nodeid=n)
            stood.append(n)
    return stood


def _shortfall(run: RunResult, wanted: list[str]) -> str:
    """What kept a confirmation from holding, in one line: the first test that did not pass,
    a collection error, or (nothing ran at all) pytest's own words from the run's log."""
    if run.collect_errors:
        e = run.collect_errors[0]
        return f"collecting {e.nodeid or 'the suite'} failed: {e.summary}"
    for n in wanted:
        t = run.tests.get(n)
        if t is None:
            continue
        if not t.passed:
            return f"{n} {t.outcome}: {_first_line(t.summary)}"
    missing = [n for n in wanted if n not in run.tests]
    tail = " ".join(run.log_tail.split()[-40:])
    return (f"{len(missing)} of {len(wanted)} tests did not run (pytest exited {run.exitstatus}"
            f"{': ' + tail if tail else ''})")


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:200] if (text or "").strip() else ""


def _tampered(run: RunResult) -> str:
    return f"the code under test rewrote pytest's reporting during the run ({', '.join(run.tampered[:3])})"


def _rewrote(paths: list[str]) -> str:
    return f"the tests ran with {', '.join(paths[:3])} rewritten by the code under test (restored)"
