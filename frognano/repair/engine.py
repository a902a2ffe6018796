"""The repair engine: run the tests, localise, search, verify.  No LSP, no terminal here.

The faces (command line, language server, watch mode) drive it and render what it returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..config import Settings
from ..errors import EXIT_OK, EXIT_UNFIXED, FrogNanoError, UsageError
from ..progress import Progress, Silent
from ..sandbox.results import RunResult
from ..sandbox.runner import RunnerConfig, TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .collection import collect_error
from .evidence import refine
from .localize import Location, localize
from .recent import GreenSnapshot, git_changes, merge
from .recheck import Rechecks
from .patch import EpisodeRecord, Fix
from .search import HARD_GRACE, Search, SearchResult
from .verify import Verifier

if TYPE_CHECKING:
    from ..runtime.base import Model
    from .agent import Episode
    from .harness import ToolBox

log = logging.getLogger(__name__)

# However little of fix_seconds the test runs left, the search gets this long: a budget of a
# few seconds would end every fix on a large suite with "ran out of time after 0 candidates".
MIN_SEARCH_SECONDS = 10.0
# With a model configured, the search gets this share of what fix_seconds leaves; the model's
# episodes get the rest (and any the search does not use).  Half: on a real suite the search
# alone can use every second, and a model given none would never run.
SEARCH_SHARE_WITH_MODEL = 0.5
# A confirmation is a fresh, untraced run of the tests the diagnosis ran with line coverage.
# The traced run takes about TRACE_SLOWDOWN times as long, and a fresh interpreter about
# CONFIRM_START seconds more to start (measured: more-itertools, 730 tests, 82 s traced and
# 22 s fresh; boltons, 468 tests, 7.9 s and 3.9 s).  Reserving the traced run's whole time,
# as before, left a real suite's search its 10 s floor while 20 s of fix_seconds went unused.
TRACE_SLOWDOWN = 3.0
CONFIRM_START = 1.0


def confirm_seconds(run: RunResult) -> float:
    """About how long a fresh, untraced run of ``run``'s tests takes (``run`` being traced)."""
    return CONFIRM_START + run.duration / TRACE_SLOWDOWN


class NothingToTest(UsageError):
    """The project has nothing to run: no Python files, or pytest collects no tests.

    A face says so and waits (the server shows an idle status, watch mode stops at start-up);
    it is not a failure of the tests.
    """


def first_error(log_tail: str) -> str:
    """The line of pytest's output that says what it refused."""
    for line in log_tail.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    return log_tail.strip()[-300:]


# The untraced rerun of a test the diagnosis stopped may take this many times as long as it
# ran traced.  Tracing slows a CPU-bound test several times, but not one that waits on threads:
# more-itertools' concurrency tests (TestSerialize, TestConcurrentTee) look stalled at 6.4 s
# traced and need 4.4-5.5 s untraced under the runner, so at 1x they failed now and then, and
# a test that fails before any edit blocks every fix.  Not more: an endless loop pays the
# margin too (realbugs' three loop cases, measured beside another job: 1-4 s more each at 1.25x).
RECHECK_MARGIN = 1.25


def recheck_bound(traced: float) -> float:
    """The seconds an untraced rerun of a test stopped after ``traced`` seconds may take."""
    return max(1.0, RECHECK_MARGIN * traced)


@dataclass
class Diagnosis:
    run: RunResult
    coverage: CoverageMap
    locations: list[Location]
    # With -k: a run (with coverage) of the tests the selection left out; a fix must keep those
    # that passed passing where they cover its change (``Verifier``'s ``outside``).
    outside: RunResult | None = None

    @property
    def failing(self) -> list[str]:
        return self.run.failing


# What a fix run came to: a verified fix, none, nothing to fix, or the tests could not be run.
FixStatus = Literal["fixed", "unfixed", "passing", "error"]


