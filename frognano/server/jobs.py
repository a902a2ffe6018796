"""Test runs and fix jobs of one project, on its own worker thread; no LSP here.

The engine, its shadow copy and its warm test runner are not thread-safe, so each project owns
one worker thread that does all of their work in order: a test run (the tests affected by the
saved files, chosen from the coverage map of earlier runs, merged into the project's picture of
the suite) or a fix job (``Engine.fix`` with a cancel event).  The event loop only queues jobs
and awaits their outcomes, so the server keeps answering while tests and searches run.

Every job works on a ``Snapshot``: the project's state counter and the text of the documents
open in the editor when the job was queued (overlaid into the shadow copy, so tests see what
the editor shows).  An outcome is only trusted while the project's state counter still has the
snapshot's value; a fix computed for an older state is never offered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import FrogNanoError
from ..repair.engine import Engine, FixReport
from ..repair.localize import Location, localize
from ..repair.patch import Fix
from ..sandbox.results import RunResult, TestResult
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import IGNORED_DIRS, Workspace
from . import convert

log = logging.getLogger(__name__)

# Files whose change can affect any test: their save runs the whole suite.
SUITE_FILES = frozenset({"conftest.py", "pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini", "setup.py"})


def is_test_module(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def overlay_path(root: Path, rel: str) -> bool:
    """An open document the tests should see instead of the file on disk: a Python file of
    the project itself (not under a virtualenv or cache, not a symlink, which is never edited)."""
    parts = rel.split("/")
    if not rel.endswith(".py") or any(p in IGNORED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
        return False
    path = root / rel
    real = os.path.realpath(path)
    return not path.is_symlink() and real.startswith(str(root) + os.sep)


# -- the worker thread --------------------------------------------------------------------------

class Worker:
    """One daemon thread running submitted calls in order (a daemon: a stuck test never blocks
    the server's exit, and the runner kills its process groups itself)."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((future, fn, args))
        return future

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the job
                future.set_exception(exc)

    def finish(self) -> None:
        """End the thread once the calls submitted so far are done."""
        self._queue.put(None)


# -- the model, loaded lazily -------------------------------------------------------------------

class LazyModel:
    """The repair model, loaded on its first use (on the worker thread, never the event loop)
    and kept across fix jobs and engine rebuilds until the ``model`` setting changes."""

    def __init__(self, spec: str, on_load: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.name = spec
        self._on_load = on_load or (lambda _msg: None)
        self._model: Any = None
        self._error: FrogNanoError | None = None
        self._lock = threading.Lock()
        self.loads = 0

    def load(self) -> Any:
        from ..runtime.base import ModelError, load_model

        with self._lock:
            if self._model is None:
                if self._error is not None:  # a broken spec fails once, not at every episode
                    raise self._error
                self._on_load(f"loading {self.spec}")
                started = time.monotonic()
                try:
                    self._model = load_model(self.spec)
                except FrogNanoError as exc:
                    self._error = exc
                    raise
                except ImportError as exc:
                    self._error = ModelError(f"model {self.spec}: {exc} (install the backend's extra, "
                                             "e.g. pip install 'frognano[mlx]')")
                    raise self._error from exc
                self.loads += 1
                self.name = getattr(self._model, "name", self.spec)
                log.info("loaded %s in %.1f s", self.spec, time.monotonic() - started)
            return self._model

    def generate(self, messages, tools=None, sampling=None, **kwargs):  # noqa: ANN001, ANN201
        return self.load().generate(messages, tools, sampling, **kwargs)

    def close(self) -> None:
        with self._lock:
            if self._model is not None:
                self._model.close()
                self._model = None


# -- progress -----------------------------------------------------------------------------------

class ProgressSink:
    """Where a job's progress goes (the server sends it as $/progress); called on the worker."""

    def phase(self, title: str, total: int | None = None) -> None: ...
    def update(self, done: int, total: int | None = None, note: str = "") -> None: ...


class _Relay:
    """The engine's Progress: forwards to the running job's sink, if it has one."""

    def __init__(self) -> None:
        self.sink: ProgressSink | None = None

    def phase(self, title: str, total: int | None = None) -> None:
        if self.sink is not None:
            self.sink.phase(title, total)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self.sink is not None:
            self.sink.update(done, total, note)


# -- snapshots and outcomes ---------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    state: int  # the project's state counter when the job was queued
    buffers: dict[str, str] = field(default_factory=dict)  # open .py documents, by relative path
    versions: dict[str, int] = field(default_factory=dict)  # their LSP versions


@dataclass
class TestOutcome:
    """One test run, merged into the project's picture of the suite."""

    __test__ = False

    snapshot: Snapshot
    run: RunResult = field(default_factory=RunResult)  # every known test (this run merged in)
    ran: int = 0  # tests that ran this time
    selection: list[str] | None = None  # what was asked for (None: the whole suite)
    coverage: CoverageMap = field(default_factory=CoverageMap)
    locations: list[Location] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # files the diagnostics point into
    shadow: str | None = None
    error: str = ""  # the run could not happen (crashed interpreter, bad settings)
    idle: str = ""  # nothing to run (no Python files, no tests): why
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failing(self) -> list[str]:
        return self.run.failing


@dataclass
class FixOutcome:
    snapshot: Snapshot
    report: FixReport | None = None
    tests: TestOutcome | None = None  # the fix job's own full baseline run
    cancelled: bool = False
    error: str = ""
    seconds: float = 0.0


@dataclass
class ReadyFix:
    """A verified fix and the state it was computed for."""

    fix: Fix
    state: int
    title: str
    episodes: list[str] = field(default_factory=list)  # episode record paths, when a model helped


@dataclass
class JobHandle:
    kind: str  # "tests" | "fix"
    snapshot: Snapshot
    cancel: threading.Event
    future: asyncio.Future

    def done(self) -> bool:
        return self.future.done()


# -- one project --------------------------------------------------------------------------------

class Project:
    """A workspace folder: its engine on a worker thread and everything known about its tests.

    Attributes written by the event loop only: ``settings``, ``state``, ``ready``, ``last``,
    the job handles.  The worker thread owns the engine and the merged test state.
    """

    def __init__(self, root: Path, folder: Path | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.folder = Path(os.path.normpath(folder or root))  # as the client spells it
        self.settings = Settings()
        self.state = 0
        self.ready: ReadyFix | None = None
        self.last: TestOutcome | None = None  # the last published run
        self.tests_job: JobHandle | None = None
        self.fix_job: JobHandle | None = None
        self.relay = _Relay()
        self._worker: Worker | None = None
        # owned by the worker thread
        self._ws: Workspace | None = None
        self._engine: Engine | None = None
        self._model: LazyModel | None = None
        self._results: dict[str, TestResult] = {}
        self._coverage = CoverageMap()
        self._complete = False  # the merged picture comes from a whole-suite run, without errors

    @property
    def worker(self) -> Worker:
        if self._worker is None:
            self._worker = Worker(f"frognano-{self.root.name}")
        return self._worker

    # -- paths ----------------------------------------------------------------------------
    def rel(self, path: Path) -> str | None:
        """A path's project-relative posix form; None outside the project."""
        return convert.relative_to(path, self.folder, self.root)

    def path(self, rel: str) -> Path:
        return self.folder / rel

    # -- jobs (called on the event loop) --------------------------------------------------
    def submit(self, kind: str, snapshot: Snapshot, fn: Callable[..., Any], *args: Any,
               cancel: threading.Event | None = None) -> JobHandle:
        cancel = cancel or threading.Event()
        future = asyncio.wrap_future(self.worker.submit(fn, *args, cancel))
        handle = JobHandle(kind, snapshot, cancel, future)
        if kind == "tests":
            self.tests_job = handle
        else:
            self.fix_job = handle
        return handle

    def run_tests(self, files: set[str] | None, snapshot: Snapshot,
                  cancel: threading.Event | None = None) -> JobHandle:
        return self.submit("tests", snapshot, self._tests_job, files, snapshot, cancel=cancel)

    def fix(self, snapshot: Snapshot, sink: ProgressSink | None,
            cancel: threading.Event | None = None) -> JobHandle:
        return self.submit("fix", snapshot, self._fix_job, snapshot, sink, cancel=cancel)

    def close(self) -> concurrent.futures.Future | None:
        """Stop the runner and the model on the worker thread (after the jobs queued before)."""
        for job in (self.tests_job, self.fix_job):
            if job is not None:
                job.cancel.set()
        if self._worker is None:
            return None
        future = self._worker.submit(self._close)
        self._worker.finish()  # the thread ends after closing
        return future

    # -- worker thread --------------------------------------------------------------------
    def _engine_now(self) -> Engine:
        wanted = self.settings
        if self._engine is not None and self._engine.settings == wanted:
            return self._engine
        if self._engine is not None:
            self._engine.close()  # its runner; the model belongs to us and may be kept
            self._engine = None
        if self._model is not None and self._model.spec != wanted.model:
            self._model.close()
            self._model = None
        if wanted.model and self._model is None:
            self._model = LazyModel(wanted.model, lambda msg: self.relay.phase(msg))
        if self._ws is None:
            self._ws = Workspace(self.root)
        self._engine = Engine(self._ws, wanted, progress=self.relay, model=self._model)
        return self._engine

    def _close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._model is not None:
            self._model.close()
            self._model = None
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def _read(self, rel: str) -> str | None:
        try:
            return self._ws.read(rel) if self._ws is not None else None
        except (OSError, UnicodeDecodeError, SyntaxError):
            return None

    def _select(self, files: set[str] | None) -> tuple[list[str] | None, set[str]]:
        """The node ids (and whole test files) to run for changed ``files``; None: everything.

        Everything runs when nothing is known yet, when the last run could not collect, for
        files any test may depend on (conftest, pyproject), and for a source file that no test
        is known to run (a new module, module-level code): better slow than stale.
        """
        if files is None or not self._complete or not self._coverage:
            return None, set()
        whole: set[str] = set()
        ids: set[str] = set()
        for rel in files:
            name = rel.rsplit("/", 1)[-1]
            if name in SUITE_FILES:
                return None, set()
            if not rel.endswith(".py"):
                continue
            covering = self._coverage.tests_covering(rel)
            if is_test_module(rel):
                whole.add(rel)
            elif not covering:
                return None, set()
            ids |= covering
        selection = sorted(whole) + sorted(n for n in ids if convert.nodeid_file(n) not in whole)
        return selection, whole

    def _tests_job(self, files: set[str] | None, snapshot: Snapshot, cancel: threading.Event) -> TestOutcome:
        started = time.monotonic()
        out = TestOutcome(snapshot)
        if cancel.is_set():
            out.cancelled = True
            return out
        try:
            engine = self._engine_now()
            engine.ws.set_overlay({r: t for r, t in snapshot.buffers.items() if overlay_path(self.root, r)})
            engine.sync()
            out.notes = list(engine.notes)
            selection, whole = self._select(files)
            if selection == []:  # only files no test depends on: the picture stays as it is
                run = RunResult(exitstatus=0)
            else:
                run = engine.runner.run(selection, coverage=True, cancel=cancel)
            if selection is not None and not run.cancelled and (
                    run.collect_errors or run.exitstatus == 4
                    or any(n not in run.tests for n in selection if "::" in n)):
                # A selected test is gone or its module does not import: the whole suite tells.
                log.info("partial run incomplete (exit %s); running the whole suite", run.exitstatus)
                selection, whole = None, set()
                run = engine.runner.run(None, coverage=True, cancel=cancel)
        except FrogNanoError as exc:
            out.error = str(exc)
            if "no Python files" in out.error:
                out.idle, out.error = out.error, ""
            return self._finish(out, started)
        if run.cancelled:
            out.cancelled = True
            return out
        out.selection, out.ran = selection, len(run.tests)
        self._merge(run, selection, whole)
        out.run, out.coverage = self._merged_run(run), self._coverage
        if not out.run.tests and not run.collect_errors:
            if run.exitstatus == 4:
                out.error = "pytest refused the arguments: " + _first_error(run.log_tail)
            else:
                out.idle = f"no tests found in {self.root} (pytest collected nothing)"
            return self._finish(out, started)
        out.locations = localize(out.run, out.coverage, self._read,
                                 limit=max(20, engine.settings.max_locations)) if out.run.failing else []
        return self._finish(out, started)

    def _finish(self, out: TestOutcome, started: float) -> TestOutcome:
        ws = self._ws
        out.shadow = str(ws.shadow) if ws is not None and ws.shadow is not None else None
        for rel in convert.needed_files(out.run, out.locations, out.shadow, str(self.root)):
            text = self._read(rel)
            if text is not None:
                out.texts[rel] = text
        out.seconds = time.monotonic() - started
        return out

    def _merge(self, run: RunResult, selection: list[str] | None, whole: set[str]) -> None:
        fresh = CoverageMap.from_run(run).by_test
        if selection is None:
            self._results = dict(run.tests)
            self._coverage = CoverageMap(dict(fresh))
        else:
            # Tests of a test module that ran as a whole and did not report are gone (deleted).
            kept = {n: t for n, t in self._results.items() if convert.nodeid_file(n) not in whole}
            kept.update(run.tests)
            self._results = kept
            by_test = {n: c for n, c in self._coverage.by_test.items() if n in kept}
            by_test.update(fresh)
            self._coverage = CoverageMap(by_test)
        self._complete = not run.collect_errors

    def _merged_run(self, run: RunResult) -> RunResult:
        merged = RunResult(tests=dict(self._results), collect_errors=list(run.collect_errors),
                           collected=list(self._results), exitstatus=run.exitstatus,
                           duration=run.duration, warm=run.warm, log_tail=run.log_tail)
        return merged

    def _fix_job(self, snapshot: Snapshot, sink: ProgressSink | None, cancel: threading.Event) -> FixOutcome:
        started = time.monotonic()
        out = FixOutcome(snapshot)
        if cancel.is_set():
            out.cancelled = True
            return out
        self.relay.sink = sink
        runner = None
        try:
            engine = self._engine_now()
            engine.ws.set_overlay({r: t for r, t in snapshot.buffers.items() if overlay_path(self.root, r)})
            engine.sync()
            # Every test run of the job (baseline, candidates, confirmation, model tool calls)
            # dies as soon as the job is cancelled, not at the next candidate.
            runner = engine.runner
            runner.cancel = cancel
            out.report = engine.fix(None, cancel)
        except FrogNanoError as exc:
            out.error = str(exc)
        finally:
            self.relay.sink = None
            if runner is not None:
                runner.cancel = None
        out.cancelled = cancel.is_set()
        report = out.report
        if not out.cancelled and report is not None and report.diagnosis is not None:
            # The job's baseline ran the whole suite: it refreshes the picture for free.
            run = report.diagnosis.run
            self._merge(run, None, set())
            tests = TestOutcome(snapshot, self._merged_run(run), len(run.tests), None, self._coverage,
                                list(report.diagnosis.locations), notes=list(report.notes))
            out.tests = self._finish(tests, started)
        out.seconds = time.monotonic() - started
        return out


def _first_error(log_tail: str) -> str:
    for line in log_tail.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    return log_tail.strip()[-300:]


# -- debouncing (event loop side) ---------------------------------------------------------------

ALL = None  # "every test", in a debounced request


class Debouncer:
    """Collects the files saved within ``delay`` of each other and fires once for all of them."""

    def __init__(self, fire: Callable[[set[str] | None], None]) -> None:
        self._fire = fire
        self._files: set[str] | None = set()
        self._pending = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending(self) -> bool:
        return self._pending

    def trigger(self, files: set[str] | None, delay: float) -> None:
        if files is None or self._files is None:
            self._files = None
        else:
            self._files |= files
        self._pending = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), self._expire)

    def take(self) -> set[str] | None:
        """The files collected so far (None: everything); the timer is stopped."""
        files = self._files
        self._files, self._pending = set(), False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return files

    def _expire(self) -> None:
        self._timer = None
        if self._pending:
            self._fire(self.take())
