"""The server object: what the handlers share, and the few helpers every feature uses.

The handlers themselves live by feature (``documents``, ``configuration``, ``diagnostics``,
``fixes``, ``progress``, ``commands``) as functions taking this server first, the shape of
jedi-language-server and the pygls examples; ``app.py`` wires them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..project_paths import Signature, file_signature
from ..sandbox.scope import project_root, refusal
from ..sandbox.workspace import read_source
from . import convert, transport
from .convert import Status
from .jobs import Debouncer, Project, Snapshot
from .settings import ServerSettings

log = logging.getLogger(__name__)

STATUS = "frognano/status"
EXIT_WAIT = 0.5  # seconds the process waits for the projects to close on its way out
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini", ".git")


def capability(obj: Any, dotted: str) -> Any:
    """A client capability by dotted attribute path; None when any step is missing."""
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class FrogNanoServer(LanguageServer):
    """The state of one editor session: projects, open documents, settings, the status."""

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
        self.debouncers: dict[Path, Debouncer] = {}
        self.last_status: Status | None = None
        self.shown: set[str] = set()  # settings problems already shown
        self.noted: set[str] = set()  # project notes already logged
        self.edit_cache: tuple[tuple, types.WorkspaceEdit] | None = None
        # Commands' work under way, by (command, project root): (job id, its task, the project
        # state it started for); a second request for the same work joins the first.
        self.command_jobs: dict[tuple[str, Path], tuple[str, asyncio.Task, int]] = {}
        self.job_count = 0
        # Called after every published test run (fixes.after_run, wired in app.py): diagnostics
        # run the tests, fixes decide whether to search, and neither imports the other for it.
        self.after_run: Callable[[Project, Any], None] | None = None
        self.folderless = False  # no workspace folder and no root: projects come from the files
        # Set once the first settings have arrived: a save before that would run the tests with
        # the defaults (another interpreter, say), then again, from scratch, with the settings.
        self.settings_ready: asyncio.Event | None = None
        self._tasks: set[asyncio.Task] = set()
        self._disk: dict[str, tuple[Signature, str | None]] = {}
        self._closed = False
        self._reporting = False  # report_server_error is sending its log message

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        # pygls' own stdio loop goes deaf after one bad frame; ours resynchronises (transport.py).
        transport.start_io(self, stdin, stdout)

    # -- talking to the client ---------------------------------------------------------------
    @property
    def encoding(self) -> str:
        enc = self.workspace.position_encoding
        return str(getattr(enc, "value", enc) or "utf-16")

    def can(self, dotted: str) -> bool:
        """Whether the client announced capability ``dotted`` (``workspace.apply_edit``)."""
        return bool(capability(self.client_capabilities, dotted))

    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        log.log({types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}
                .get(kind, logging.INFO), "%s", message)
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def warn_user(self, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
        self.log(message, types.MessageType.Warning)

    def status(self, project: Project | None, state: convert.State, failing: int | None = None,
               message: str = "") -> None:
        """Send ``frognano/status`` when it changed."""
        if failing is None:
            failing = len(project.last.failing) if project is not None and project.last else 0
        st = Status(state, failing, self.options.auto_fix, message)
        if st != self.last_status:
            self.last_status = st
            self.protocol.notify(STATUS, st.to_json())

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
        if self._reporting:  # the log message itself failed to send: pygls would report that again
            return
        self._reporting = True
        try:
            self.window_log_message(types.LogMessageParams(
                type=types.MessageType.Error, message=f"FrogNano: {type(error).__name__}: {error}"))
        except Exception:  # noqa: BLE001 - the transport itself may be gone
            pass
        finally:
            self._reporting = False

    # -- projects and documents ---------------------------------------------------------------
    def add_project(self, folder: Path) -> Project | None:
        """The project of a folder; None (said once, as a message) for a folder that is no
        project FrogNano may copy: ``/``, a home folder, a big tree without a marker."""
        folder = project_root(folder)  # a package folder's tests live above it (scope.project_root)
        root = Path(os.path.realpath(folder))
        if root not in self.projects:
            why = refusal(folder)
            if why is not None:
                if why not in self.shown:
                    self.shown.add(why)
                    self.warn_user(f"FrogNano: {why}")
                return None
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
                    if project is None:
                        return None
                    rel = project.rel(path)
                    return (project, rel) if rel else None
        return None

    def open_documents(self, project: Project) -> dict[str, Any]:
        """The documents of ``project`` open in the editor, by relative path."""
        docs = {}
        for uri, doc in self.workspace.text_documents.items():
            found = self.locate(uri)
            if found is not None and found[0] is project:
                docs[found[1]] = doc
        return docs

    def uri_of(self, project: Project) -> convert.UriOf:
        """Relative path -> URI: the open document's own URI where there is one."""
        open_uris = {}
        for uri in self.workspace.text_documents:  # pygls' keys: what the client matches against
            found = self.locate(uri)
            if found is not None and found[0] is project:
                open_uris[found[1]] = uri
        return lambda rel: open_uris.get(rel) or convert.path_to_uri(project.path(rel))

    def snapshot(self, project: Project) -> Snapshot:
        buffers, versions = {}, {}
        for rel, doc in self.open_documents(project).items():
            if rel.endswith(".py"):
                buffers[rel] = doc.source
                versions[rel] = doc.version
        return Snapshot(project.state, buffers, versions)

    def disk_text(self, path: Path) -> str | None:
        """A file's text as the engine reads it, cached by its signature (size, mtime)."""
        key = file_signature(path)
        if key is None:
            return None
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

    def command_target(self, uri: str | None) -> tuple[Project, str | None]:
        """The project (and file) a request is about: ``uri``'s, else the project of the last
        document event, else the only project.  ``LookupError`` when there is none."""
        if uri is not None:
            found = self.locate(uri)
            if found is None:
                raise LookupError(f"{uri} is not in a FrogNano project")
            return found
        project = self.active or next(iter(self.projects.values()), None)
        if project is None:
            raise LookupError("no project: open a folder first")
        return project, None

    # -- lifecycle ----------------------------------------------------------------------------
    async def close_projects(self, timeout: float = 5.0) -> None:
        futures = [f for f in (p.close() for p in list(self.projects.values())) if f is not None]
        if futures:
            await asyncio.wait([asyncio.wrap_future(f) for f in futures], timeout=timeout)
        self._closed = True

    def shutdown(self, timeout: float = EXIT_WAIT) -> None:
        """The transport ended (exit, or the client went away): stop runners and models,
        waiting ``timeout`` seconds in all.  After ``shutdown`` they are closed already; on an
        ``exit`` without it, the jobs are cancelled and whatever has not closed by then goes
        with the process (the workers are daemon threads, and each run's processes die with
        their parent)."""
        if not self._closed:
            self._closed = True
            futures = [f for f in (p.close() for p in list(self.projects.values())) if f is not None]
            if futures:
                concurrent.futures.wait(futures, timeout=timeout)
        super().shutdown()
