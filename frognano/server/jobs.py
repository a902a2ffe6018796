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
from typing import Any, Literal

from ..config import Settings
from ..errors import FrogNanoError
from ..progress import Progress, Relay
from ..project_paths import ignored_path
from ..repair.engine import Diagnosis, Engine, FixReport, NothingToTest
from ..repair.incremental import Selection, Session, Update
from ..repair.localize import Location
from ..runtime.lazy import LazyModel
from ..sandbox.results import RunResult
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from . import convert
from .offer import Offer

log = logging.getLogger(__name__)


def overlay_path(root: Path, rel: str) -> bool:
    """An open document the tests should see instead of the file on disk: a Python file of
    the project itself (not under a virtualenv or cache, not a symlink, which is never edited)."""
    if not rel.endswith(".py") or ignored_path(root, rel):
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


# -- snapshots and outcomes ---------------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    state: int  # the project's state counter when the job was queued
    buffers: dict[str, str] = field(default_factory=dict)  # open .py documents, by relative path
    versions: dict[str, int] = field(default_factory=dict)  # their LSP versions


# ran: the picture is current; idle: nothing to run (no Python files, no tests); error: the
# run could not happen (pytest refused the arguments, a crashed interpreter); cancelled: a newer
# save took over and nothing changed.
RunState = Literal["ran", "idle", "error", "cancelled"]


@dataclass
class TestOutcome:
    """One test run, merged into the project's picture of the suite."""

    __test__ = False

    snapshot: Snapshot
    run: RunResult = field(default_factory=RunResult)  # every known test (this run merged in)
    ran: int = 0  # tests that ran this time
    selection: Selection = field(default_factory=Selection.all)  # what ran
    coverage: CoverageMap = field(default_factory=CoverageMap)
    locations: list[Location] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # files the diagnostics point into
    shadow: str | None = None
    state: RunState = "ran"
    message: str = ""  # why, when the state is idle or error
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failing(self) -> list[str]:
        return self.run.failing

    @property
    def cancelled(self) -> bool:
        return self.state == "cancelled"


@dataclass
class FixOutcome:
    snapshot: Snapshot
    report: FixReport | None = None
    tests: TestOutcome | None = None  # the fix job's own full baseline run
    cancelled: bool = False
    error: str | None = None  # the job could not run (bad settings, a model that does not load)
    seconds: float = 0.0
    start: str = ""  # what the search started from, for the log: the last run's picture or a whole run


JobKind = Literal["tests", "fix"]


@dataclass
class JobHandle:
    kind: JobKind
    snapshot: Snapshot
    cancel: threading.Event
    future: asyncio.Future

    def done(self) -> bool:
        return self.future.done()


# -- one project --------------------------------------------------------------------------------

