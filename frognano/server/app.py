"""The FrogNano language server (pygls 2): failing tests become diagnostics, verified fixes
become code actions.

This module only wires handlers to LSP methods.  They live by feature, each a function taking
the server first: ``documents`` (open/change/save/close, watched files, folders),
``configuration`` (initialize, settings), ``diagnostics`` (test runs, diagnostics, hover, status),
``fixes`` (fix jobs, code actions, applying), ``progress`` ($/progress and cancelling),
``commands`` (executeCommand, typed replies in ``replies``).  ``state`` holds the server object
they share.  Long work (test runs, fix searches, loading a model) happens on each project's
worker thread (``jobs.py``).  Conversions to and from LSP types live in ``convert.py``, settings
parsing in ``settings.py``, the wire (frames, message checks, an answer for every request) in
``transport.py``.

Contract (the VS Code and Neovim clients code against it):

* settings: ``initializationOptions`` and ``workspace/configuration`` section ``frognano``,
  camelCase keys: ``model testArgs timeout maxCandidates maxPairs searchSeconds episodes python``
  (any other ``frognano.config.Settings`` field in camelCase works too), ``autoFix``
  (off | suggest | apply) and ``debounceMs``; they override ``[tool.frognano]``.
* commands: ``frognano.runTests [uri...]`` (the tests those files affect; the verified fix's
  code action carries it, so the tests re-run once the client applied the edit),
  ``frognano.fix [uri]``, ``frognano.applyFix [uri]``, ``frognano.toggleAutoFix``,
  ``frognano.undoFix [uri]`` (``frognano undo``: a fix applied in the editor is recorded once
  saved), ``frognano.showDiagnosis [uri]``, ``frognano.showEpisode [path]``.  ``fix`` and
  ``runTests`` answer at once with ``{"status": "started", "job"}`` and send their result as
  the notification ``frognano/result`` ``{command, job, result}`` (``commands.py``).
* diagnostics: published with the document version the run saw (open documents); runs follow
  saves, the first opened file of a project without results, applied fixes and
  ``workspace/didChangeWatchedFiles`` (registered dynamically when the client can).
* notification ``frognano/status``: ``{state, failing, autoFix, message}`` on every change.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from . import commands, configuration, diagnostics, documents, fixes, progress
from .state import PROJECT_MARKERS, STATUS, FrogNanoServer

__all__ = ["PROJECT_MARKERS", "STATUS", "FrogNanoServer", "create_server", "run_stdio"]


async def _shutdown(ls: FrogNanoServer, params: None) -> None:
    await ls.close_projects()


FEATURES: list[tuple[str, Any, Any]] = [
    (types.INITIALIZE, configuration.initialize, None),
    (types.INITIALIZED, configuration.initialized, None),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, configuration.did_change_configuration, None),
    (types.TEXT_DOCUMENT_DID_OPEN, documents.did_open, None),
    (types.TEXT_DOCUMENT_DID_CHANGE, documents.did_change, None),
    (types.TEXT_DOCUMENT_DID_SAVE, documents.did_save, types.SaveOptions(include_text=False)),
    (types.TEXT_DOCUMENT_DID_CLOSE, documents.did_close, None),
    (types.WORKSPACE_DID_CHANGE_WATCHED_FILES, documents.did_change_watched_files, None),
    (types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS, documents.did_change_folders, None),
    (types.TEXT_DOCUMENT_CODE_ACTION, fixes.code_actions,
     types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix])),
    (types.TEXT_DOCUMENT_HOVER, diagnostics.hover, None),
    (types.WINDOW_WORK_DONE_PROGRESS_CANCEL, progress.did_cancel, None),
    (types.SHUTDOWN, _shutdown, None),
]


def create_server() -> FrogNanoServer:
    server = FrogNanoServer()
    server.after_run = lambda project, outcome: fixes.after_run(server, project, outcome)
    for method, handler, options in FEATURES:
        server.feature(method, options)(handler)
    for name, handler in commands.COMMANDS.items():
        server.command(name)(handler)
    return server


def run_stdio() -> None:
    """``frognano serve``: the language server over stdin/stdout."""
    create_server().start_io()