@dataclass
class FixReport:
    status: FixStatus
    failing: list[str] = field(default_factory=list)
    fix: Fix | None = None
    message: str = ""
    diagnosis: Diagnosis | None = None
    search: SearchResult | None = None
    notes: list[str] = field(default_factory=list)  # one-line warnings about the project
    exit_code: int = EXIT_OK
    applied: bool | None = None  # set by a face that was asked to write the fix
    episodes: list[Episode] = field(default_factory=list)  # model episodes, in order
    undo: str | None = None  # the undo record of an applied fix

    @property
    def alternatives(self) -> list[Fix]:
        """Other verified fixes of the search, best first, when its own fix is the one offered."""
        if self.fix is None or self.search is None or self.fix.source != "search":
            return []
        return self.search.alternatives

    def to_json(self) -> dict:
        out: dict = {"status": self.status, "failing": list(self.failing),
                     "fix": self.fix.to_json() if self.fix else None}
        if self.fix is not None:  # other verified fixes, best first (the search's ranking)
            out["alternatives"] = [f.to_json() for f in self.alternatives]
        if self.message:
            out["message"] = self.message
        if self.diagnosis is not None:
            out["failures"] = [_failure_json(nodeid, self.diagnosis.run) for nodeid in self.failing]
            out["suspicious"] = [
                {"path": loc.path, "line": loc.line, "end_line": loc.end_line,
                 "score": round(loc.score, 4), "function": loc.function,
                 **({"edits": loc.edits, "moved": loc.moved} if loc.edits else {})}
                for loc in self.diagnosis.locations[:10]
            ]
        if self.search is not None:
            out["search"] = {"candidates": self.search.tried, "pairs": self.search.pairs_tried,
                             "seconds": round(self.search.seconds, 3),
                             "stopped": self.search.stopped, "duplicates": self.search.duplicates,
                             "pairs_pruned": self.search.pairs_pruned}
            if self.fix is None:  # what came closest, for a person or a tool to take further
                out["candidates"] = [
                    {"notes": [str(n) for n in t.candidate.notes], "diff": t.candidate.patch.diff(),
                     "fixed": sorted(t.result.fixed), "broken": sorted(t.result.broken), "verified": False}
                    for t in self.search.best
                ]
        if self.notes:
            out["notes"] = list(self.notes)
        if self.applied is not None:
            out["applied"] = self.applied
        if self.episodes:
            out["episodes"] = [
                {"status": e.status, "record": str(e.record) if e.record else None, "turns": len(e.turns),
                 "malformed": e.malformed, "tokens_in": e.tokens_in, "tokens_out": e.tokens_out,
                 "seconds": round(e.seconds, 3), **({"error": e.error} if e.error else {})}
                for e in self.episodes
            ]
        return out


def _failure_json(nodeid: str, run: RunResult) -> dict:
    """One failing test as ``--json`` carries it: its assertion message and where it failed."""
    t = run.tests.get(nodeid)
    if t is None:
        return {"test": nodeid}
    out: dict = {"test": nodeid, "outcome": t.outcome, "message": t.summary}
    if t.frames:
        f = t.frames[-1]
        out.update(path=f.path, line=f.line, function=f.function)
    return out


