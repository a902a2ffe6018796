"""The FrogNano language server (pygls 2): failing tests become diagnostics, verified fixes
become code actions.

Handlers at the bottom are thin: each hands its params to one method of ``FrogNanoServer``.
Long work (test runs, fix searches, loading a model) happens on each project's worker thread
(``jobs.py``); this module only queues it, awaits it and talks to the client.  Conversions to
and from LSP types live in ``convert.py``, settings parsing in ``settings.py``, the wire (frames,
message checks, an answer for every request) in ``transport.py``.

Contract (the VS Code and Neovim clients code against it):

* settings: ``initializationOptions`` and ``workspace/configuration`` section ``frognano``,
  camelCase keys: ``model testArgs timeout maxCandidates maxPairs searchSeconds episodes python``
  (any other ``frognano.config.Settings`` field in camelCase works too), ``autoFix``
  (off | suggest | apply) and ``debounceMs``; they override ``[tool.frognano]``.
* commands: ``frognano.runTests [uri]``, ``frognano.fix [uri]``, ``frognano.applyFix [uri]``,
  ``frognano.toggleAutoFix``, ``frognano.showDiagnosis [uri]``, ``frognano.showEpisode [path]``.
* notification ``frognano/status``: ``{state, failing, autoFix, message}`` on every change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Coroutine
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..sandbox.workspace import read_source
from . import convert, transport
from .convert import SOURCE, Status
from .jobs import (
    SUITE_FILES,
    Debouncer,
    FixOutcome,
    Project,
    ProgressSink,
    ReadyFix,
    Snapshot,
    TestOutcome,
    is_test_module,
)
from .settings import ServerSettings, camel, engine_settings, next_mode, parse_client, plain, section

log = logging.getLogger(__name__)

STATUS = "frognano/status"
CMD_RUN_TESTS = "frognano.runTests"
CMD_FIX = "frognano.fix"
CMD_APPLY_FIX = "frognano.applyFix"
CMD_TOGGLE_AUTO_FIX = "frognano.toggleAutoFix"
CMD_SHOW_DIAGNOSIS = "frognano.showDiagnosis"
CMD_SHOW_EPISODE = "frognano.showEpisode"
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini", ".git")


def _cap(obj: Any, dotted: str) -> Any:
    """A client capability by dotted attribute path; None when any step is missing."""
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class _LspProgress(ProgressSink):
    """Engine progress -> ``$/progress`` reports; called on the worker thread, sent by the loop."""

    def __init__(self, server: FrogNanoServer, token: str) -> None:
        self.server, self.token = server, token
        self.loop = server.loop
        self.title = ""
        self._last = 0.0

    def phase(self, title: str, total: int | None = None) -> None:
        self.title = title
        self._send(title, None, force=True)

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        pct = min(100, int(100 * done / total)) if total else None
        message = f"{self.title}: {done}/{total}" if total else f"{self.title}: {done}"
        self._send(f"{message} {note}".strip(), pct)

    def _send(self, message: str, pct: int | None, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:  # at most ten reports a second
            return
        self._last = now
        report = types.WorkDoneProgressReport(message=message[:200], percentage=pct, cancellable=True)
        try:
            self.loop.call_soon_threadsafe(self.server.work_done_progress.report, self.token, report)
        except RuntimeError:  # the loop is closed: the server is exiting
            pass


class FrogNanoServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("frognano", __version__, protocol_cls=transport.FrogNanoProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.options = ServerSettings()
        self.init_options: dict[str, Any] = {}
        self.pushed_options: dict[str, Any] | None = None  # didChangeConfiguration, for push-only clients
        self.projects: dict[Path, Project] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.dirty: set[str] = set()  # URIs whose buffer differs from the file on disk
        self.published: dict[tuple[Path, str], list[types.Diagnostic]] = {}
        self.progress_cancel: dict[str, threading.Event] = {}
        self.active: Project | None = None  # the project of the last document event
        self._debouncers: dict[Path, Debouncer] = {}
        self._status: Status | None = None
        self._shown: set[str] = set()
        self._noted: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._edit_cache: tuple[tuple, types.WorkspaceEdit] | None = None
        self._disk: dict[str, tuple[tuple[int, int], str | None]] = {}
        self._closed = False
        self.folderless = False  # no workspace folder and no root: projects come from the files

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        # pygls' own stdio loop goes deaf after one bad frame; ours resynchronises (transport.py).
        transport.start_io(self, stdin, stdout)

    # -- small helpers ------------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or "utf-16")

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        log.log({types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}
                .get(kind, logging.INFO), "%s", message)
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def warn_user(self, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
        self.log(message, types.MessageType.Warning)

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        """Run ``coro`` in the background; its failure is logged, never raised into the loop."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                log.error("background job failed", exc_info=exc)
                self.log(f"FrogNano: internal error: {type(exc).__name__}: {exc}", types.MessageType.Error)

        task.add_done_callback(done)
        return task

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Logged, not shown: a malformed message from a client is no reason for a popup.
        log.error("%s: %s", getattr(source, "__name__", source), error)
        try:
            self.window_log_message(types.LogMessageParams(
                type=types.MessageType.Error, message=f"FrogNano: {type(error).__name__}: {error}"))
        except Exception:  # noqa: BLE001 - the transport itself may be gone
            pass

    # -- projects and documents ---------------------------------------------------------------
    def add_project(self, folder: Path) -> Project:
        root = Path(os.path.realpath(folder))
        if root not in self.projects:
            self.projects[root] = Project(root, folder)
        return self.projects[root]

    def locate(self, uri: str) -> tuple[Project, str] | None:
        """The project a document belongs to and its relative path; None outside every project."""
        path = convert.uri_to_path(uri)
        if path is None:
            return None
        for project in sorted(self.projects.values(), key=lambda p: -len(p.folder.parts)):
            rel = project.rel(path)
            if rel is not None:
                return project, rel
        if self.folderless:  # the client opened files, not a folder: each file's own project
            for parent in path.parents:
                if any((parent / m).exists() for m in PROJECT_MARKERS):
                    project = self.add_project(parent)
                    rel = project.rel(path)
                    return (project, rel) if rel else None
        return None

    def uri_of(self, project: Project):  # noqa: ANN201 - convert.UriOf
        open_uris = {}
        for uri in self.workspace.text_documents:
            found = self.locate(uri)
            if found is not None and found[0] is project:
                open_uris[found[1]] = uri
        return lambda rel: open_uris.get(rel) or convert.path_to_uri(project.path(rel))

    def open_documents(self, project: Project) -> dict[str, Any]:
        """The documents of ``project`` open in the editor, by relative path."""
        docs = {}
        for uri, doc in self.workspace.text_documents.items():
            found = self.locate(uri)
            if found is not None and found[0] is project:
                docs[found[1]] = doc
        return docs

    def snapshot(self, project: Project) -> Snapshot:
        buffers, versions = {}, {}
        for rel, doc in self.open_documents(project).items():
            if rel.endswith(".py"):
                buffers[rel] = doc.source
                versions[rel] = doc.version
        return Snapshot(project.state, buffers, versions)

    def disk_text(self, path: Path) -> str | None:
        """A file's text as the engine reads it, cached by (mtime, size)."""
        try:
            st = path.stat()
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._disk.get(str(path))
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            text: str | None = read_source(path)
        except (OSError, UnicodeDecodeError):
            text = None
        self._disk[str(path)] = (key, text)
        return text

    def current_text(self, project: Project, rel: str) -> str | None:
        doc = self.open_documents(project).get(rel)
        return doc.source if doc is not None else self.disk_text(project.path(rel))

    def did_open(self, uri: str, text: str) -> None:
        found = self.locate(uri)
        if found is None:
            log.debug("not in any project: %s", uri)
            return
        project, rel = found
        self.active = project
        if not rel.endswith(".py"):
            return
        if text != self.disk_text(project.path(rel)):
            self.dirty.add(uri)
            project.state += 1
        if is_test_module(rel):
            self.request_tests(project, {rel})

    def did_change(self, uri: str) -> None:
        found = self.locate(uri)
        if found is not None and found[1].endswith(".py"):  # tests see unsaved Python buffers only
            self.dirty.add(uri)
            found[0].state += 1

    def did_save(self, uri: str) -> None:
        found = self.locate(uri)
        if found is None:
            return
        project, rel = found
        self.active = project
        self.dirty.discard(uri)
        if not rel.endswith(".py"):
            project.state += 1  # a data or config file: the tests see it only now that it is saved
        # (a Python buffer was already what the tests saw: saving it changes nothing for them)
        name = rel.rsplit("/", 1)[-1]
        if name == "pyproject.toml":
            self.spawn(self.refresh_settings())
        if rel.endswith(".py") or name in SUITE_FILES:
            self.request_tests(project, {rel})
        else:
            log.debug("not a Python file, no tests to run: %s", rel)

    def did_close(self, uri: str) -> None:
        found = self.locate(uri)
        if found is not None and uri in self.dirty:
            found[0].state += 1  # unsaved changes are gone: the tests see the disk again
        self.dirty.discard(uri)

    def watched_files_changed(self, changes: list[types.FileEvent]) -> None:
        for change in changes:
            found = self.locate(change.uri)
            if found is None:
                continue
            project, rel = found
            if unquote(change.uri) not in self.workspace.text_documents:  # pygls keys them unquoted
                project.state += 1  # changed outside the editor: fixes computed before are stale
            if rel.rsplit("/", 1)[-1] == "pyproject.toml":
                self.spawn(self.refresh_settings())

    def folders_changed(self, event: types.WorkspaceFoldersChangeEvent) -> None:
        for folder in event.removed or []:
            path = convert.uri_to_path(folder.uri)
            project = self.projects.pop(Path(os.path.realpath(path)), None) if path else None
            if project is not None:
                project.close()
                self.clear_diagnostics(project)
        for folder in event.added or []:
            path = convert.uri_to_path(folder.uri)
            if path is not None:
                self.add_project(path)
        self.spawn(self.refresh_settings())

    # -- settings -----------------------------------------------------------------------------
    def initialize(self, params: types.InitializeParams) -> None:
        self.loop = asyncio.get_running_loop()
        self.init_options = section(params.initialization_options)
        self.options, _, _ = parse_client(self.init_options)  # problems are shown once settings are complete
        folders = [convert.uri_to_path(f.uri) for f in params.workspace_folders or []]
        if not folders and params.root_uri:
            folders = [convert.uri_to_path(params.root_uri)]
        elif not folders and params.root_path:
            folders = [Path(params.root_path)]
        for folder in folders:
            if folder is not None:
                self.add_project(folder)
        self.folderless = not self.projects

    async def initialized(self) -> None:
        await self.refresh_settings()
        if _cap(self.client_capabilities, "workspace.did_change_watched_files.dynamic_registration"):
            watchers = [types.FileSystemWatcher(glob_pattern=g) for g in ("**/*.py", "**/pyproject.toml")]
            try:
                await self.client_register_capability_async(types.RegistrationParams(registrations=[
                    types.Registration(id=str(uuid.uuid4()), method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                       register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers))]))
            except Exception as exc:  # noqa: BLE001 - optional: fixes then rely on text checks only
                self.log(f"FrogNano: cannot watch files ({exc})", types.MessageType.Warning)
        names = ", ".join(str(p.folder) for p in self.projects.values()) or "no folder yet"
        self.log(f"FrogNano {__version__} serving {names}; autoFix {self.options.auto_fix}")
        self.status(None, "idle", message="save a Python file to run its tests")

    def configuration_changed(self, settings: Any) -> None:
        pushed = section(settings)
        self.pushed_options = pushed or None
        self.spawn(self.refresh_settings())

    async def refresh_settings(self) -> None:
        """Settings from the client (pulled per folder when it can), over pyproject.toml."""
        projects = list(self.projects.values())
        base = {**self.init_options, **(self.pushed_options or {})}
        raw: list[Any] = [None] * len(projects)
        if projects and _cap(self.client_capabilities, "workspace.configuration"):
            items = [types.ConfigurationItem(scope_uri=convert.path_to_uri(p.folder), section="frognano")
                     for p in projects]
            try:
                raw = list(await self.workspace_configuration_async(types.ConfigurationParams(items=items)))
            except Exception as exc:  # noqa: BLE001 - a client that fails this keeps the init options
                self.log(f"FrogNano: workspace/configuration failed ({exc}); using initializationOptions",
                         types.MessageType.Warning)
        problems: list[str] = []
        options, more, unknown = parse_client({**base, **section(raw[0])} if projects else base)
        problems += more
        for project, answer in zip(projects, raw):
            opts, more, unknown_here = parse_client({**base, **section(answer)})
            problems += [p for p in more if p not in problems]
            unknown += [u for u in unknown_here if u not in unknown]
            settings, more = await asyncio.to_thread(engine_settings, project.root, opts.engine)
            changed = [f"{camel(f.name)}={getattr(settings, f.name)!r}" for f in fields(settings)
                       if getattr(settings, f.name) != getattr(project.settings, f.name)]
            if changed:
                self.log(f"FrogNano: settings of {project.folder.name}: {', '.join(changed)}")
            project.settings = settings
            problems += [f"{p} ({project.folder.name})" for p in more]
        if unknown:
            self.log(f"FrogNano: ignoring unknown settings {', '.join(sorted(set(unknown)))}",
                     types.MessageType.Warning)
        mode_changed = options.auto_fix != self.options.auto_fix
        self.options = options
        for message in problems:
            if message not in self._shown:
                self.warn_user(message)
        self._shown = set(problems)
        if mode_changed and self._status is not None:
            self.status(self.active, self._status.state, self._status.failing, self._status.message)

    # -- status -------------------------------------------------------------------------------
    def status(self, project: Project | None, state: str, failing: int | None = None, message: str = "") -> None:
        if failing is None:
            failing = len(project.last.failing) if project is not None and project.last else 0
        st = Status(state, failing, self.options.auto_fix, message)
        if st != self._status:
            self._status = st
            self.protocol.notify(STATUS, st.to_json())

    def summarize(self, project: Project, outcome: TestOutcome) -> None:
        run = outcome.run
        if outcome.error:
            self.status(project, "error", len(run.failing), outcome.error)
        elif outcome.idle:
            self.status(project, "idle", 0, outcome.idle)
        elif run.collect_errors:
            first = run.collect_errors[0]
            self.status(project, "error", len(run.failing),
                        f"cannot collect {first.nodeid or 'the tests'}: {first.summary}")
        elif run.failing:
            ready = self.valid_fix(project)
            if ready is not None:
                self.status(project, "fixed", len(run.failing), ready.title)
            else:
                self.status(project, "failing", len(run.failing), f"{_plural(len(run.failing), 'failing test')}")
        else:
            self.status(project, "passing", 0, f"all {_plural(len(run.tests), 'test')} pass")

    # -- diagnostics --------------------------------------------------------------------------
    def publish(self, project: Project, outcome: TestOutcome) -> None:
        """Replace the project's diagnostics with the ones of ``outcome`` (clearing the rest)."""
        if outcome.error:
            return  # nothing new is known; the last diagnostics stay
        new: dict[str, list[types.Diagnostic]] = {}
        if not outcome.idle:
            uri_of = self.uri_of(project)
            run = outcome.run
            found = convert.failure_diagnostics(run, outcome.locations, outcome.coverage, outcome.texts,
                                                uri_of, self.encoding)
            errors = convert.collect_diagnostics(run.collect_errors, outcome.shadow, str(project.root),
                                                 outcome.texts, uri_of, self.encoding)
            for rel, diags in [*found.items(), *errors.items()]:
                new.setdefault(rel, []).extend(diags)
        uri_of = self.uri_of(project)
        for key in [k for k in self.published if k[0] == project.root and k[1] not in new]:
            self.published.pop(key)
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri_of(key[1]), diagnostics=[]))
        for rel, diags in new.items():
            self.published[(project.root, rel)] = diags
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri_of(rel), diagnostics=diags))

    def clear_diagnostics(self, project: Project) -> None:
        self.publish(project, TestOutcome(Snapshot(project.state), idle="cleared"))

    # -- test runs ----------------------------------------------------------------------------
    def debouncer(self, project: Project) -> Debouncer:
        if project.root not in self._debouncers:
            self._debouncers[project.root] = Debouncer(lambda files: self.spawn(self.run_tests(project, files)))
        return self._debouncers[project.root]

    def request_tests(self, project: Project, files: set[str] | None) -> None:
        """A save: run the affected tests after ``debounceMs``; the run in flight is dropped."""
        if project.tests_job is not None and not project.tests_job.done():
            project.tests_job.cancel.set()
        fix = project.fix_job
        if fix is not None and not fix.done() and fix.snapshot.state != project.state:
            fix.cancel.set()  # computed for text that no longer exists
        self.debouncer(project).trigger(files, self.options.debounce_ms / 1000)

    async def run_tests(self, project: Project, files: set[str] | None,
                        cancel: threading.Event | None = None) -> TestOutcome | None:
        """Run the tests for ``files`` (None: all) now; None when a newer run superseded it."""
        if project.tests_job is not None and not project.tests_job.done():
            project.tests_job.cancel.set()
        snapshot = self.snapshot(project)
        handle = project.run_tests(files, snapshot, cancel)
        what = "all tests" if files is None else ", ".join(sorted(files))
        self.status(project, "running", message=f"running the tests of {what}")
        try:
            outcome: TestOutcome = await handle.future
        except asyncio.CancelledError:
            handle.cancel.set()
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in a job must not end the server
            log.exception("test job failed")
            self.log(f"FrogNano: the test run failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
            self.status(project, "error", message=f"internal error: {exc}")
            return None
        if outcome.cancelled or project.tests_job is not handle:
            return None  # a newer save took over: only the last run's diagnostics are published
        if outcome.error:
            self.log(f"FrogNano: cannot run the tests of {project.folder}: {outcome.error}", types.MessageType.Error)
        elif outcome.idle:
            self.log(f"FrogNano: {outcome.idle}")
        else:
            self.log(f"FrogNano: ran {_plural(outcome.ran, 'test')} in {outcome.seconds:.2f} s: "
                     f"{_plural(len(outcome.failing), 'failing test')}, {_plural(len(outcome.run.collect_errors), 'collection error')}")
        for note in outcome.notes:
            if note not in self._noted:  # once per session, not at every save
                self._noted.add(note)
                self.log(f"FrogNano: {note}", types.MessageType.Warning)
        if not outcome.error:
            project.last = outcome
            if not outcome.failing:
                project.ready = None  # nothing left to fix
        self.publish(project, outcome)
        self.summarize(project, outcome)
        if (outcome.failing and not outcome.run.collect_errors and self.options.auto_fix != "off"
                and self.valid_fix(project) is None):
            self.spawn(self.fix(project, explicit=False))
        return outcome

    # -- fixes --------------------------------------------------------------------------------
    def valid_fix(self, project: Project) -> ReadyFix | None:
        """The ready fix, if it was computed for exactly what the editor and the disk hold now."""
        ready = project.ready
        if ready is None or ready.state != project.state:
            return None
        for edit in ready.fix.patch.edits:
            if self.current_text(project, edit.path) != edit.before:
                return None
        return ready

    def fix_edit(self, project: Project, ready: ReadyFix) -> types.WorkspaceEdit:
        docs = self.open_documents(project)
        versions = {e.path: docs[e.path].version for e in ready.fix.patch.edits if e.path in docs}
        key = (id(ready), tuple(sorted(versions.items())), self.encoding)
        if self._edit_cache is None or self._edit_cache[0] != key:
            self._edit_cache = (key, convert.workspace_edit(ready.fix, self.uri_of(project), versions, self.encoding))
        return self._edit_cache[1]

    async def begin_progress(self, title: str, cancel: threading.Event) -> _LspProgress | None:
        if not _cap(self.client_capabilities, "window.work_done_progress"):
            return None
        token = f"frognano-{uuid.uuid4()}"
        try:
            await self.work_done_progress.create_async(token)
        except Exception as exc:  # noqa: BLE001 - the job runs without a progress bar
            self.log(f"FrogNano: no progress bar ({exc})", types.MessageType.Warning)
            return None
        self.progress_cancel[token] = cancel
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(
            title=title, cancellable=True, message="starting", percentage=0))
        return _LspProgress(self, token)

    def end_progress(self, sink: _LspProgress | None, message: str) -> None:
        if sink is None:
            return
        self.progress_cancel.pop(sink.token, None)
        self.work_done_progress.tokens.pop(sink.token, None)
        self.work_done_progress.end(sink.token, types.WorkDoneProgressEnd(message=message))

    def cancel_progress(self, token: Any) -> None:
        cancel = self.progress_cancel.get(str(token))
        if cancel is None:
            log.info("cancel for an unknown or finished progress: %s", token)
            return
        cancel.set()
        self.log("FrogNano: fix cancelled by the client")

    def cancel_with_request(self, cancel: threading.Event) -> threading.Event:
        """Set ``cancel`` when the client cancels the request being handled ($/cancelRequest).

        pygls runs a command inside its executeCommand request handler: cancelling the request
        cancels that outer future only, so the job has to watch it to stop as well.
        """
        msg_id = self.protocol.msg_id
        outer = getattr(self.protocol, "_request_futures", {}).get(msg_id) if msg_id is not None else None
        if outer is not None:
            outer.add_done_callback(lambda f: cancel.set() if f.cancelled() else None)
        return cancel

    async def fix(self, project: Project, explicit: bool = True, cancel: threading.Event | None = None) -> dict:
        """Find a verified fix for the current state (a job with progress; cancellable).

        ``explicit``: the user asked (``frognano.fix``), so a failure is also shown, not only
        put in the status bar.
        """
        running = project.fix_job
        if running is not None and not running.done():
            if running.snapshot.state == project.state:
                await asyncio.wait([running.future])  # the same question is being answered
                ready = self.valid_fix(project)
                return {"status": "fixed", "title": ready.title} if ready else {"status": "unfixed"}
            running.cancel.set()
        ready = self.valid_fix(project)
        if ready is not None:  # already known for exactly these files
            return {"status": "fixed", "title": ready.title}
        snapshot = self.snapshot(project)
        cancel = cancel or threading.Event()
        sink = await self.begin_progress("FrogNano: fixing", cancel)
        handle = project.fix(snapshot, sink, cancel)
        self.status(project, "fixing", message="searching for a fix")
        try:
            outcome: FixOutcome = await handle.future
        except asyncio.CancelledError:  # the client cancelled the request itself
            handle.cancel.set()
            self.end_progress(sink, "cancelled")
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("fix job failed")
            self.end_progress(sink, "failed")
            self.log(f"FrogNano: the fix job failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
            self.status(project, "error", message=f"internal error: {exc}")
            return {"status": "error", "message": str(exc)}
        result = self.fix_done(project, outcome)
        self.end_progress(sink, result.get("title") or result.get("message") or result["status"])
        if explicit and result["status"] in ("unfixed", "error", "stale"):
            # Asked for by the user: say why there is nothing (automatic jobs use the status bar).
            self.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning if result["status"] == "error" else types.MessageType.Info,
                message=f"FrogNano: {result['message']}"))
        if result["status"] == "fixed" and self.options.auto_fix == "apply":
            result.update(await self.apply_fix(project))
        return result

    def fix_done(self, project: Project, outcome: FixOutcome) -> dict:
        current = outcome.snapshot.state == project.state
        if outcome.tests is not None and current and not outcome.cancelled:
            project.last = outcome.tests
            self.publish(project, outcome.tests)
        failing = len(project.last.failing) if project.last else 0
        if outcome.cancelled:
            self.status(project, "failing" if failing else "idle", failing, "fix cancelled")
            return {"status": "cancelled", "message": "fix cancelled"}
        report = outcome.report
        if outcome.error or report is None or report.status == "error":
            message = outcome.error or (report.message if report else "no report")
            self.log(f"FrogNano: no fix: {message}", types.MessageType.Error)
            self.status(project, "error", failing, message)
            return {"status": "error", "message": message}
        if report.status == "passing":
            project.ready = None
            self.status(project, "passing", 0, report.message)
            return {"status": "passing", "message": report.message}
        if report.status != "fixed" or report.fix is None:
            self.log(f"FrogNano: {report.message}")
            self.status(project, "failing", failing, report.message)
            return {"status": "unfixed", "message": report.message}
        title = convert.fix_title(report.fix)
        episodes = [str(e.record) for e in report.episodes if e.record]
        ready = ReadyFix(report.fix, outcome.snapshot.state, title, episodes)
        project.ready = ready
        if not current or self.valid_fix(project) is None:
            project.ready = None
            message = "the files changed while the fix was computed; save to run again"
            self.log(f"FrogNano: fix dropped: {message}")
            self.status(project, "failing", failing, message)
            return {"status": "stale", "message": message}
        self.log(f"FrogNano: verified fix ready: {title} (in {outcome.seconds:.1f} s)\n{report.fix.patch.diff()}")
        self.status(project, "fixed", failing, title)
        return {"status": "fixed", "title": title, "diff": report.fix.patch.diff(), "files": report.fix.patch.files}

    async def apply_fix(self, project: Project) -> dict:
        """Send the ready fix as versioned edits; a rejected edit is dropped, never forced."""
        ready = self.valid_fix(project)
        if ready is None:
            return {"applied": False, "reason": "no verified fix for the current files"}
        if not _cap(self.client_capabilities, "workspace.apply_edit"):
            return {"applied": False, "reason": "the client cannot apply edits"}
        edit = self.fix_edit(project, ready)
        reason = ""
        try:
            result = await self.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=ready.title))
            applied = bool(result and result.applied)
            reason = (result.failure_reason or "") if result else "no answer"
        except Exception as exc:  # noqa: BLE001 - an error answer is a rejection
            applied, reason = False, str(exc)
        project.ready = None  # applied, or refused: either way it is not offered again
        failing = len(project.last.failing) if project.last else 0
        if applied:
            self.log(f"FrogNano: applied {ready.title}")
            self.status(project, "fixed", failing, f"applied: {ready.title}; save to run the tests")
            return {"applied": True, "title": ready.title}
        self.log(f"FrogNano: the editor rejected the fix ({reason or 'no reason given'}); it was dropped",
                 types.MessageType.Warning)
        self.status(project, "failing", failing, "the editor rejected the fix")
        return {"applied": False, "reason": reason or "rejected by the editor"}

    # -- requests -----------------------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = params.text_document.uri
        found = self.locate(uri)
        if found is None or not found[1].endswith(".py"):
            return None
        project, rel = found
        ours = [d for d in params.context.diagnostics if d.source == SOURCE]
        if not ours:
            ours = [d for d in self.published.get((project.root, rel), [])
                    if convert.ranges_touch(d.range, params.range)]
        if not ours:
            return []
        actions: list[types.CodeAction] = []
        ready = self.valid_fix(project)
        if ready is not None:
            actions.append(types.CodeAction(title=ready.title, kind=types.CodeActionKind.QuickFix,
                                            diagnostics=ours, is_preferred=True, edit=self.fix_edit(project, ready)))
            for record in ready.episodes:
                actions.append(types.CodeAction(
                    title="Show the model episode (FrogNano)", kind=types.CodeActionKind.QuickFix,
                    command=types.Command(title="Show episode", command=CMD_SHOW_EPISODE, arguments=[record])))
        else:
            actions.append(types.CodeAction(title="Fix with FrogNano", kind=types.CodeActionKind.QuickFix,
                                            diagnostics=ours, command=types.Command(title="Fix with FrogNano", command=CMD_FIX, arguments=[uri])))
        actions.append(types.CodeAction(title="Show diagnosis", kind=types.CodeActionKind.QuickFix, diagnostics=ours,
                                        command=types.Command(title="Show diagnosis", command=CMD_SHOW_DIAGNOSIS, arguments=[uri])))
        actions.append(types.CodeAction(title="Run tests", kind=types.CodeActionKind.QuickFix, diagnostics=ours,
                                        command=types.Command(title="Run tests", command=CMD_RUN_TESTS, arguments=[uri])))
        return actions

    def hover(self, params: types.HoverParams) -> types.Hover | None:
        found = self.locate(params.text_document.uri)
        if found is None:
            return None
        project, rel = found
        last = project.last
        if last is None or not rel.endswith(".py"):
            return None
        text = convert.hover_markdown(rel, params.position.line + 1, last.run, last.locations, last.texts)
        if text is None:
            return None
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text))

    # -- commands -----------------------------------------------------------------------------
    def command_target(self, args: tuple) -> tuple[Project, str | None]:
        """The project (and file) a command is about: its optional URI argument, else the
        project of the last document event, else the only project."""
        uri = None
        if args:
            first = plain(args[0])
            if isinstance(first, dict):
                document = first.get("textDocument")
                first = first.get("uri") or (document.get("uri") if isinstance(document, dict) else None)
            if not isinstance(first, str):
                raise JsonRpcInvalidParams(f"expected a document URI, got {args[0]!r}")
            uri = first
        if uri is not None:
            found = self.locate(uri)
            if found is None:
                raise JsonRpcInvalidParams(f"{uri} is not in a FrogNano project")
            return found
        project = self.active or next(iter(self.projects.values()), None)
        if project is None:
            raise JsonRpcInvalidParams("no project: open a folder first")
        return project, None

    async def command_run_tests(self, args: tuple) -> dict:
        project, rel = self.command_target(args)
        files = self.debouncer(project).take()  # saves waiting for their debounce join this run
        if rel is None or files is None:
            files = None
        else:
            files |= {rel}
        outcome = await self.run_tests(project, files, self.cancel_with_request(threading.Event()))
        if outcome is None:
            return {"state": "cancelled"}
        return {"state": self._status.state if self._status else "idle", "failing": outcome.failing,
                "passed": len(outcome.run.passing), "ran": outcome.ran, "message": outcome.error or outcome.idle}

    async def command_fix(self, args: tuple) -> dict:
        project, _ = self.command_target(args)
        return await self.fix(project, explicit=True, cancel=self.cancel_with_request(threading.Event()))

    async def command_apply_fix(self, args: tuple) -> dict:
        project, _ = self.command_target(args)
        return await self.apply_fix(project)

    def command_toggle_auto_fix(self) -> str:
        self.options.auto_fix = next_mode(self.options.auto_fix)
        self.log(f"FrogNano: autoFix is now {self.options.auto_fix}")
        state = self._status or Status("idle")
        self.status(self.active, state.state, state.failing, state.message)
        project = self.active or next(iter(self.projects.values()), None)
        if (self.options.auto_fix != "off" and project is not None and project.last is not None
                and project.last.failing and (project.fix_job is None or project.fix_job.done())):
            self.spawn(self.fix(project, explicit=False))
        return self.options.auto_fix

    def command_show_diagnosis(self, args: tuple) -> str:
        project, _ = self.command_target(args)
        last = project.last
        if last is None:
            text = "FrogNano has not run the tests yet: save a Python file or run frognano.runTests"
        else:
            text = convert.diagnosis_text(last.run, last.locations, last.notes)
            ready = self.valid_fix(project)
            if ready is not None:
                text += f"\nverified fix: {ready.title}\n{ready.fix.patch.diff()}"
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=text[:2000]))
        self.log(text)
        return text

    async def command_show_episode(self, args: tuple) -> bool:
        if not args or not isinstance(args[0], str):
            raise JsonRpcInvalidParams("expected the path of an episode record")
        path = Path(args[0]).expanduser()
        if not path.is_file():
            raise JsonRpcInvalidParams(f"{path}: no such episode record")
        result = await self.window_show_document_async(
            types.ShowDocumentParams(uri=convert.path_to_uri(path.resolve()), take_focus=True))
        return bool(result and result.success)

    # -- lifecycle ----------------------------------------------------------------------------
    async def close_projects(self, timeout: float = 5.0) -> None:
        futures = [f for f in (p.close() for p in self.projects.values()) if f is not None]
        if futures:
            await asyncio.wait([asyncio.wrap_future(f) for f in futures], timeout=timeout)
        self._closed = True

    def shutdown(self) -> None:
        """The transport ended (exit, or the client went away): stop runners and models."""
        if not self._closed:
            self._closed = True
            futures = [f for f in (p.close() for p in self.projects.values()) if f is not None]
            for f in futures:
                try:
                    f.result(timeout=3)
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
        super().shutdown()


