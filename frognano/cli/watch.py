"""``frognano watch``: on every save, run the affected tests; on failure, find a verified fix.

A face beside the command line and the language server (docs/ARCHITECTURE.md §1).  One Engine serves the
whole session (one shadow copy, one warm test server), on the calling thread:

1. the first run is the whole suite with per-test coverage, which gives the coverage map;
2. a burst of saves (debounced) runs the tests covering the changed files, merged into the map;
   a changed test file, conftest or config, or a new, deleted or uncovered module runs them all;
3. when the run fails, the repair engine searches (operators, then model episodes);
4. with ``apply`` the verified fix is written only while the files still hold the text it was
   computed on (invariant 1); ``apply_patch`` keeps an undo copy.

The observer thread only collects changed paths and sets the current job's cancel event: a test
run in flight is killed (its changed files are queued again, so the next run covers them), and
a fix computed against files that changed since is never written, it is computed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from ..config import Settings
from ..errors import EXIT_OK, EXIT_USAGE, ApplyError, FrogNanoError, UsageError
from ..project_paths import Signature, file_signature, ignored_dir, is_virtualenv
from ..repair.apply import apply_patch
from ..repair.engine import Diagnosis, Engine, FixReport, NothingToTest, collect_error
from ..repair.incremental import TREE, Selection, Session, Update, affects_tests
from ..repair.patch import Patch
from ..sandbox.results import RunResult
from ..sandbox.workspace import Workspace, read_source
from .render import FixRenderer

log = logging.getLogger(__name__)

# Opened/closed/attribute events come by the thousand (our own sync reads every file): not changes.
_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
           DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


def watch(ws: Workspace, settings: Settings, *, apply: bool = False, console: Console | None = None,
          stop: threading.Event | None = None, debounce: float = 0.3, keyword: str | None = None,
          as_json: bool = False, out: TextIO | None = None) -> int:
    """Watch ``ws``'s project until Ctrl-C or ``stop``; returns the exit code (0, or 2 when the
    project cannot be watched at all: no Python files, no tests, bad settings).

    ``keyword`` is pytest's ``-k`` for every run.  With ``as_json`` each run prints one JSON
    object on a line of its own to ``out`` (default stdout) and the human lines go to stderr.
    """
    if keyword:  # every run, the incremental ones too, goes through the runner's test_args
        settings = dataclasses.replace(settings, test_args=[*settings.test_args, "-k", keyword])
    from .render import stderr_console

    if console is None:
        console = stderr_console() if as_json else Console(highlight=False, soft_wrap=True)
        errors = stderr_console()
    else:
        errors = console
    emit = _JsonLines(out or sys.stdout) if as_json else None
    watcher = _Watcher(ws, settings, apply=apply, console=console, errors=errors, debounce=debounce,
                       emit=emit)
    return watcher.run(stop or threading.Event())


class _JsonLines:
    """One JSON object per run, flushed at once: a reader acts on each line as it comes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, record: dict) -> None:
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()


class _Overtaken(Exception):
    """A test run killed by a newer change."""


class _Fatal(Exception):
    """The first run cannot happen (no tests, not a Python project): watching is pointless."""

    def __init__(self, exc: FrogNanoError) -> None:
        super().__init__(str(exc))
        self.exit_code = exc.exit_code