class Engine:
    """One project, one shadow, one warm runner; reused across runs (server, watch mode)."""

    def __init__(self, ws: Workspace, settings: Settings, progress: Progress | None = None,
                 model: Model | None = None) -> None:
        self.ws = ws
        self.settings = settings
        ws.allow_data_edits = settings.allow_data_edits  # what the specification makes of test reads
        self.progress: Progress = progress or Silent()
        self._runner: TestRunner | None = None
        self._model = model
        self._owns_model = False  # a model passed in belongs to the caller, who closes it
        self._denials = RunResult()  # what the sandbox denied the failing tests (see baseline)
        self._denials_probed: set[str] = set()
        # The last run's failing tests that failed on what the sandbox refused or denied them:
        # no edit of the code fixes those, so a fix leaves them out when others fail too.
        self.refused: set[str] = set()
        # Failing tests that passed when run again untraced (``_name_denials``).
        self._passed_untraced: set[str] = set()
        self.notes: list[str] = []
        self._lanes: list[tuple[Workspace, TestRunner]] = []  # more shadow copies, for parallel checks
        self._lanes_lock = threading.Lock()  # the diagnosis' rechecks open a lane from their thread
        self._green = GreenSnapshot()  # the sources as of the last run where every test passed
        self._readable: dict[str, tuple[int, int]] = {}  # Python files read fine, by (size, mtime)

    @property
    def model(self) -> Model | None:
        """The repair model, loaded on its first ``generate`` (None when no model is configured)."""
        if self._model is None and self.settings.model:
            from ..runtime.lazy import LazyModel

            self._model = LazyModel(self.settings.model, self.progress, lanes=self.settings.lanes)
            self._owns_model = True
        return self._model

    @property
    def runner(self) -> TestRunner:
        if self._runner is None:
            self._runner = TestRunner(self.ws, RunnerConfig.from_settings(self.settings))
        return self._runner

    def close(self) -> None:
        for ws, runner in self._lanes:
            runner.close()
            ws.close()
        self._lanes = []
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._model is not None and self._owns_model:
            self._model.close()
            self._model = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- steps ----------------------------------------------------------------------------
    def sync(self) -> None:
        stats = self.ws.sync()
        self.notes = [f"{rel} is a symlink leading out of the project; FrogNano will not edit it"
                      for rel in stats.external_links]
        py = self.ws.python_files()
        if not py:
            raise NothingToTest(f"{self.ws.root}: no Python files here; give the folder of a Python project")
        overlay = self.ws.overlay
        for rel in py:
            e = self.ws.entries[rel]
            # Read once per version (the editor's saves sync it again and again), not at every sync.
            if rel not in overlay and self._readable.get(rel) == (e.size, e.mtime_ns):
                continue
            try:
                self.ws.read(rel)
            except (UnicodeDecodeError, SyntaxError):
                self.notes.append(f"{rel} is not valid UTF-8 and declares no encoding; "
                                  "FrogNano will not edit it")
                continue
            if rel not in overlay:
                self._readable[rel] = (e.size, e.mtime_ns)

    @contextlib.contextmanager
    def cancelling(self, cancel: threading.Event | None) -> Iterator[None]:
        """Every test run inside the block (baseline, candidates, confirmation, a model's tool
        calls) dies as soon as ``cancel`` is set, not at the next candidate."""
        runner = self.runner
        runner.cancel = cancel
        try:
            yield
        finally:
            runner.cancel = None

    def run_tests(self, selection: list[str] | None = None, *, k: str | None = None,
                  cancel: threading.Event | None = None) -> RunResult:
        """Run ``selection`` (node ids or test files; None: the suite) with per-test coverage.

        Never raises for what the run found (collection errors, no tests): ``check`` does.
        """
        args = ["-k", k] if k else []
        s = self.settings
        # A diagnosis run: endless loops stop early (stall_timeout 0: at the timeout), and a test
        # killed in C code still names the lines it ran.
        stall = (s.stall_timeout, s.candidate_timeout_factor)
        rechecks = self._rechecks(args)
        try:
            run = self.runner.run(selection, args=args, coverage=True, cancel=cancel, stall=stall,
                                  on_result=rechecks.submit if rechecks is not None else None)
        except BaseException:
            if rechecks is not None:
                rechecks.abort()
            raise
        if run.cancelled:
            if rechecks is not None:
                rechecks.abort()
            return run
        self._recheck_untraced(run, args, cancel, rechecks)
        if not run.cancelled:
            self._name_denials(run)
        return run

    def _rechecks(self, args: list[str]) -> Rechecks | None:
        """The untraced reruns of stopped tests on a second shadow copy, during the traced run
        (``recheck``); None with one lane or one CPU, where they run after it."""
        if min(self.settings.lanes, os.cpu_count() or 1) < 2:
            return None
        return Rechecks(lambda: self._lane(0)[1], args=args, timeout=self.settings.timeout,
                        bound=recheck_bound)

    def _recheck_untraced(self, run: RunResult, args: list[str], cancel: threading.Event | None,
                          rechecks: Rechecks | None = None) -> None:
        """Tests the stall check or the timeout stopped get one more run without tracing, for
        as long as they already ran: line tracing slows a CPU-bound test several times, so a
        slow correct test (more-itertools' prime sieve, its big combinatorics) can look stalled,
        or reach its timeout, though it finishes untraced.  One that passes counts as passing
        (keeping the lines it ran traced); an endless loop costs its stall seconds once more
        (the timeout only when the stall check did not catch it), times ``RECHECK_MARGIN``.

        With ``rechecks``, those the traced run reported in time were rerun on a lane while it
        went on (and may have had longer: see ``recheck``); the rest run here, beside the
        lane's last one."""
        stalled = [n for n, t in run.tests.items() if t.outcome == "timeout"]
        left = rechecks.finish() if rechecks is not None else []
        if not stalled:
            if rechecks is not None:
                rechecks.wait()
            return
        mine = [n for n in stalled if rechecks is None or n not in rechecks.started or n in left]
        again = RunResult()
        if mine:
            timeouts = {n: recheck_bound(run.tests[n].duration) for n in mine}
            again = self.runner.run(mine, args=args, timeouts=timeouts, cancel=cancel)
        lane = rechecks.wait() if rechecks is not None else {}
        if again.cancelled:
            return
        for n in stalled:
            t = again.tests.get(n) if n in mine else lane.get(n)
            if t is not None and t.passed:
                traced = run.tests[n]
                run.tests[n] = dataclasses.replace(t, coverage=traced.coverage, last=traced.last)
                log.info("%s timed out under tracing but passes untraced (%.1f s): counted as passing",
                         n, t.duration)

    def _name_denials(self, run: RunResult) -> None:
        """A test that writes outside the shadow (a cache under $HOME) fails before any edit, so
        candidates are not blamed for it; say once what was denied and how to allow it.  And a
        test that fails only under the diagnosis' line tracing is no bug of the code either.

        The tests that failed (not hung or crashed: those would cost their timeout again) run
        once more, untraced, to name what they were denied, even where a test swallowed the
        PermissionError: naming costs too much to do in the whole coverage run.  A test that
        passes in that run fails only under tracing, or only sometimes (click's pager tests
        race a child process, which ``sys.settrace``'s slowdown loses): it counts as passing.  Once
        per failing test and engine: the server and watch run tests on every save.
        """
        # A test that passed untraced before is asked again: its traced failure says nothing.
        quick = [n for n in run.failing if run.tests[n].outcome in ("failed", "error")
                 and (n not in self._denials_probed or n in self._passed_untraced)]
        if quick and not run.collect_errors:
            self._denials_probed.update(quick)
            again = self.runner.run(quick, name_denials=bool(run.confinement))
            if not again.cancelled:
                self._denials.merge(again)
                for n in quick:
                    t = again.tests.get(n)
                    if t is not None and t.passed:
                        # Counted as passing, as a timed-out test that passes untraced is
                        # (``_recheck_untraced``): a fix must then keep it passing.
                        traced = run.tests[n]
                        run.tests[n] = dataclasses.replace(t, coverage=traced.coverage, last=traced.last)
                        self._passed_untraced.add(n)
                        note = (f"{n} failed in the traced run but passes untraced (flaky, or sensitive "
                                "to line tracing): counted as passing")
                        if note not in self.notes:
                            self.notes.append(note)
        named = RunResult()
        named.merge(run)
        named.denied.update({p: t for p, t in self._denials.denied.items() if t in run.failing})
        denied = self.runner.denial_note(named)
        if denied and denied not in self.notes:
            self.notes.append(denied)
        from ..sandbox.denials import refusal_note, refused_tests

        explained = set(named.denied.values())  # the tests the write note names
        messages = {n: run.tests[n].message for n in run.failing if n in run.tests}
        refused = refusal_note(messages, run.confinement, explained)
        if refused and refused not in self.notes:
            self.notes.append(refused)
        self.refused = {n for n in explained if n in messages} | set(refused_tests(messages, run.confinement, explained))

    def check(self, run: RunResult, k: str | None = None) -> None:
        """Raise the named error of a run that cannot be diagnosed: a module that does not
        import, arguments pytest refused, no tests at all (``NothingToTest``)."""
        if run.collect_errors:
            raise collect_error(self.ws.root, run, self.runner.python)
        if run.exitstatus == 4:  # pytest usage error: bad option in test_args, bad -k
            raise UsageError(f"pytest refused the arguments: {first_error(run.log_tail)}")
        if not run.tests:
            if k:
                raise NothingToTest(f"no tests match -k {k!r} in {self.ws.root}" + self._uncollected(k))
            raise NothingToTest(f"no tests found in {self.ws.root} (pytest collected nothing)")

    def _uncollected(self, k: str) -> str:
        """For ``-k`` naming a file (``tests_tqdm.py``) that exists but that pytest does not
        collect: why nothing matched.  -k matches collected names; an uncollected file has none."""
        name = k.strip().strip("'\"")
        if not name.endswith(".py"):
            return ""
        found = sorted(rel for rel in self.ws.entries if rel == name or rel.endswith("/" + name))
        if not found:
            return ""
        return (f": {found[0]} exists, but pytest does not collect it (its name matches none of "
                "python_files: test_*.py and *_test.py unless the project's pytest configuration "
                "says otherwise); add its pattern to python_files, or give the file as a path in "
                "test_args")

    def baseline(self, k: str | None = None) -> RunResult:
        """Run the selected tests with per-test coverage; errors that stop everything raise."""
        self.progress.phase("running the tests")
        run = self.run_tests(None, k=k)
        self.check(run, k)
        return run

    def diagnose(self, k: str | None = None) -> Diagnosis:
        self.sync()
        run = self.baseline(k)
        coverage = CoverageMap.from_run(run)
        diagnosis = Diagnosis(run, coverage, self.locate(run, coverage), self._outside(k) if k and run.failing else None)
        n = len(diagnosis.locations)
        log.info("%d tests ran, %d failing; %d suspicious line%s ranked", len(run.tests), len(run.failing),
                 n, "s" * (n != 1))
        return diagnosis

    def _outside(self, k: str) -> RunResult:
        """The tests ``-k k`` left out, with coverage: -k chooses which failures to fix, never
        which tests may break (a fix that breaks a test outside the selection is no fix)."""
        self.progress.phase("running the tests outside -k")
        return self.runner.run(None, args=["-k", f"not ({k})"], coverage=True)

    def locate(self, run: RunResult, coverage: CoverageMap) -> list[Location]:
        """The suspicious lines of ``run``'s failures (none when nothing fails), the lines
        changed since the last commit or the last green run of this engine first among equals."""
        sources = {rel: (e.size, e.mtime_ns) for rel, e in self.ws.entries.items()
                   if rel.endswith(".py") and not e.external}
        if not run.failing:
            if run.tests and not run.collect_errors:
                self._green.record(sources, self._read)
            return []
        recent = merge(git_changes(self.ws.root, lambda rel: rel in sources), self._green.changes(sources, self._read))
        return localize(self.without_refused(run), coverage, self._read, limit=max(20, self.settings.max_locations),
                        recent=recent)

    def without_refused(self, run: RunResult) -> RunResult:
        """``run`` without the failing tests the sandbox refused (a local server's
        ``server_bind``, a write outside the shadow), when other tests fail too: no edit of the
        code fixes them, and their lines must not rank (on boltons' history, two socket tests
        refused ``bind`` put their server's lines above the real fault).  With only refused
        tests failing, ``run`` stays whole (the notes explain)."""
        refused = [n for n in run.failing if n in self.refused]
        if not refused or len(refused) == len(run.failing):
            return run
        return dataclasses.replace(run, tests={n: t for n, t in run.tests.items() if n not in self.refused})

    def fix(self, k: str | None = None, cancel: threading.Event | None = None, *,
            diagnosis: Diagnosis | None = None, started: float | None = None) -> FixReport:
        """The whole path: diagnose, search, confirm.  Errors become an ``error`` report.

        A ``diagnosis`` from an incremental session (watch mode) is used instead of running the
        suite again.  ``fix_seconds`` bounds the whole: the search gets what the test runs left.
        ``started`` (``time.monotonic()``): when the fix began, if before this call (the CLI
        runs the diagnosis itself, to show it before the search); a reused session's diagnosis
        is not counted.
        """
        started = time.monotonic() if started is None else started
        try:
            diagnosis = self.diagnose(k) if diagnosis is None else diagnosis
        except FrogNanoError as exc:
            return FixReport("error", message=str(exc), notes=self.notes, exit_code=exc.exit_code)
        diagnosis = self._without_refused(diagnosis)
        failing = diagnosis.failing
        if not failing:
            n = len(diagnosis.run.passing)
            every = "the 1 selected test passes" if n == 1 else f"all {n} selected tests pass"
            return FixReport("passing", [], message=every,
                             diagnosis=diagnosis, notes=self.notes)
        verifier = self.verifier(diagnosis)
        deadline = started + self.settings.fix_seconds if self.settings.fix_seconds else None
        with_model = self._model is not None or bool(self.settings.model)
        budget = self.search_budget(diagnosis, started, share=SEARCH_SHARE_WITH_MODEL if with_model else 1.0)
        result = self.search(diagnosis, verifier, cancel, budget=budget, deadline=deadline)
        # What the search's edits did to the failing tests ranks the suspicious lines again
        # (the report's, the episodes' first observation, the editor's after a fix job).
        fixed_at = [(n.path, n.line) for n in result.fix.notes] if result.fix is not None else []
        diagnosis = dataclasses.replace(diagnosis, locations=refine(diagnosis.locations, result.history,
                                                                    len(failing), fixed_at))
        if result.fix is not None:
            for found in (result.fix, *result.alternatives):
                found.edits_tests = verifier.edits_tests(found.patch)
            return FixReport("fixed", failing, result.fix, result.fix.verified.describe(),
                             diagnosis, result, self.notes, EXIT_OK)
        report = FixReport("unfixed", failing, None, "", diagnosis, result, self.notes, EXIT_UNFIXED)
        if result.stopped != "cancelled" and with_model:
            try:
                self._episodes(report, verifier, cancel, deadline)
            except FrogNanoError as exc:  # the model cannot be loaded or reached
                report.status, report.message, report.exit_code = "error", str(exc), exc.exit_code
                return report
            if report.fix is not None:
                report.fix.edits_tests = verifier.edits_tests(report.fix.patch)
                report.status, report.exit_code = "fixed", EXIT_OK
                report.message = report.fix.verified.describe()
                return report
        report.message = f"no verified fix: {self._why_unfixed(result, diagnosis)}"
        if report.episodes:
            report.message += f"; {len(report.episodes)} model episode{'s' * (len(report.episodes) != 1)} " \
                              f"ended {', '.join(e.status for e in report.episodes)}"
        return report

    def _without_refused(self, diagnosis: Diagnosis) -> Diagnosis:
        """``diagnosis`` without the failing tests the sandbox refused (``without_refused``):
        no edit makes those pass under confinement, and keeping them would fail every
        candidate.  Said in a note.  Its locations never counted them (``locate``)."""
        run = self.without_refused(diagnosis.run)
        if run is diagnosis.run:
            return diagnosis
        refused = [n for n in diagnosis.failing if n in self.refused]
        more = f" and {len(refused) - 1} more" if len(refused) > 1 else ""
        self.notes.append(f"the fix leaves out {refused[0]}{more}: failing only on what the sandbox "
                          "refused, they are not the bug (the note above says how to run them unconfined)")
        return dataclasses.replace(diagnosis, run=run)

    def _why_unfixed(self, result: SearchResult, diagnosis: Diagnosis) -> str:
        """Why the search stopped, with the numbers of what ran out (one clause)."""
        if not result.generated and result.stopped == "exhausted":
            # "none of the 0 single edits ... passed" read as if edits had been tried and failed.
            if not diagnosis.locations:
                return ("no edit to try: the failing tests ran no line of the project's own code "
                        "(what they need may not exist yet: a missing function or feature is more "
                        "than an edit of existing lines)")
            n = len(diagnosis.locations)
            return f"no edit to try: no operator applies at the {n} suspicious line{'s' * (n != 1)}"
        singles = f"{result.tried} single edit{'s' * (result.tried != 1)}"
        pairs = f"{result.pairs_tried} pair{'s' * (result.pairs_tried != 1)} of edits"
        if result.stopped == "cancelled":
            return f"the search was cancelled after {singles} and {pairs}"
        if result.stopped == "time":
            budget = self.settings.search_seconds if result.budget is None else result.budget
            why = f"{budget:.3g} s"
            if budget < self.settings.search_seconds:  # fix_seconds, not search_seconds, bounded it
                why += (f": what fix_seconds = {self.settings.fix_seconds:g} left after the test runs, "
                        "keeping time to confirm a fix")
            return f"the search ran out of time ({why}) after {singles} and {pairs}"
        if result.stopped == "budget":
            return (f"the search tried {singles} and used its budget of {self.settings.max_pairs} "
                    "pairs of edits")
        tried = f"none of the {singles} and {pairs} tried passed the tests"
        untried = result.generated - result.tried
        if untried > 0 and result.generated > self.settings.max_candidates:
            return f"{tried} (max_candidates = {self.settings.max_candidates} of the {result.generated} found)"
        if untried > 0:  # skipped by a lane, or refused before running (an edit of a test)
            return f"{tried} (of {result.generated} found; {untried} were not run)"
        return tried

    def verifier(self, diagnosis: Diagnosis) -> Verifier:
        """The judge of candidates against ``diagnosis``: its failing tests must pass, its passing
        ones must keep passing (docs/ARCHITECTURE.md, invariant 2)."""
        return Verifier(self.ws, self.runner, diagnosis.run, diagnosis.coverage,
                        timeout=self.settings.timeout, factor=self.settings.candidate_timeout_factor,
                        allow_test_edits=self.settings.allow_test_edits, outside=diagnosis.outside)

    def search_budget(self, diagnosis: Diagnosis, started: float, *, share: float = 1.0) -> float:
        """The search's seconds under ``fix_seconds`` (counted from ``started``): ``share`` of
        what is left, less the time to confirm a fix (``confirm_seconds``, at most a third of
        the budget); never under ``MIN_SEARCH_SECONDS``, never over ``search_seconds``."""
        s = self.settings
        if not s.fix_seconds:
            return s.search_seconds
        left = s.fix_seconds - (time.monotonic() - started)
        confirm = min(confirm_seconds(diagnosis.run), s.fix_seconds / 3)
        return min(s.search_seconds, max(MIN_SEARCH_SECONDS, (left - confirm) * share))

    def search(self, diagnosis: Diagnosis, verifier: Verifier,
               cancel: threading.Event | None = None, *, budget: float | None = None,
               deadline: float | None = None) -> SearchResult:
        """The operator search near ``diagnosis``'s suspicious lines, within the settings' budgets
        (``budget``: its seconds, default ``search_seconds``)."""
        s = self.settings
        seconds = s.search_seconds if budget is None else budget
        self.progress.phase("searching for a fix", s.max_candidates + s.max_pairs)
        search = Search(self.ws, verifier, max_locations=s.max_locations, max_candidates=s.max_candidates,
                        max_pairs=s.max_pairs, seconds=seconds,
                        progress=self.progress, cancel=cancel, deadline=deadline,
                        lanes=lambda: self._lane_verifiers(verifier, cancel))
        result = search.run(diagnosis.locations)
        result.budget = seconds
        log.info("search: %d single edits (of %d found) and %d pairs tried in %.1f s; %s", result.tried,
                 result.generated, result.pairs_tried, result.seconds,
                 "verified fix found" if result.fix else f"stopped: {result.stopped}")
        return result

    def _lane_verifiers(self, verifier: Verifier, cancel: threading.Event | None) -> list[Verifier]:
        """``verifier`` and one more per extra lane (``settings.lanes``, at most one per CPU): each
        on a shadow copy of its own, synced to what the first one holds, with its own runner."""
        wanted = max(1, min(self.settings.lanes, os.cpu_count() or 1))
        lanes = [verifier]
        for i in range(wanted - 1):
            ws, runner = self._lane(i)
            runner.cancel = cancel
            lanes.append(verifier.lane(ws, runner))
        return lanes

    def _lane(self, i: int) -> tuple[Workspace, TestRunner]:
        """The ``i``-th extra shadow copy and its runner (opened once), synced to what the
        engine's own shadow holds now."""
        with self._lanes_lock:
            while len(self._lanes) <= i:
                ws = Workspace(self.ws.root, cache=self.ws.cache)
                ws.open()
                try:
                    ws.set_overlay(self.ws.overlay)
                    ws.sync()
                    runner = TestRunner(ws, RunnerConfig.from_settings(self.settings))
                except BaseException:
                    ws.close()
                    raise
                self._lanes.append((ws, runner))
            ws, runner = self._lanes[i]
            ws.set_overlay(self.ws.overlay)
            ws.sync()
            return ws, runner

    def _episodes(self, report: FixReport, verifier: Verifier, cancel: threading.Event | None,
                  deadline: float | None = None) -> None:
        """Up to ``settings.episodes`` model episodes; the first verified patch becomes the fix.
        ``deadline`` (``time.monotonic()``, from ``fix_seconds``): an episode still going then is
        cancelled, its test runs killed, and no further one starts."""
        with _until(cancel, deadline) as stop:
            # Test runs get the search's grace: one almost done when the time ends still counts.
            self.runner.deadline = None if deadline is None else deadline + HARD_GRACE
            try:
                self._run_episodes(report, verifier, stop)
            finally:
                self.runner.deadline = None
        ran = len(report.episodes)
        if report.fix is None and deadline is not None and time.monotonic() >= deadline \
                and not (cancel is not None and cancel.is_set()):
            report.notes = [*report.notes, f"model episodes stopped after {ran} of {self.settings.episodes}: "
                            f"fix_seconds = {self.settings.fix_seconds:g} ran out"]

    def _run_episodes(self, report: FixReport, verifier: Verifier, cancel: threading.Event) -> None:
        from .agent import EpisodeStatus

        diagnosis, search = report.diagnosis, report.search
        assert diagnosis is not None and search is not None
        for i in range(self.settings.episodes):
            if cancel.is_set():
                break
            self.progress.phase(f"model episode {i + 1} of {self.settings.episodes}")
            episode, _ = self.model_episode(diagnosis, verifier, search, i, cancel,
                                            meta={"project": str(self.ws.root), "failing": report.failing})
            report.episodes.append(episode)
            if episode.status == EpisodeStatus.MODEL_ERROR:  # a broken model: the whole run's error
                raise UsageError(episode.error or "the model failed")
            if episode.status == EpisodeStatus.CONTEXT_OVERFLOW:  # an outcome of this episode; the next runs
                report.notes = [*report.notes, f"model episode {i + 1}: {episode.error}"]
            if episode.patch is None:
                continue
            check = verifier.check(episode.patch)
            if check.refused:
                report.notes = [*report.notes, f"model episode {i + 1}: patch refused: {check.refused}"]
            verification = verifier.confirm(episode.patch) if check.verified else None
            if verification is not None:
                report.fix = Fix(episode.patch, verification, "model",
                                 record=EpisodeRecord(i + 1, episode.record))
                return

    def model_episode(self, diagnosis: Diagnosis, verifier: Verifier, search: SearchResult, index: int,
                      cancel: threading.Event | None = None, *, meta: dict | None = None,
                      record: bool = True, seed: int | None = None, hint: str = "",
                      tools: tuple[str, ...] | None = None, listed: int | None = None) -> tuple[Episode, ToolBox]:
        """Episode ``index`` (0-based) of the model on ``diagnosis``: the one harness that
        ``fix``, the faces and the training environment share (docs/ARCHITECTURE.md, invariant 3).  Returns
        the episode and its toolbox (what it edited and ran).  ``seed`` (default ``index``)
        seeds the sampling; ``hint`` (a task's hint, in evaluation and training) follows the
        first observation; ``tools`` narrows the harness's tools offered (``EpisodeConfig.tools``),
        ``listed`` the candidates listed (``EpisodeConfig.listed``; default all, up to 15)."""
        from ..paths import project_cache
        from ..runtime.base import Sampling
        from .agent import EpisodeConfig, run_episode
        from .harness import ToolBox, first_observation

        s, model = self.settings, self.model
        if model is None:
            raise UsageError("no model is configured for repair episodes (give --model)")
        observation = first_observation(diagnosis.run, diagnosis.locations, self._read)
        if hint:
            observation += f"\nHint: {hint}"
        # Greedy decoding would repeat the first episode exactly; later ones sample.
        temperature = s.temperature if index == 0 or s.temperature > 0 else 0.7
        infos = _candidate_infos(search, listed)
        config = EpisodeConfig(max_turns=s.max_turns, max_tokens=s.max_episode_tokens,
                               constrain=s.constrain, tools=tools, **({"listed": listed} if listed else {}),
                               sampling=Sampling(temperature=temperature, seed=index if seed is None else seed,
                                                 max_tokens=s.max_new_tokens))
        toolbox = ToolBox(self.ws, self.runner, list(diagnosis.failing), infos,
                          timeouts=verifier.timeouts, spec=verifier.spec,
                          allow_test_edits=s.allow_test_edits)
        episode = run_episode(model, toolbox, observation, config, cancel=cancel,
                              record_dir=project_cache(self.ws.root) / "episodes" if record else None,
                              meta=meta or {})
        return episode, toolbox

    def _read(self, path: str) -> str | None:
        try:
            return self.ws.read(path)
        except (OSError, UnicodeDecodeError, SyntaxError):
            return None


