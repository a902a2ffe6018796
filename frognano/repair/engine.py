"""The repair engine: run the tests, localise, search, verify.  No LSP, no terminal here.

The faces (command line, language server, watch mode) drive it and render what it returns.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Protocol

from ..config import Settings
from ..errors import EXIT_OK, EXIT_UNFIXED, FrogNanoError, ProjectError, UsageError
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .localize import Location, localize
from .patch import Fix
from .search import Search, SearchResult
from .verify import Verifier

log = logging.getLogger(__name__)


class Progress(Protocol):
    """What a face shows while the engine works (a progress bar, LSP $/progress)."""

    def phase(self, title: str, total: int | None = None) -> None: ...
    def update(self, done: int, total: int | None = None, note: str = "") -> None: ...


class _Silent:
    def phase(self, title: str, total: int | None = None) -> None:
        pass

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        pass


@dataclass
class Diagnosis:
    run: RunResult
    coverage: CoverageMap
    locations: list[Location]

    @property
    def failing(self) -> list[str]:
        return self.run.failing


@dataclass
class FixReport:
    status: str  # fixed | unfixed | passing | error
    failing: list[str] = field(default_factory=list)
    fix: Fix | None = None
    message: str = ""
    diagnosis: Diagnosis | None = None
    search: SearchResult | None = None
    notes: list[str] = field(default_factory=list)  # one-line warnings about the project
    exit_code: int = EXIT_OK
    applied: bool | None = None  # set by a face that was asked to write the fix
    undo: str | None = None  # the undo record of an applied fix

    def to_json(self) -> dict:
        out: dict = {"status": self.status, "failing": list(self.failing),
                     "fix": self.fix.to_json() if self.fix else None}
        if self.message:
            out["message"] = self.message
        if self.diagnosis is not None:
            out["suspicious"] = [
                {"path": loc.path, "line": loc.line, "end_line": loc.end_line,
                 "score": round(loc.score, 4), "function": loc.function}
                for loc in self.diagnosis.locations[:10]
            ]
        if self.search is not None:
            out["search"] = {"candidates": self.search.tried, "pairs": self.search.pairs_tried,
                             "seconds": round(self.search.seconds, 3),
                             "stopped": self.search.stopped or None}
        if self.notes:
            out["notes"] = list(self.notes)
        if self.applied is not None:
            out["applied"] = self.applied
        return out


class Engine:
    """One project, one shadow, one warm runner; reused across runs (server, watch mode)."""

    def __init__(self, ws: Workspace, settings: Settings, progress: Progress | None = None) -> None:
        self.ws = ws
        self.settings = settings
        self.progress = progress or _Silent()
        self._runner: TestRunner | None = None
        self.notes: list[str] = []

    @property
    def runner(self) -> TestRunner:
        if self._runner is None:
            self._runner = TestRunner(self.ws, self.settings.runner_config())
        return self._runner

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def __enter__(self) -> "Engine":
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
            raise UsageError(f"{self.ws.root}: no Python files here; give the folder of a Python project")
        for rel in py:
            try:
                self.ws.read(rel)
            except (UnicodeDecodeError, SyntaxError):
                self.notes.append(f"{rel} is not valid UTF-8 and declares no encoding; "
                                  "FrogNano will not edit it")

    def baseline(self, k: str | None = None) -> RunResult:
        """Run the selected tests with per-test coverage; errors that stop everything raise."""
        self.progress.phase("running the tests")
        args = ["-k", k] if k else []
        run = self.runner.run(None, args=args, coverage=True)
        if run.collect_errors:
            first = run.collect_errors[0]
            where = f" {first.nodeid}" if first.nodeid else ""
            more = f" (and {len(run.collect_errors) - 1} more)" if len(run.collect_errors) > 1 else ""
            raise ProjectError(f"cannot collect{where}: {first.summary}{more}")
        if run.exitstatus == 4:  # pytest usage error: bad option in test_args, bad -k
            line = next((ln for ln in run.log_tail.splitlines() if "error" in ln.lower()), run.log_tail.strip())
            raise UsageError(f"pytest refused the arguments: {line.strip()[:300]}")
        if not run.tests:
            if k:
                raise UsageError(f"no tests match -k {k!r} in {self.ws.root}")
            raise UsageError(f"no tests found in {self.ws.root} (pytest collected nothing)")
        return run

    def diagnose(self, k: str | None = None) -> Diagnosis:
        self.sync()
        run = self.baseline(k)
        coverage = CoverageMap.from_run(run)

        def read(path: str) -> str | None:
            try:
                return self.ws.read(path)
            except (OSError, UnicodeDecodeError, SyntaxError):
                return None

        locations = localize(run, coverage, read, limit=max(20, self.settings.max_locations))
        return Diagnosis(run, coverage, locations)

    def fix(self, k: str | None = None, cancel: threading.Event | None = None) -> FixReport:
        """The whole path: diagnose, search, confirm.  Errors become an ``error`` report."""
        try:
            diagnosis = self.diagnose(k)
        except FrogNanoError as exc:
            return FixReport("error", message=str(exc), notes=self.notes, exit_code=exc.exit_code)
        failing = diagnosis.failing
        if not failing:
            n = len(diagnosis.run.passing)
            return FixReport("passing", [], message=f"all {n} selected tests pass",
                             diagnosis=diagnosis, notes=self.notes)
        verifier = Verifier(self.ws, self.runner, diagnosis.run, diagnosis.coverage,
                            timeout=self.settings.timeout, factor=self.settings.candidate_timeout_factor)
        s = self.settings
        self.progress.phase("searching for a fix", s.max_candidates + s.max_pairs)
        search = Search(self.ws, verifier, max_locations=s.max_locations, max_candidates=s.max_candidates,
                        max_pairs=s.max_pairs, seconds=s.search_seconds,
                        progress=lambda done, total, note: self.progress.update(done, total, note),
                        cancel=cancel)
        result = search.run(diagnosis.locations)
        if result.fix is not None:
            return FixReport("fixed", failing, result.fix, result.fix.verified.describe(),
                             diagnosis, result, self.notes, EXIT_OK)
        why = {"cancelled": "the search was cancelled", "time": "the search ran out of time",
               "budget": "the search used its candidate budget"}.get(result.stopped, "no candidate edit passed")
        message = f"no verified fix: {why} ({result.tried + result.pairs_tried} candidates tried)"
        return FixReport("unfixed", failing, None, message, diagnosis, result, self.notes, EXIT_UNFIXED)
