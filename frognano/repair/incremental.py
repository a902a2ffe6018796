"""Incremental test runs: the picture of a suite, kept current by re-running what a change affects.

The two live faces, the language server and ``frognano watch``, both hold one ``Session`` per
project and drive it the same way::

    selection = session.select(changed)         # which tests the changed files affect
    update = session.run(selection, cancel)     # run them, merge them into the picture

so the same save re-runs the same tests in the editor and in the terminal.  The rules, in order
(better slow than stale):

* nothing known yet, or the last run could not collect: the whole suite;
* a folder added or removed, a deleted file, or a file any test may depend on
  (``SUITE_FILES``: conftest, pytest and packaging configuration): the whole suite;
* other non-Python files: nothing (the picture stays as it is);
* a test module (by name, or because known tests live in it): that module, whole;
* any other Python file: the tests whose coverage ran the functions the change touched (the
  whole file's tests for a module-level change, or when its earlier text is not known); when
  no test is known to run it (a new module, code only run at import time), the whole suite.
  Coverage of the tests that do not run again moves with the lines the change added.

A partial run that cannot stand on its own (a selected test is gone, a module no longer
imports) is redone as a whole-suite run.  Results and per-test coverage of the tests that did
not run are kept: none of the files they ran changed.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..project_paths import is_test_module, nodeid_file
from ..sandbox.results import RunResult, TestResult
from ..sandbox.spectra import CoverageMap
from .engine import Diagnosis, Engine, NothingToTest
from .spans import changed_span
from .verify import function_lines

log = logging.getLogger(__name__)

__all__ = ["SUITE_FILES", "NothingToTest", "Selection", "Session", "Update"]

# Files whose change can change what every test does, or which tests pytest collects.
SUITE_FILES = frozenset({"conftest.py", "pyproject.toml", "setup.cfg", "setup.py", "pytest.ini",
                         ".pytest.ini", "tox.ini"})
TREE = "/"  # suffix of a changed path that is a folder (added, removed or moved)


def affects_tests(rel: str) -> bool:
    """Whether a change of ``rel`` can change what the tests do (Python and suite files; not an
    editor's lock file, ``.#x.py``, which no import can name)."""
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    return (rel.endswith((".py", TREE)) or name in SUITE_FILES) and not name.startswith(".#")


@dataclass(frozen=True)
class Selection:
    """What a change re-runs: node ids and whole test modules, or everything."""

    nodeids: tuple[str, ...] | None  # None: the whole suite; (): nothing
    modules: frozenset[str] = frozenset()  # test modules among ``nodeids`` that run whole
    reason: str = ""  # for a status line: "all tests (conftest.py changed)"
    texts: tuple[tuple[str, str], ...] = ()  # the changed source files' new text
    # Every Python file's version when the selection was made (``Workspace.versions``): what
    # the picture is current for once the run is merged.
    versions: Mapping[str, object] | None = field(default=None, compare=False, repr=False)

    @property
    def everything(self) -> bool:
        return self.nodeids is None

    @property
    def empty(self) -> bool:
        return self.nodeids == ()

    @classmethod
    def all(cls, reason: str = "all tests") -> Selection:
        return cls(None, frozenset(), reason)


@dataclass
class Update:
    """One run, merged into the session's picture."""

    selection: Selection
    ran: RunResult  # this run alone (empty for an empty selection)
    diagnosis: Diagnosis  # every known test: results, coverage, suspicious lines
    notes: list[str] = field(default_factory=list)  # one-line warnings about the project

    @property
    def cancelled(self) -> bool:
        return self.ran.cancelled


class Session:
    """One project's suite, kept current across changes; runs on the caller's thread.

    The engine (shadow copy, warm runner) belongs to the caller, who syncs the shadow before
    each run (with the editor's unsaved buffers overlaid, in the server).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._results: dict[str, TestResult] = {}
        self._coverage = CoverageMap()
        self._last = RunResult()
        self._complete = False  # the picture comes from a whole-suite run that collected
        self._texts: dict[str, str] = {}  # source files as the picture's tests last ran them
        self._versions: Mapping[str, object] | None = None  # the Python files the picture ran
        self._duration = 0.0  # the last whole-suite run's seconds (a partial run's are fewer)
        self._cold = False  # a whole run (a fresh process) left the warm session uncollected

    @property
    def known(self) -> bool:
        """Whether a whole-suite run that collected has been merged (selection is possible)."""
        return self._complete and bool(self._coverage)

    @property
    def diagnosis(self) -> Diagnosis | None:
        """The picture of the whole suite, or None before the first complete run."""
        if not self._complete:
            return None
        run = self._merged(self._last)
        return Diagnosis(run, self._coverage, self.engine.locate(run, self._coverage))

    @property
    def current(self) -> bool:
        """Whether the picture describes the sources as the shadow holds them now (after the
        caller's sync): nothing changed since the runs it merged, no collection error."""
        return self.known and not self._last.collect_errors and not self.unseen()

    def unseen(self, now: Mapping[str, object] | None = None) -> set[str]:
        """The Python files changed, added or removed since the picture's last run (all of
        them before the first).  A run that was cancelled leaves its files unseen, so the next
        selection runs their tests, whatever the caller says changed.  ``now``: the versions,
        when the caller has them already."""
        now = self.engine.ws.versions() if now is None else now
        old = self._versions
        if old is None:
            return {rel for rel in now if affects_tests(rel)}
        return {rel for rel in now.keys() | old.keys() if now.get(rel) != old.get(rel) and affects_tests(rel)}

    def refresh(self, cancel: threading.Event | None = None) -> Update | None:
        """Run what changed since the picture (only the affected tests); None when the
        picture is current and nothing needs to run."""
        if self.current:
            return None
        return self.run(self.select(set()), cancel)

    def prewarm(self) -> None:
        """After a whole run, collect the warm session that the partial runs of later saves use
        (2 s on more-itertools, which the next save would otherwise wait for).  The faces call
        it on the thread that runs the tests, once the run's results are out."""
        if self._cold:
            self._cold = False
            self.engine.runner.prewarm()

    def forget(self) -> None:
        """The next run is a whole one (the settings, and so the runner, changed)."""
        self._complete = False

    # -- selection ---------------------------------------------------------------------------
    def select(self, changed: set[str] | None) -> Selection:
        """The tests a change of ``changed`` (project-relative posix paths; a folder ends with
        ``/``; None: unknown, everything) re-runs."""
        versions = self.engine.ws.versions()
        if changed is None:
            return dataclasses.replace(Selection.all(), versions=versions)
        if self.known:
            changed = set(changed) | self.unseen(versions)
        names = _names(changed) if changed else ""
        everything = Selection(None, frozenset(), f"all tests ({names} changed)" if changed else "all tests",
                               versions=versions)
        if not self.known:
            return everything
        root = str(self.engine.ws.root)
        known_files = {nodeid_file(n) for n in self._results}
        modules: set[str] = set()
        ids: set[str] = set()
        texts: list[tuple[str, str]] = []
        for rel in changed:
            name = rel.rsplit("/", 1)[-1]
            if rel.endswith(TREE) or name in SUITE_FILES:
                return everything
            if not rel.endswith(".py"):
                continue
            if not os.path.lexists(os.path.join(root, rel)):
                return everything  # deleted: its importers fail, or its tests are gone
            if is_test_module(rel) or rel in known_files:
                modules.add(rel)
                continue
            lines, text = self._touched(rel)
            if text is not None:
                texts.append((rel, text))
            covering = self._coverage.tests_covering(rel, lines)
            if not covering and lines is None:  # new, or only run at import time: any test may depend on it
                return everything
            ids |= covering
        chosen = sorted(modules) + sorted(n for n in ids if nodeid_file(n) not in modules)
        if not chosen:
            why = f"no tests depend on {names}" if changed else "nothing changed"
            return Selection((), frozenset(), why, tuple(texts), versions)
        tests = len([n for n in ids if nodeid_file(n) not in modules])
        parts = ([f"{len(modules)} test module{'s' * (len(modules) != 1)}"] if modules else []) + \
            ([f"{tests} test{'s' * (tests != 1)}"] if tests else [])
        what = " and ".join(parts)
        return Selection(tuple(chosen), frozenset(modules), f"{what} affected by {names}", tuple(texts), versions)

    def _touched(self, rel: str) -> tuple[set[int] | None, str | None]:
        """The lines of ``rel`` (as the picture knows it) whose tests its change can affect
        (None: all of them), and its new text."""
        try:
            text = self.engine.ws.read(rel)
        except (OSError, UnicodeDecodeError, SyntaxError):
            return None, None
        before = self._texts.get(rel)
        if before is None or before == text:
            return None, text
        return function_lines(before, text), text

    # -- running -----------------------------------------------------------------------------
    def run(self, selection: Selection, cancel: threading.Event | None = None) -> Update:
        """Run ``selection`` and merge it into the picture.

        Raises ``NothingToTest`` when the project has no tests (or no Python files), and the
        engine's named errors when pytest refuses its arguments.  A run whose collection failed
        is returned (``ran.collect_errors``), not raised: the faces show where.  A cancelled
        run changes nothing (``Update.cancelled``).
        """
        engine = self.engine
        if selection.versions is None:  # made by the caller: the shadow as it is now
            selection = dataclasses.replace(selection, versions=engine.ws.versions())
        if selection.empty:  # only files no test depends on: the picture stays as it is
            if selection.versions is not None and self.known:
                self._versions = selection.versions
            return self._update(selection, RunResult(exitstatus=0))
        engine.progress.phase("running the tests" if selection.everything else "running the affected tests")
        run = engine.run_tests(None if selection.everything else list(selection.nodeids), cancel=cancel)
        if not selection.everything and not run.cancelled and _incomplete(run, selection):
            log.info("partial run incomplete (exit %s); running the whole suite", run.exitstatus)
            selection = Selection(None, frozenset(), selection.reason.replace("affected by", "after") or "all tests",
                                  versions=selection.versions)
            run = engine.run_tests(None, cancel=cancel)
        if run.cancelled:
            return Update(selection, run, _empty())  # nobody reads it: the run is stale
        self._merge(run, selection)
        if not self._results and not run.collect_errors:
            engine.check(run)  # names it: pytest refused the arguments, or collected nothing
            raise NothingToTest(f"no tests found in {engine.ws.root} (pytest collected nothing)")
        self._cold = selection.everything and not run.collect_errors
        return self._update(selection, run)

    def adopt(self, diagnosis: Diagnosis) -> None:
        """A whole-suite diagnosis made elsewhere (a fix job's baseline, on the shadow as it
        is now) becomes the picture."""
        self._merge(diagnosis.run, dataclasses.replace(Selection.all(), versions=self.engine.ws.versions()))

    def _update(self, selection: Selection, run: RunResult) -> Update:
        merged = self._merged(run)
        diagnosis = Diagnosis(merged, self._coverage, self.engine.locate(merged, self._coverage))
        return Update(selection, run, diagnosis, list(self.engine.notes))

    def _merge(self, run: RunResult, selection: Selection) -> None:
        fresh = CoverageMap.from_run(run).by_test
        if selection.everything:
            self._results = dict(run.tests)
            self._coverage = CoverageMap(dict(fresh))
            self._texts = self._sources()
            self._duration = run.duration
        else:
            for rel, text in selection.texts:
                before = self._texts.get(rel)
                if before is not None and before != text:
                    self._move(rel, before, text, set(run.tests))
            self._texts.update(selection.texts)
            # Tests of a module that ran whole and did not report are gone (deleted).
            kept = {n: t for n, t in self._results.items() if nodeid_file(n) not in selection.modules}
            kept.update(run.tests)
            self._results = kept
            by_test = {n: c for n, c in self._coverage.by_test.items() if n in kept}
            by_test.update(fresh)
            self._coverage = CoverageMap(by_test)
        self._last = run
        self._complete = not run.collect_errors
        self._versions = selection.versions

    def _sources(self) -> dict[str, str]:
        """The text of every source file the coverage names (what a later change is diffed with)."""
        texts = {}
        for rel in {path for files in self._coverage.by_test.values() for path in files}:
            try:
                texts[rel] = self.engine.ws.read(rel)
            except (OSError, UnicodeDecodeError, SyntaxError):
                continue
        return texts

    def _move(self, rel: str, before: str, after: str, rerun: set[str]) -> None:
        """``rel`` changed from ``before`` to ``after``: the coverage records of the tests that
        did not run again (they never ran the changed functions) follow its unchanged lines."""
        moved = _line_map(before, after)
        by_test = dict(self._coverage.by_test)
        for nodeid, files in by_test.items():
            lines = files.get(rel)
            if nodeid in rerun or not lines:
                continue
            by_test[nodeid] = {**files, rel: frozenset(moved[ln] for ln in lines if ln in moved)}
        self._coverage = CoverageMap(by_test)

    def _merged(self, run: RunResult) -> RunResult:
        """Every known test's latest result, with ``run``'s collection errors and timings."""
        return RunResult(tests=dict(self._results), collect_errors=list(run.collect_errors),
                         collected=list(self._results), exitstatus=run.exitstatus,
                         # What a whole run would take (the confirmation's reserve), not the part's.
                         duration=max(run.duration, self._duration), warm=run.warm, log_tail=run.log_tail,
                         leaks=list(run.leaks), denied=dict(run.denied), confinement=run.confinement,
                         unconfined=run.unconfined)


def _line_map(before: str, after: str) -> dict[int, int]:
    """Line numbers of ``before`` -> ``after`` for the lines the change left as they were (above
    and below the changed span, as ``spans.changed_span`` finds it)."""
    old, new = before.splitlines(), after.splitlines()
    head, end, delta = changed_span(old, new)
    return {**{ln: ln for ln in range(1, head + 1)}, **{ln: ln + delta for ln in range(end + 1, len(old) + 1)}}


def _incomplete(run: RunResult, selection: Selection) -> bool:
    """A partial run that does not describe what was asked: the whole suite must tell."""
    return bool(run.collect_errors) or run.exitstatus == 4 or any(
        n not in run.tests for n in selection.nodeids or () if "::" in n)


def _empty() -> Diagnosis:
    return Diagnosis(RunResult(), CoverageMap(), [])


def _names(changed: set[str]) -> str:
    names = sorted(rel.rstrip("/") for rel in changed)
    return names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
