"""Document and workspace events: which project changed, and which tests that makes stale.

Every change bumps its project's state counter (a fix computed for an older state is never
offered); a save, a change on disk the editor did not make (``workspace/didChangeWatchedFiles``)
and the first Python file opened in a project without results ask for the tests they affect
(``diagnostics.request_tests``), chosen by the incremental session that watch mode shares
(``repair/incremental.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types

from ..project_paths import ignored_path, is_test_module
from ..repair.incremental import affects_tests
from ..sandbox.scope import project_root
from . import configuration, convert, diagnostics, fixes
from .jobs import Project
from .state import FrogNanoServer

log = logging.getLogger(__name__)


def did_open(ls: FrogNanoServer, params: types.DidOpenTextDocumentParams) -> None:
    found = ls.locate(params.text_document.uri)
    if found is None:
        log.debug("not in any project: %s", params.text_document.uri)
        return
    project, rel = found
    ls.active = project
    if not rel.endswith(".py"):
        return
    if params.text_document.text != ls.disk_text(project.path(rel)):
        ls.dirty.add(params.text_document.uri)
        project.state += 1
    if fixes.edit_arrived(ls, project):
        return
    # A test module shows its results on opening; so does any Python file while the project has
    # none yet (no run done or under way), or failures would stay hidden until the first save.
    if is_test_module(rel) or (project.last is None and project.tests_job is None):
        diagnostics.request_tests(ls, project, {rel})


def did_change(ls: FrogNanoServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    found = ls.locate(uri)
    if found is not None and found[1].endswith(".py"):  # tests see unsaved Python buffers only
        ls.dirty.add(uri)
        project = found[0]
        project.state += 1
        fix = project.fix_job
        if fix is not None and not fix.done():
            # A fix for the text before this keystroke would be dropped when it ends (it is
            # offered only for the state it was computed on): stop spending CPU on it now.
            fix.cancel.set()
        fixes.edit_arrived(ls, project)


def did_save(ls: FrogNanoServer, params: types.DidSaveTextDocumentParams) -> None:
    uri = params.text_document.uri
    found = ls.locate(uri)
    if found is None:
        return
    project, rel = found
    ls.active = project
    ls.dirty.discard(uri)
    if not rel.endswith(".py"):
        project.state += 1  # a data or config file: the tests see it only now that it is saved
    # (a Python buffer was already what the tests saw: saving it changes nothing for them)
    if rel.rsplit("/", 1)[-1] == "pyproject.toml":
        ls.spawn(configuration.refresh(ls))
    fixes.record_if_saved(ls, project)
    if fixes.edit_arrived(ls, project):
        pass  # the awaited fix's re-run covers this save
    elif affects_tests(rel):
        diagnostics.request_tests(ls, project, {rel})
    else:
        log.debug("not a Python file, no tests to run: %s", rel)


def did_close(ls: FrogNanoServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    found = ls.locate(uri)
    if found is not None and uri in ls.dirty:
        found[0].state += 1  # unsaved changes are gone: the tests see the disk again
    ls.dirty.discard(uri)


def did_change_watched_files(ls: FrogNanoServer, params: types.DidChangeWatchedFilesParams) -> None:
    """Files changed on disk outside the editor (a fix applied to a file it had not opened, a
    checkout, a formatter): fixes computed before are stale, and the tests they affect re-run."""
    changed: dict[Path, tuple[Project, set[str]]] = {}
    for change in params.changes:
        found = ls.locate(change.uri)
        if found is None:
            continue
        project, rel = found
        if unquote(change.uri) in ls.workspace.text_documents:  # pygls keys them unquoted
            continue  # the editor's buffer is what the tests see; its save runs them
        if ignored_path(project.root, rel):
            continue  # a virtualenv of any name, a cache, FrogNano's own files: not the project's
        project.state += 1
        if rel.rsplit("/", 1)[-1] == "pyproject.toml":
            ls.spawn(configuration.refresh(ls))
        if affects_tests(rel):
            changed.setdefault(project.root, (project, set()))[1].add(rel)
    for project, files in changed.values():
        fixes.record_if_saved(ls, project)
        if not fixes.edit_arrived(ls, project):
            diagnostics.request_tests(ls, project, files)


def did_change_folders(ls: FrogNanoServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    event = params.event
    for folder in event.removed or []:
        path = convert.uri_to_path(folder.uri)
        project = ls.projects.pop(Path(os.path.realpath(project_root(path))), None) if path else None
        if project is not None:
            project.close()
            diagnostics.clear(ls, project)
    for folder in event.added or []:
        path = convert.uri_to_path(folder.uri)
        if path is not None:
            ls.add_project(path)
    ls.spawn(configuration.refresh(ls))