class Project:
    """A workspace folder: its engine on a worker thread and everything known about its tests.

    Attributes written by the event loop only: ``settings``, ``state``, ``offer``, ``last``,
    the job handles.  The worker thread owns the engine and the merged test state.
    """

    def __init__(self, root: Path, folder: Path | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.folder = Path(os.path.normpath(folder or root))  # as the client spells it
        self.settings = Settings()
        self.state = 0
        self.offer = Offer()  # the verified fix and its lifecycle (offer.py)
        self.last: TestOutcome | None = None  # the last published run
        self.tests_job: JobHandle | None = None
        self.fix_job: JobHandle | None = None
        self.relay = Relay()  # the running fix job's $/progress, if any
        self._worker: Worker | None = None
        # owned by the worker thread
        self._ws: Workspace | None = None
        self._engine: Engine | None = None
        self._model: LazyModel | None = None
        self._session: Session | None = None

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
    def submit(self, kind: JobKind, snapshot: Snapshot, fn: Callable[..., Any], *args: Any,
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

    def fix(self, snapshot: Snapshot, sink: Progress | None,
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
            self._model = LazyModel(wanted.model, self.relay, lanes=wanted.lanes)
        if self._ws is None:
            self._ws = Workspace(self.root)
        self._engine = Engine(self._ws, wanted, progress=self.relay, model=self._model)
        # A new runner may collect differently (other test_args): the next run is a whole one.
        self._session = Session(self._engine)
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

    def _tests_job(self, files: set[str] | None, snapshot: Snapshot, cancel: threading.Event) -> TestOutcome:
        started = time.monotonic()
        out = TestOutcome(snapshot)
        if cancel.is_set():
            out.state = "cancelled"
            return out
        try:
            engine = self._engine_now()
            self._sync(engine, snapshot)
            out.notes = list(engine.notes)
            assert self._session is not None
            update = self._session.run(self._session.select(files), cancel)
        except NothingToTest as exc:
            out.state, out.message = "idle", str(exc)
            return self._finish(out, started)
        except FrogNanoError as exc:
            out.state, out.message = "error", str(exc)
            return self._finish(out, started)
        if update.cancelled:
            out.state = "cancelled"
            return out
        # Next on this thread, once the outcome is published: the warm session for later saves.
        self.worker.submit(self._warm_up, self._session)
        return self._outcome(snapshot, update, started)

    def _warm_up(self, session: Session) -> None:
        if session is self._session and self._engine is not None:  # not replaced or closed since
            session.prewarm()

    def _sync(self, engine: Engine, snapshot: Snapshot) -> None:
        """The shadow copy as the snapshot saw the project: disk, with open buffers overlaid."""
        engine.ws.set_overlay({r: t for r, t in snapshot.buffers.items() if overlay_path(self.root, r)})
        engine.sync()

    def _finish(self, out: TestOutcome, started: float) -> TestOutcome:
        ws = self._ws
        out.shadow = str(ws.shadow) if ws is not None and ws.shadow is not None else None
        for rel in convert.needed_files(out.run, out.locations, out.shadow, str(self.root)):
            text = self._read(rel)
            if text is not None:
                out.texts[rel] = text
        out.seconds = time.monotonic() - started
        return out

    def _fix_job(self, snapshot: Snapshot, sink: Progress | None, cancel: threading.Event) -> FixOutcome:
        started = time.monotonic()
        out = FixOutcome(snapshot)
        if cancel.is_set():
            out.cancelled = True
            return out
        self.relay.target = sink
        reused, update = False, None
        try:
            engine = self._engine_now()
            self._sync(engine, snapshot)
            with engine.cancelling(cancel):
                diagnosis, update = self._picture(cancel)
                if update is not None and update.cancelled:
                    out.cancelled = True
                    return out
                reused = diagnosis is not None
                update = update if reused else None  # the fix's own baseline is the run to publish
                out.start = ("a whole run of the suite" if not reused else "the last run's results" if update is None
                             else f"the last run's results, after running {update.selection.reason}")
                out.report = engine.fix(None, cancel, diagnosis=diagnosis, started=started)
        except FrogNanoError as exc:
            out.error = str(exc)
        finally:
            self.relay.target = None
        out.cancelled = cancel.is_set()
        report = out.report
        if not out.cancelled and report is not None and report.diagnosis is not None and self._session:
            if not reused:  # the job's baseline ran the whole suite: it refreshes the picture for free
                self._session.adopt(report.diagnosis)
            picture = self._session.diagnosis
            assert picture is not None
            # Published with the search's ranking of the suspicious lines (``refine``).
            ran = len(update.ran.tests) if update is not None else 0 if reused else len(report.diagnosis.run.tests)
            tests = TestOutcome(snapshot, picture.run, ran, update.selection if update is not None else Selection.all(),
                                picture.coverage, list(report.diagnosis.locations), notes=list(report.notes))
            out.tests = self._finish(tests, started)
        out.seconds = time.monotonic() - started
        return out

    def _picture(self, cancel: threading.Event) -> tuple[Diagnosis | None, Update | None]:
        """The diagnosis a fix job starts from: the session's picture of the suite, after
        running only the tests the changes since it affect (none when it is current); None
        before the first whole run, or when a module does not collect (the fix job's own
        baseline then runs the whole suite and names the error)."""
        session = self._session
        if session is None or not session.known:
            return None, None
        update = session.refresh(cancel)
        if update is not None and (update.cancelled or update.ran.collect_errors):
            return None, update
        return (update.diagnosis if update is not None else session.diagnosis), update

    def _outcome(self, snapshot: Snapshot, update: Update, started: float) -> TestOutcome:
        out = TestOutcome(snapshot)
        out.selection, out.ran, out.notes = update.selection, len(update.ran.tests), update.notes
        out.run, out.coverage = update.diagnosis.run, update.diagnosis.coverage
        out.locations = update.diagnosis.locations
        return self._finish(out, started)


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
