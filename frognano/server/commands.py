"""``workspace/executeCommand``: the commands the clients bind to keys and menus.

Each takes an optional document URI (or ``{"uri": ...}`` / ``{"textDocument": {"uri": ...}}``)
naming the project; without one, the project of the last document event.  Replies are the
dataclasses of ``replies.py`` as JSON.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from . import convert, diagnostics, fixes, progress
from .jobs import Project
from .replies import RunTestsReply
from .settings import next_mode, plain
from .state import FrogNanoServer

CMD_RUN_TESTS = fixes.CMD_RUN_TESTS
CMD_FIX = fixes.CMD_FIX
CMD_APPLY_FIX = "frognano.applyFix"
CMD_TOGGLE_AUTO_FIX = "frognano.toggleAutoFix"
CMD_SHOW_DIAGNOSIS = fixes.CMD_SHOW_DIAGNOSIS
CMD_SHOW_EPISODE = fixes.CMD_SHOW_EPISODE


def target(ls: FrogNanoServer, args: tuple) -> tuple[Project, str | None]:
    """The project (and file) a command is about."""
    uri = None
    if args:
        first = plain(args[0])
        if isinstance(first, dict):
            document = first.get("textDocument")
            first = first.get("uri") or (document.get("uri") if isinstance(document, dict) else None)
        if not isinstance(first, str):
            raise JsonRpcInvalidParams(f"expected a document URI, got {args[0]!r}")
        uri = first
    try:
        return ls.command_target(uri)
    except LookupError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


async def run_tests(ls: FrogNanoServer, *args: Any) -> dict:
    """The tests of the file named first (and of any further URIs of the same project, as the
    verified fix's code action sends for a fix touching several files); without one, all."""
    project, rel = target(ls, args)
    if args and plain(args[-1]) == fixes.AFTER_FIX:
        waiting = _before_the_edit(ls, project, args)
        if waiting is not None:
            return waiting
    files = diagnostics.debouncer(ls, project).take()  # saves waiting for their debounce join this run
    if rel is None or files is None:
        files = None
    else:
        files |= {rel}
        for extra in args[1:]:
            found = ls.locate(extra) if isinstance(extra, str) else None
            if found is not None and found[0] is project:
                files.add(found[1])
    outcome = await diagnostics.run_tests(ls, project, files, progress.with_request(ls, threading.Event()))
    if outcome is None:
        return RunTestsReply("cancelled").to_json()
    state = ls.last_status.state if ls.last_status else "idle"
    return RunTestsReply(state, outcome.failing, len(outcome.run.passing), outcome.ran, outcome.message).to_json()


def _before_the_edit(ls: FrogNanoServer, project: Project, args: tuple) -> dict | None:
    """A fix action's re-run that reached the server before the action's edit: running now
    would test the text the fix replaces.  The run waits for the edit (``fixes.edit_arrived``)."""
    files = {found[1] for a in args if isinstance(a, str) and (found := ls.locate(a)) and found[0] is project}
    for patch in fixes.offered_patches(project):
        if set(patch.files) == files and all(ls.current_text(project, e.path) == e.before for e in patch.edits):
            project.awaiting = patch
            return RunTestsReply("waiting", message="the tests run once the fix's edit arrives").to_json()
    return None


async def fix(ls: FrogNanoServer, *args: Any) -> dict:
    project, _ = target(ls, args)
    reply = await fixes.fix(ls, project, explicit=True, cancel=progress.with_request(ls, threading.Event()))
    return reply.to_json()


async def apply_fix(ls: FrogNanoServer, *args: Any) -> dict:
    project, _ = target(ls, args)
    return (await fixes.apply_fix(ls, project)).to_json()


def toggle_auto_fix(ls: FrogNanoServer, *args: Any) -> str:
    ls.options.auto_fix = next_mode(ls.options.auto_fix)
    ls.log(f"FrogNano: autoFix is now {ls.options.auto_fix}")
    state = ls.last_status or convert.Status("idle")
    ls.status(ls.active, state.state, state.failing, state.message)
    project = ls.active or next(iter(ls.projects.values()), None)
    if (ls.options.auto_fix != "off" and project is not None and project.last is not None
            and project.last.failing and (project.fix_job is None or project.fix_job.done())):
        ls.spawn(fixes.fix(ls, project, explicit=False))
    return ls.options.auto_fix


def show_diagnosis(ls: FrogNanoServer, *args: Any) -> str:
    project, _ = target(ls, args)
    last = project.last
    if last is None:
        text = "FrogNano has not run the tests yet: open or save a Python file, or run frognano.runTests"
    else:
        text = convert.diagnosis_text(last.run, last.locations, last.notes)
        ready = fixes.valid_fix(ls, project)
        if ready is not None:
            text += f"\nverified fix: {ready.title}\n{ready.fix.patch.diff()}"
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=text[:2000]))
    ls.log(text)
    return text


async def show_episode(ls: FrogNanoServer, *args: Any) -> bool:
    if not args or not isinstance(args[0], str):
        raise JsonRpcInvalidParams("expected the path of an episode record")
    path = Path(args[0]).expanduser()
    if not path.is_file():
        raise JsonRpcInvalidParams(f"{path}: no such episode record")
    result = await ls.window_show_document_async(
        types.ShowDocumentParams(uri=convert.path_to_uri(path.resolve()), take_focus=True))
    return bool(result and result.success)


COMMANDS = {CMD_RUN_TESTS: run_tests, CMD_FIX: fix, CMD_APPLY_FIX: apply_fix, CMD_TOGGLE_AUTO_FIX: toggle_auto_fix,
            CMD_SHOW_DIAGNOSIS: show_diagnosis, CMD_SHOW_EPISODE: show_episode}