# -- handlers: thin by design ---------------------------------------------------------------------

def _initialize(ls: FrogNanoServer, params: types.InitializeParams) -> None:
    ls.initialize(params)


async def _initialized(ls: FrogNanoServer, params: types.InitializedParams) -> None:
    await ls.initialized()


def _did_open(ls: FrogNanoServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.did_open(params.text_document.uri, params.text_document.text)


def _did_change(ls: FrogNanoServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.did_change(params.text_document.uri)


def _did_save(ls: FrogNanoServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.did_save(params.text_document.uri)


def _did_close(ls: FrogNanoServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.did_close(params.text_document.uri)


def _did_change_configuration(ls: FrogNanoServer, params: types.DidChangeConfigurationParams) -> None:
    ls.configuration_changed(params.settings)


def _did_change_watched_files(ls: FrogNanoServer, params: types.DidChangeWatchedFilesParams) -> None:
    ls.watched_files_changed(params.changes)


def _did_change_folders(ls: FrogNanoServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    ls.folders_changed(params.event)


def _code_action(ls: FrogNanoServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    return ls.code_actions(params)


def _hover(ls: FrogNanoServer, params: types.HoverParams) -> types.Hover | None:
    return ls.hover(params)


def _progress_cancel(ls: FrogNanoServer, params: types.WorkDoneProgressCancelParams) -> None:
    ls.cancel_progress(params.token)


async def _shutdown(ls: FrogNanoServer, params: None) -> None:
    await ls.close_projects()


async def _cmd_run_tests(ls: FrogNanoServer, *args: Any) -> dict:
    return await ls.command_run_tests(args)


async def _cmd_fix(ls: FrogNanoServer, *args: Any) -> dict:
    return await ls.command_fix(args)


async def _cmd_apply_fix(ls: FrogNanoServer, *args: Any) -> dict:
    return await ls.command_apply_fix(args)


def _cmd_toggle_auto_fix(ls: FrogNanoServer, *args: Any) -> str:
    return ls.command_toggle_auto_fix()


def _cmd_show_diagnosis(ls: FrogNanoServer, *args: Any) -> str:
    return ls.command_show_diagnosis(args)


async def _cmd_show_episode(ls: FrogNanoServer, *args: Any) -> bool:
    return await ls.command_show_episode(args)


def create_server() -> FrogNanoServer:
    server = FrogNanoServer()
    features: list[tuple[str, Any, Any]] = [
        (types.INITIALIZE, _initialize, None),
        (types.INITIALIZED, _initialized, None),
        (types.TEXT_DOCUMENT_DID_OPEN, _did_open, None),
        (types.TEXT_DOCUMENT_DID_CHANGE, _did_change, None),
        (types.TEXT_DOCUMENT_DID_SAVE, _did_save, types.SaveOptions(include_text=False)),
        (types.TEXT_DOCUMENT_DID_CLOSE, _did_close, None),
        (types.WORKSPACE_DID_CHANGE_CONFIGURATION, _did_change_configuration, None),
        (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, _did_change_watched_files, None),
        (types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, _did_change_folders, None),
        (types.TEXT_DOCUMENT_CODE_ACTION, _code_action,
         types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])),
        (types.TEXT_DOCUMENT_HOVER, _hover, None),
        (types.WINDOW_WORK_DONE_PROGRESS_CANCEL, _progress_cancel, None),
        (types.SHUTDOWN, _shutdown, None),
    ]
    for method, handler, options in features:
        server.feature(method, options)(handler)
    for name, handler in [(CMD_RUN_TESTS, _cmd_run_tests), (CMD_FIX, _cmd_fix), (CMD_APPLY_FIX, _cmd_apply_fix),
                          (CMD_TOGGLE_AUTO_FIX, _cmd_toggle_auto_fix), (CMD_SHOW_DIAGNOSIS, _cmd_show_diagnosis),
                          (CMD_SHOW_EPISODE, _cmd_show_episode)]:
        server.command(name)(handler)
    return server


def run_stdio() -> None:
    """``frognano serve``: the language server over stdin/stdout."""
    create_server().start_io()
