"""``workspace/executeCommand``: the commands the clients bind to keys and menus.

Each takes an optional document URI (or ``{"uri": ...}`` / ``{"textDocument": {"uri": ...}}``)
naming the project; without one, the project of the last document event.  Replies are the
dataclasses of ``replies.py`` as JSON.

No command blocks the client.  eglot sends commands as requests with a 10 s timeout, so a fix
that took 30 s froze Emacs and then failed.  ``frognano.fix`` and ``frognano.runTests`` answer
at once with the job they started, ``{"status": "started", "job": ID}``.  The work reports
through ``$/progress`` (cancellable there) and ends with the usual diagnostics,
``frognano/status`` and messages, then the notification ``frognano/result``:
``{"command", "job", "result"}``, where ``result`` is what the command used to answer.  A
second request for the same work, while it runs for the same state of the files, joins it (the
same job id).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from . import convert, diagnostics, fixes, progress
from .jobs import Project
from .replies import RunTestsReply
from .settings import next_mode, plain
from .state import FrogNanoServer, plural

CMD_RUN_TESTS = fixes.CMD_RUN_TESTS
CMD_FIX = fixes.CMD_FIX
CMD_APPLY_FIX = "frognano.applyFix"
CMD_TOGGLE_AUTO_FIX = "frognano.toggleAutoFix"
CMD_UNDO_FIX = "frognano.undoFix"
CMD_SHOW_DIAGNOSIS = fixes.CMD_SHOW_DIAGNOSIS
CMD_SHOW_EPISODE = fixes.CMD_SHOW_EPISODE
RESULT = "frognano/result"  # a started command's outcome, once its work ends
ANSWER_FIRST_S = 0.05  # the started work waits this long after the answer (see ``started``)

log = logging.getLogger(__name__)


def started(ls: FrogNanoServer, name: str, project: Project, work: Callable[[], Awaitable[dict]]) -> dict:
    """Answer now with the job ``work`` runs as; its result goes out as ``frognano/result``."""
    key = (name, project.root)
    running = ls.command_jobs.get(key)
    if running is not None and not running[1].done() and running[2] == project.state:
        return {"status": "started", "job": running[0], "joined": True}
    ls.job_count += 1
    job = f"{name.rsplit('.', 1)[-1]}-{ls.job_count}"

    async def run() -> None:
        # The answer goes out first, on its own: Emacs 28's jsonrpc leaves a message that came
        # in the same read as the answer to a synchronous request unread until more output
        # arrives, so eglot saw "fixing" only once the fix ended.
        await asyncio.sleep(ANSWER_FIRST_S)
        try:
            result = await work()
        except asyncio.CancelledError:
            result = {"status": "cancelled"}
        except Exception as exc:  # noqa: BLE001 - reported to the client, logged here
            log.exception("%s failed", name)
            result = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        ls.protocol.notify(RESULT, {"command": name, "job": job, "result": result})

    ls.command_jobs[key] = (job, ls.spawn(run()), project.state)
    return {"status": "started", "job": job}


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


def run_tests(ls: FrogNanoServer, *args: Any) -> dict:
    """The tests of the file named first (and of any further URIs of the same project, as the
    verified fix's code action sends for a fix touching several files); without one, all.
    Started, not awaited: the result is a ``RunTestsReply``."""
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

    async def work() -> dict:
        cancel = threading.Event()
        sink = await progress.begin(ls, "FrogNano: running the tests", cancel)
        outcome = await diagnostics.run_tests(ls, project, files, cancel)
        if outcome is None:
            progress.end(ls, sink, "cancelled")
            return RunTestsReply("cancelled").to_json()
        state = ls.last_status.state if ls.last_status else "idle"
        reply = RunTestsReply(state, outcome.failing, len(outcome.run.passing), outcome.ran, outcome.message)
        progress.end(ls, sink, outcome.message or plural(len(outcome.failing), "failing test"))
        return reply.to_json()

    return started(ls, CMD_RUN_TESTS, project, work)


def _before_the_edit(ls: FrogNanoServer, project: Project, args: tuple) -> dict | None:
    """A fix action's re-run: one that reached the server before the action's edit would test
    the text the fix replaces, so the run waits for the edit (``fixes.edit_arrived``); one that
    follows it notes the fix applied (for ``frognano undo``) and runs now (None)."""
    files = {found[1] for a in args if isinstance(a, str) and (found := ls.locate(a)) and found[0] is project}
    if fixes.rerun_requested(ls, project, files):
        # The same shape as a started job's answer; the run's result comes with the edit.
        return {"status": "waiting", "message": "the tests run once the fix's edit arrives"}
    return None


def fix(ls: FrogNanoServer, *args: Any) -> dict:
    """Search for a verified fix (a job with a cancellable progress bar); the result, once it
    ends, is a ``FixReply``."""
    project, _ = target(ls, args)

    async def work() -> dict:
        return (await fixes.fix(ls, project, explicit=True, cancel=threading.Event())).to_json()

    return started(ls, CMD_FIX, project, work)


async def apply_fix(ls: FrogNanoServer, *args: Any) -> dict:
    project, _ = target(ls, args)
    return (await fixes.apply_fix(ls, project)).to_json()


async def undo_fix(ls: FrogNanoServer, *args: Any) -> dict:
    """*Undo FrogNano fix*: what ``frognano undo`` does, for the project of the document -- the
    last fix applied (from the command line or, once saved, from the editor) is restored while
    its files still hold the fix; otherwise the reply names the file that changed."""
    from ..errors import ApplyError
    from ..repair.apply import undo_last

    project, _ = target(ls, args)
    try:
        result = await asyncio.to_thread(undo_last, project.root)
    except ApplyError as exc:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"FrogNano: {exc}"))
        return {"undone": False, "reason": str(exc)}
    project.state += 1
    ls.log(f"FrogNano: undid the fix in {', '.join(result.files)}")
    diagnostics.request_tests(ls, project, set(result.files))
    return {"undone": True, "files": result.files}


def toggle_auto_fix(ls: FrogNanoServer, *args: Any) -> str:
    ls.options.auto_fix = next_mode(ls.options.auto_fix)
    ls.log(f"FrogNano: autoFix is now {ls.options.auto_fix}")
    state = ls.last_status or convert.Status("idle")
    ls.status(ls.active, state.state, state.failing, state.message)
    project = ls.active or next(iter(ls.projects.values()), None)
    if project is not None and project.last is not None and (project.fix_job is None or project.fix_job.done()):
        fixes.after_run(ls, project, project.last)  # the same decision as after a run (Offer.should_search)
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
            CMD_UNDO_FIX: undo_fix,
            CMD_SHOW_DIAGNOSIS: show_diagnosis, CMD_SHOW_EPISODE: show_episode}