def _candidate_infos(search: SearchResult, limit: int | None = None):
    """The ``candidates`` tool's list: partial fixes search found, then edits it did not try."""
    from .harness import MAX_CANDIDATES, CandidateInfo

    limit = MAX_CANDIDATES if limit is None else limit
    tried = {id(t.candidate): t for t in search.history}
    partial = sorted((t for t in search.history if t.result.fixed), key=lambda t: -len(t.result.fixed))
    untried = [c for c in search.candidates if id(c) not in tried]
    infos = []
    for cand, fixed in [(t.candidate, len(t.result.fixed)) for t in partial] + [(c, None) for c in untried]:
        if len(cand.mutations) != 1:
            continue
        m = cand.mutations[0]
        infos.append(CandidateInfo(m.path, m.line, m.description, m.apply, fixed))
    return infos[:limit]


@contextlib.contextmanager
def _until(cancel: threading.Event | None, deadline: float | None) -> Iterator[threading.Event]:
    """An event set when ``cancel`` is, or when ``deadline`` (``time.monotonic()``) passes:
    episodes and models know one cancel event, and a fix's time limit is one more reason to stop."""
    if deadline is None:
        yield cancel or threading.Event()
        return
    stop, done = threading.Event(), threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            if (cancel is not None and cancel.is_set()) or time.monotonic() >= deadline:
                stop.set()
                return

    watcher = threading.Thread(target=watch, name="fix-deadline", daemon=True)
    watcher.start()
    try:
        yield stop
    finally:
        done.set()
        watcher.join()