class _Progress:
    """Engine progress: a transient bar on a terminal, one dim line per fix phase elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.renderer: FixRenderer | None = None

    def phase(self, title: str, total: int | None = None) -> None:
        if self.renderer is not None:
            self.renderer.phase(title, total)
        if not self.console.is_terminal and not title.startswith("running"):
            self.console.print(f"[dim]  {escape(title)}…[/]")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self.renderer is not None:
            self.renderer.update(done, total, note)


class _Watcher(FileSystemEventHandler):
    """The loop (on the calling thread) and the file-event handler (on the observer's thread)."""

    def __init__(self, ws: Workspace, settings: Settings, *, apply: bool, console: Console,
                 errors: Console, debounce: float, emit: Callable[[dict], None] | None = None) -> None:
        self.ws = ws
        self.settings = settings
        self.apply = apply
        self.console = console
        self.errors = errors  # where an error that ends the watch goes
        self.debounce = debounce
        self.emit = emit  # --json: each run's record goes here instead of the report
        self._shown_failing: tuple[str, ...] = ()  # the failing tests last printed in full
        self.root = str(ws.root)
        self.display = _display(ws.root)
        self.progress = _Progress(console)
        self.engine: Engine | None = None
        self.session: Session | None = None
        self.diagnosis: Diagnosis | None = None  # the last good state of the whole suite
        self._bannered = False
        self._last_report: tuple | None = None
        self._reason = ""  # why the last run ran what it ran, for --json records
        self.halt = threading.Event()  # stop asked for: every wait and the current job end
        # Shared with the observer thread:
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._last_event = 0.0
        self._arrived = threading.Event()
        self._cancel = threading.Event()  # the current job's; a change or a stop sets it
        self._known: dict[str, Signature | None] = {}  # file -> signature when tests last ran on it
        self._venvs: set[str] = set()
        self._observer: Observer | None = None
        self._top_watches: dict[str, object] = {}
        skip = []
        with contextlib.suppress(ValueError):
            skip.append(str(ws.cache.resolve().relative_to(ws.root)))  # a cache inside the project
        self._skip = skip

    # -- the loop (calling thread) ----------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        opened = self.ws.shadow is None
        forward = threading.Thread(target=self._forward_stop, args=(stop,), name="frognano-watch-stop",
                                   daemon=True)
        try:
            if opened:
                self.ws.open()
            self.engine = Engine(self.ws, self.settings, progress=self.progress)
            self.session = Session(self.engine)
            self._start_observer()
            forward.start()
            changed: set[str] | None = None  # None: run the whole suite
            while not self.halt.is_set():
                settled = self._cycle(changed)
                if self.halt.is_set():
                    break
                changed = self._take(wait=settled)
                if changed is None:
                    break
            return EXIT_OK
        except KeyboardInterrupt:
            return EXIT_OK
        except (_Fatal, FrogNanoError, OSError) as exc:  # also: no free shadow, inotify limits
            self.errors.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            return getattr(exc, "exit_code", EXIT_USAGE)
        finally:
            with _sigint_ignored():
                self.halt.set()
                self._cancel.set()
                self._arrived.set()
                if self._observer is not None:
                    self._observer.stop()
                    self._observer.join(timeout=5)
                if self.engine is not None:
                    self.engine.close()
                if opened:
                    self.ws.close()

    def _forward_stop(self, stop: threading.Event) -> None:
        while not self.halt.wait(0.05):
            if stop.is_set():
                self.halt.set()
                self._cancel.set()
                self._arrived.set()
                return

    def _cycle(self, changed: set[str] | None) -> bool:
        """One run and, when it fails, one fix.  False when a change overtook the work, so the
        caller runs again at once on the new state."""
        assert self.engine is not None
        cancel = threading.Event()
        with self._lock:
            self._cancel = cancel
            if self._pending or self.halt.is_set():  # a save between the take and now
                cancel.set()
        renderer = FixRenderer(self.console, show_progress=self.console.is_terminal, out=self.console)
        self.progress.renderer = renderer
        with renderer.live():
            if changed == set() and self.diagnosis is not None:
                diagnosis, run = self.diagnosis, RunResult()  # nothing new: try the fix again
            else:
                try:
                    found = self._run_tests(changed, cancel)
                except _Overtaken:
                    return False
                if found is None:
                    return True
                diagnosis, run = found
            if cancel.is_set():  # the run is already stale: do not search on it
                return False
            if not run.failing and not (changed == set() and diagnosis.failing):
                if self.emit is not None:
                    self.emit({"status": "passing", "failing": [], "fix": None, "ran": len(run.tests),
                               "passed": len(run.passing), "reason": self._reason})
                return True
            # The failing tests now, before the search; not again while they stay the same.
            renderer.diagnosis(diagnosis, show=self.emit is None
                               and tuple(diagnosis.failing) != self._shown_failing)
            self._shown_failing = tuple(diagnosis.failing)
            try:
                report = self.engine.fix(cancel=cancel, diagnosis=diagnosis)
            except FrogNanoError as exc:  # e.g. the test interpreter broke under a candidate
                self.console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
                if self.emit is not None:
                    self.emit({"status": "error", "failing": list(diagnosis.failing), "fix": None,
                               "message": str(exc), "reason": self._reason})
                return True
            if cancel.is_set():
                if not self.halt.is_set():
                    self._overtaken(report)
                return False
            if report.fix is not None and self.apply and not self._apply(report):
                return False
            self._report(renderer, report)
        return True

    def _report(self, renderer: FixRenderer, report: FixReport) -> None:
        """The whole report, or one line when it would repeat the last one word for word."""
        if self.emit is not None:
            self.emit({**report.to_json(), "reason": self._reason})
            return
        key = (report.status, tuple(report.failing), report.fix.patch.diff() if report.fix else None)
        if key == self._last_report and not report.applied and report.status != "error":
            n = len(report.failing)
            what = (f"the same verified fix as above: {report.message}" if report.fix else
                    f"still no verified fix for the {n} failing test{'s' * (n != 1)} above")
            self.console.print(f"[dim]  {escape(what)}[/]", soft_wrap=True)
        else:
            renderer.report(report, Path(self.display))
        self._last_report = key

    def _run_tests(self, changed: set[str] | None,
                   cancel: threading.Event) -> tuple[Diagnosis, RunResult] | None:
        """Run the tests ``changed`` affects.  A save during the run kills it (its results would
        describe files that no longer exist): then the changed files go back to the queue, so
        the next run covers them too, and ``_Overtaken`` is raised."""
        assert self.engine is not None and self.session is not None
        names = ", ".join(sorted(changed)) if changed else ""
        selection = Selection.all(f"all tests ({names} changed)" if names else "all tests")  # until known
        started = time.monotonic()
        try:
            with self.engine.cancelling(cancel):
                self.engine.sync()  # first: the selection diffs the changed files' new text
                selection = self.session.select(changed)
                update = self._update(selection, cancel)
        except (FrogNanoError, _Overtaken) as exc:
            if cancel.is_set():
                self._requeue(changed)
                if not self.halt.is_set():
                    self.console.print(f"{_clock()} [dim]· run stopped by a newer change "
                                       f"({escape(selection.reason)})[/]", soft_wrap=True)
                raise _Overtaken from None
            if isinstance(exc, _Overtaken):
                raise
            if changed is None and isinstance(exc, (NothingToTest, UsageError)):  # nothing to watch
                raise _Fatal(exc) from exc
            # A syntax error while the user types: say so and wait for the next save.
            self._banner()
            self.diagnosis = None
            self.session.forget()  # the next run is a whole one
            self.console.print(f"{_clock()} [bold red]✗ {escape(str(exc))}[/] "
                               f"[dim]· {escape(selection.reason)}[/]", soft_wrap=True)
            self._shown_failing = ()
            if self.emit is not None:
                self.emit({"status": "error", "failing": [], "fix": None, "message": str(exc),
                           "reason": selection.reason})
            return None
        self._banner()
        self.diagnosis = update.diagnosis
        self._reason = update.selection.reason
        self._status(update.ran, update.diagnosis, time.monotonic() - started, update.selection.reason)
        if not update.diagnosis.failing:  # else the search collects it, while it lists candidates
            self.session.prewarm()
        return update.diagnosis, update.ran

    def _update(self, selection: Selection, cancel: threading.Event) -> Update:
        assert self.engine is not None and self.session is not None
        try:
            update = self.session.run(selection, cancel)
        finally:
            if selection.everything:  # what the shadow now holds, even when the run failed
                self._known = {rel: (e.size, e.mtime_ns) for rel, e in self.ws.entries.items()}
        if update.cancelled:
            raise _Overtaken
        if update.ran.collect_errors:  # a module that does not import: no diagnosis to fix from
            raise collect_error(self.ws.root, update.ran, self.engine.runner.python)
        return update

    def _requeue(self, changed: set[str] | None) -> None:
        """Changes whose run was stopped count as not run yet (a whole run stays owed while
        there is no diagnosis: ``_select`` asks for one)."""
        with self._lock:
            for rel in changed or ():
                self._known.pop(rel, None)
                self._pending.add(rel)

    def _banner(self) -> None:
        """Printed with the first result, so that an error that ends the watch is all there is."""
        if not self._bannered:
            self._bannered = True
            what = "verified fixes are applied" if self.apply else "fixes are shown, not applied"
            self.console.print(f"[bold]watching[/] {escape(self.display)} [dim]({what}; Ctrl-C stops)[/]")

    def _status(self, run: RunResult, diagnosis: Diagnosis, seconds: float, why: str) -> None:
        failed, passed = len(run.failing), len(run.passing)
        counts = ([f"[bold red]{failed} failed[/]"] if failed else []) + [f"[green]{passed} passed[/]"]
        if len(run.tests) - failed - passed:
            counts.append(f"{len(run.tests) - failed - passed} skipped")
        mark = "[bold red]✗[/]" if failed else "[bold green]✓[/]"
        older = len([n for n in diagnosis.failing if n not in run.tests])
        also = f" · {older} other test{'s' * (older != 1)} still failing" if older else ""
        self.console.print(f"{_clock()} {mark} {', '.join(counts)} [dim]in {seconds:.2f} s · "
                           f"{escape(why)}{also}[/]", soft_wrap=True)

    def _overtaken(self, report: FixReport) -> None:
        if report.fix is None:
            self.console.print("[dim]  files changed; the fix search starts over[/]")
            return
        edited = _edited_since(self.ws.root, report.fix.patch)
        for rel in edited or ["the project"]:
            self.console.print(f"[yellow]skipped:[/] {escape(rel)} changed while the fix was computed",
                               soft_wrap=True)

    def _apply(self, report: FixReport) -> bool:
        """Write the fix; False when a file changed since it was computed (nothing written)."""
        assert report.fix is not None
        try:
            record = apply_patch(self.ws.root, report.fix.patch)
        except ApplyError as exc:
            edited = _edited_since(self.ws.root, report.fix.patch)
            if not edited:
                report.applied = False
                self.console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
                return True
            for rel in edited:
                self.console.print(f"[yellow]skipped:[/] {escape(rel)} changed while the fix was computed",
                                   soft_wrap=True)
            self._add(edited)  # run again on the new state, even before the observer reports it
            return False
        report.applied, report.undo = True, str(record)
        return True

    def _take(self, *, wait: bool) -> set[str] | None:
        """The files changed since the tests last ran on them, once saves have paused for
        ``debounce`` seconds; with ``wait``, block until there is one.  None on stop."""
        while True:
            if wait:
                self._arrived.wait()
            if self.halt.is_set():
                return None
            while True:  # a burst of saves is one change
                with self._lock:
                    quiet = self._last_event + self.debounce - time.monotonic()
                if quiet <= 0:
                    break
                if self.halt.wait(quiet):
                    return None
            with self._lock:
                paths, self._pending = self._pending, set()
                self._arrived.clear()
            changed = set()
            for rel in paths:
                if rel.endswith(TREE):
                    changed.add(rel)
                    continue
                sig = file_signature(os.path.join(self.root, rel))
                if self._known.get(rel) != sig:  # not a touch-less event, nor one already run
                    self._known[rel] = sig
                    changed.add(rel)
            if changed or not wait:
                return changed

    # -- the observer (its own thread) ------------------------------------------------------
    def _start_observer(self) -> None:
        """Watch the root, and each top-level folder that is not ignored recursively: a
        project's .venv or node_modules would cost thousands of inotify watches."""
        self._observer = Observer()
        self._observer.schedule(self, self.root, recursive=False, event_filter=_EVENTS)
        for entry in sorted(os.scandir(self.root), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and not self._ignored_dir(entry.name) \
                    and entry.name not in self._skip:
                self._watch_top(entry.name)
        self._observer.start()

    def _watch_top(self, name: str) -> None:
        assert self._observer is not None
        with contextlib.suppress(OSError):  # gone again already
            self._top_watches[name] = self._observer.schedule(
                self, os.path.join(self.root, name), recursive=True, event_filter=_EVENTS)

    def _unwatch_top(self, name: str) -> None:
        watch = self._top_watches.pop(name, None)
        if watch is not None and self._observer is not None:
            with contextlib.suppress(Exception):
                self._observer.unschedule(watch)  # type: ignore[arg-type]

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            found = self._relevant(event)
        except Exception:  # noqa: BLE001 - the observer thread must survive anything
            log.exception("ignoring a file event")
            return
        if found:
            self._add(found)

    def _add(self, rels: list[str]) -> None:
        with self._lock:
            self._pending.update(rels)
            self._last_event = time.monotonic()
            cancel = self._cancel
        cancel.set()
        self._arrived.set()

    def _relevant(self, event: FileSystemEvent) -> list[str]:
        """The paths of ``event`` that can change what the tests do (a folder: ``rel/``)."""
        paths = [os.fsdecode(event.src_path)]
        if event.event_type == "moved" and event.dest_path:
            paths.append(os.fsdecode(event.dest_path))
        found = []
        for i, path in enumerate(paths):
            rel = self._rel(path)
            if rel is None or self._ignored_parents(rel):
                continue
            name = rel.rsplit(os.sep, 1)[-1]
            if event.is_directory:
                if self._ignored_dir(rel, name=name):
                    continue
                arriving = event.event_type == "created" or i == 1
                top = os.sep not in rel
                if top and arriving:  # the root's watch is not recursive: each top folder has its own
                    self._watch_top(rel)
                elif top:
                    self._unwatch_top(rel)
                # Files inside a new folder report themselves, except those that were there
                # before its watch (a folder moved in): then any of them may matter.
                if not arriving or (top and self._has_sources(rel)):
                    found.append(rel.replace(os.sep, "/") + TREE)
                continue
            if not affects_tests(rel):
                continue  # this also skips editor swap, backup and lock files: .x.py.swp, x.py~, .#x.py
            rel = rel.replace(os.sep, "/")
            if self._known.get(rel, ...) == file_signature(path):
                continue  # the tests already ran on this (or nothing changed: a touch-less event)
            found.append(rel)
        return found

    def _has_sources(self, rel: str) -> bool:
        if self._ignored_dir(rel):  # a virtualenv being created: pyvenv.cfg comes first
            return False
        for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, rel)):
            here = os.path.relpath(dirpath, self.root)
            dirnames[:] = [d for d in dirnames if not self._ignored_dir(os.path.join(here, d), name=d)]
            if any(affects_tests(f) for f in filenames):
                return True
        return False

    def _rel(self, path: str) -> str | None:
        if not path.startswith(self.root + os.sep):
            return None
        rel = path[len(self.root) + 1:]
        if any(rel == s or rel.startswith(s + os.sep) for s in self._skip):
            return None  # FrogNano's own cache (shadow, undo copies) when it lives inside
        return rel

    def _ignored_parents(self, rel: str) -> bool:
        parts = rel.split(os.sep)[:-1]
        return any(self._ignored_dir(os.sep.join(parts[: i + 1]), name=p) for i, p in enumerate(parts))

    def _ignored_dir(self, rel: str, *, name: str | None = None) -> bool:
        """``project_paths.ignored_dir``, the server's rule too, remembering virtualenvs."""
        if rel in self._venvs:
            return True
        folder = os.path.join(self.root, rel)
        if not ignored_dir(folder, name or os.path.basename(rel)):
            return False
        if is_virtualenv(folder):
            self._venvs.add(rel)  # a virtualenv stays one (its pyvenv.cfg may go first when it is deleted)
            if os.sep not in rel:  # created while watching: its thousands of folders are not ours
                self._unwatch_top(rel)
        return True


# -- helpers ----------------------------------------------------------------------------------

def _edited_since(root: Path, patch: Patch) -> list[str]:
    """The files of ``patch`` whose text is no longer what it was computed against."""
    edited = []
    for e in patch.edits:
        try:
            now = read_source(root / e.path)
        except (OSError, UnicodeDecodeError):
            now = None
        if now != e.before:
            edited.append(e.path)
    return edited


def _clock() -> str:
    return f"[dim]{datetime.now():%H:%M:%S}[/]"


def _display(root: Path) -> str:
    """The project as the user would type it: relative to the working directory when inside."""
    try:
        rel = os.path.relpath(root)
    except ValueError:
        return str(root)
    return str(root) if rel.startswith("..") else rel


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C during clean-up must not leave a traceback or a live test server."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
