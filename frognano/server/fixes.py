"""Fix jobs and their offer: the verified fix as a code action, applied as versioned edits.

A fix is computed on the project's worker thread for one snapshot (the state counter and the
open buffers); it is offered only while the editor and the disk still hold exactly the text it
was computed on (``valid_fix``), and applied as ``TextDocumentEdit``s carrying each open
document's version, so the editor refuses it if anything moved (docs/ARCHITECTURE.md, invariant 1).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from lsprotocol import types

from . import convert, diagnostics, progress
from .jobs import FixOutcome, Project
from .offer import MAX_ALTERNATIVES, ReadyFix
from .replies import ApplyReply, FixReply
from .state import FrogNanoServer

log = logging.getLogger(__name__)

CMD_FIX = "frognano.fix"
CMD_RUN_TESTS = "frognano.runTests"
CMD_SHOW_DIAGNOSIS = "frognano.showDiagnosis"
CMD_SHOW_EPISODE = "frognano.showEpisode"
# The last argument of a fix action's re-run command: the client runs it after applying the
# edit, but may send it before the edit itself (eglot does), so the server can tell.
AFTER_FIX = {"frognano": "afterFix"}


def valid_fix(ls: FrogNanoServer, project: Project) -> ReadyFix | None:
    """The ready fix, if it was computed for exactly what the editor and the disk hold now."""
    return project.offer.valid(project.state, lambda rel: ls.current_text(project, rel))


def applied_in_editor(ls: FrogNanoServer, project: Project, patch) -> None:
    """The editor applied ``patch``: recorded for ``frognano undo`` once its text is on disk."""
    project.offer.mark_applied(patch)
    record_if_saved(ls, project)


def record_if_saved(ls: FrogNanoServer, project: Project) -> None:
    """The undo record of the fix the editor applied, once every file of it holds the fix's text
    on disk (a save, or an edit the editor wrote to a file it had not opened)."""
    patch = project.offer.to_record(lambda rel: ls.disk_text(project.path(rel)))
    if patch is None:
        return
    from ..errors import ApplyError
    from ..repair.apply import record_applied

    try:
        record_applied(project.root, patch)
    except ApplyError as exc:
        ls.log(f"FrogNano: the applied fix has no undo record: {exc}", types.MessageType.Warning)
        return
    ls.log(f"FrogNano: the applied fix is recorded; `frognano undo {project.folder}` restores "
           f"{', '.join(patch.files)}")


def rerun_requested(ls: FrogNanoServer, project: Project, files: set[str]) -> bool:
    """A fix action's re-run: True when it waits for the action's edit (``edit_arrived``)."""
    outcome = project.offer.rerun_requested(files, lambda rel: ls.current_text(project, rel))
    if outcome == "applied":
        record_if_saved(ls, project)
    return outcome == "waiting"


def edit_arrived(ls: FrogNanoServer, project: Project) -> bool:
    """After a document event: when the awaited fix's text is now what the editor holds, its
    re-run starts (the tests of its files, at once; a run of the text before it is superseded,
    so its diagnostics are never published over the fixed buffer)."""
    patch = project.offer.arrived(lambda rel: ls.current_text(project, rel))
    if patch is None:
        return False
    record_if_saved(ls, project)
    diagnostics.debouncer(ls, project).take()
    ls.spawn(diagnostics.run_tests(ls, project, set(patch.files)))
    return True


def after_run(ls: FrogNanoServer, project: Project, outcome) -> None:
    """After a published test run: failing, with autoFix on and nothing verified for these
    files, starts the background search (``Offer.should_search``)."""
    if project.offer.should_search(ls.options.auto_fix, bool(outcome.failing), bool(outcome.run.collect_errors),
                                   project.state, lambda rel: ls.current_text(project, rel)):
        ls.spawn(fix(ls, project, explicit=False))


def fix_edit(ls: FrogNanoServer, project: Project, ready: ReadyFix) -> types.WorkspaceEdit:
    docs = ls.open_documents(project)
    versions = {e.path: docs[e.path].version for e in ready.fix.patch.edits if e.path in docs}
    key = (id(ready), tuple(sorted(versions.items())), ls.encoding)
    if ls.edit_cache is None or ls.edit_cache[0] != key:
        ls.edit_cache = (key, convert.workspace_edit(ready.fix, ls.uri_of(project), versions, ls.encoding))
    return ls.edit_cache[1]


def alternative_actions(ls: FrogNanoServer, project: Project, ready: ReadyFix,
                        diagnostics: list[types.Diagnostic]) -> list[types.CodeAction]:
    """The search's other verified fixes, in its rank order, after the preferred one: where
    the visible tests cannot tell a correct fix from a plausible one, the user chooses.  Only
    those computed on exactly what the editor and the disk hold now."""
    docs = ls.open_documents(project)
    uri_of = ls.uri_of(project)
    actions = []
    for i, alt in enumerate(ready.alternatives[:MAX_ALTERNATIVES], 1):
        if any(ls.current_text(project, e.path) != e.before for e in alt.patch.edits):
            continue
        versions = {e.path: docs[e.path].version for e in alt.patch.edits if e.path in docs}
        rerun = types.Command(title="Run the tests", command=CMD_RUN_TESTS,
                              arguments=[*(uri_of(f) for f in alt.patch.files), AFTER_FIX])
        actions.append(types.CodeAction(
            title=convert.fix_title(alt).replace("FrogNano", f"FrogNano (alternative {i})", 1),
            kind=types.CodeActionKind.QuickFix, diagnostics=diagnostics, is_preferred=False,
            edit=convert.workspace_edit(alt, uri_of, versions, ls.encoding), command=rerun,
            data={**convert.fix_action_data(alt), "alternative": i}))
    return actions


async def fix(ls: FrogNanoServer, project: Project, explicit: bool = True,
              cancel: threading.Event | None = None) -> FixReply:
    """Find a verified fix for the current state (a job with progress; cancellable).

    ``explicit``: the user asked (``frognano.fix``), so a failure is also shown, not only put
    in the status bar.
    """
    running = project.fix_job
    if running is not None and not running.done():
        if running.snapshot.state == project.state:
            await asyncio.wait([running.future])  # the same question is being answered
            ready = valid_fix(ls, project)
            return FixReply("fixed", title=ready.title) if ready else FixReply("unfixed")
        running.cancel.set()
    ready = valid_fix(ls, project)
    if ready is not None:  # already known for exactly these files
        return FixReply("fixed", title=ready.title)
    cancel = cancel or threading.Event()
    sink = await progress.begin(ls, "FrogNano: fixing", cancel)
    handle = project.fix(ls.snapshot(project), sink, cancel)
    ls.status(project, "fixing", message="searching for a fix")
    try:
        outcome: FixOutcome = await handle.future
    except asyncio.CancelledError:  # the client cancelled the request itself
        handle.cancel.set()
        progress.end(ls, sink, "cancelled")
        raise
    except Exception as exc:  # noqa: BLE001
        log.exception("fix job failed")
        progress.end(ls, sink, "failed")
        ls.log(f"FrogNano: the fix job failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        ls.status(project, "error", message=f"internal error: {exc}")
        return FixReply("error", message=str(exc))
    reply = fix_done(ls, project, outcome)
    progress.end(ls, sink, reply.summary)
    if explicit and reply.status in ("unfixed", "error", "stale"):
        # Asked for by the user: say why there is nothing (automatic jobs use the status bar).
        ls.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Warning if reply.status == "error" else types.MessageType.Info,
            message=f"FrogNano: {reply.message}"))
    if reply.status == "fixed" and ls.options.auto_fix == "apply":
        ready = valid_fix(ls, project)
        if ready is not None and project.offer.applied == ready.fix.patch:
            # The editor said it applied this very patch, yet the files still hold the text it
            # fixes: sending it again would loop (apply, re-run, fail, fix, apply...).
            ls.log("FrogNano: the editor reported this fix applied, but the files did not change; "
                   "not sending it again", types.MessageType.Warning)
        else:
            reply = FixReply(reply.status, reply.title, reply.message, reply.diff, reply.files,
                             await apply_fix(ls, project))
    return reply


def fix_done(ls: FrogNanoServer, project: Project, outcome: FixOutcome) -> FixReply:
    """What a finished fix job leaves: published diagnostics, the status, the offer."""
    current = outcome.snapshot.state == project.state
    if outcome.start:
        ls.log(f"FrogNano: the fix job started from {outcome.start} and took {outcome.seconds:.2f} s")
    if outcome.tests is not None and current and not outcome.cancelled:
        project.last = outcome.tests
        diagnostics.publish(ls, project, outcome.tests)
    failing = len(project.last.failing) if project.last else 0
    if outcome.cancelled:
        ls.status(project, "failing" if failing else "idle", failing, "fix cancelled")
        return FixReply("cancelled", message="fix cancelled")
    report = outcome.report
    if outcome.error or report is None or report.status == "error":
        message = outcome.error or (report.message if report else "no report")
        ls.log(f"FrogNano: no fix: {message}", types.MessageType.Error)
        ls.status(project, "error", failing, message)
        return FixReply("error", message=message)
    if report.status == "passing":
        project.offer.drop()
        ls.status(project, "passing", 0, report.message)
        return FixReply("passing", message=report.message)
    if report.status != "fixed" or report.fix is None:
        ls.log(f"FrogNano: {report.message}")
        ls.status(project, "failing", failing, report.message)
        return FixReply("unfixed", message=report.message)
    title = convert.fix_title(report.fix)
    episodes = [str(e.record) for e in report.episodes if e.record]
    project.offer.ready = ReadyFix(report.fix, outcome.snapshot.state, title, episodes, list(report.alternatives))
    if not current or valid_fix(ls, project) is None:
        project.offer.drop()
        message = "the files changed while the fix was computed; save to run again"
        ls.log(f"FrogNano: fix dropped: {message}")
        ls.status(project, "failing", failing, message)
        return FixReply("stale", message=message)
    diff = report.fix.patch.diff()
    ls.log(f"FrogNano: verified fix ready: {title} (in {outcome.seconds:.1f} s)\n{diff}")
    ls.status(project, "fixed", failing, title)
    return FixReply("fixed", title=title, diff=diff, files=report.fix.patch.files)


async def apply_fix(ls: FrogNanoServer, project: Project) -> ApplyReply:
    """Send the ready fix as versioned edits; a rejected edit is dropped, never forced."""
    ready = valid_fix(ls, project)
    if ready is None:
        return ApplyReply(False, reason="no verified fix for the current files")
    if not ls.can("workspace.apply_edit"):
        return ApplyReply(False, reason="the client cannot apply edits")
    edit = fix_edit(ls, project, ready)
    try:
        result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=ready.title))
        applied = bool(result and result.applied)
        reason = (result.failure_reason or "") if result else "no answer"
    except Exception as exc:  # noqa: BLE001 - an error answer is a rejection
        applied, reason = False, str(exc)
    project.offer.drop()  # applied, or refused: either way it is not offered again
    failing = len(project.last.failing) if project.last else 0
    if applied:
        applied_in_editor(ls, project, ready.fix.patch)
        ls.log(f"FrogNano: applied {ready.title}")
        ls.status(project, "fixed", failing, f"applied: {ready.title}")
        # The editor may have written a file it had not opened, or changed a buffer: either way
        # no save follows, so the tests re-run now and the Error diagnostics clear by themselves.
        diagnostics.request_tests(ls, project, set(ready.fix.patch.files))
        return ApplyReply(True, title=ready.title)
    ls.log(f"FrogNano: the editor rejected the fix ({reason or 'no reason given'}); it was dropped",
           types.MessageType.Warning)
    ls.status(project, "failing", failing, "the editor rejected the fix")
    return ApplyReply(False, reason=reason or "rejected by the editor")


def code_actions(ls: FrogNanoServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    """On FrogNano's diagnostics: the verified fix (marked by its ``data``, preferred) and its
    verified alternatives in rank order, or "Fix with FrogNano"; then "Show diagnosis" and "Run
    tests"."""
    uri = params.text_document.uri
    found = ls.locate(uri)
    if found is None or not found[1].endswith(".py"):
        return None
    project, rel = found
    ours = [d for d in params.context.diagnostics if d.source == convert.SOURCE]
    if not ours:
        ours = [d for d in ls.published.get((project.root, rel), []) if convert.ranges_touch(d.range, params.range)]
    if not ours:
        return []

    def action(title: str, command: str, arguments: list) -> types.CodeAction:
        return types.CodeAction(title=title, kind=types.CodeActionKind.QuickFix, diagnostics=ours,
                                command=types.Command(title=title, command=command, arguments=arguments))

    actions: list[types.CodeAction] = []
    ready = valid_fix(ls, project)
    if ready is not None:
        # The edit is the fix; the command, which the client runs after applying it, re-runs
        # the tests it touches: no save follows an edit to a file the editor had not opened.
        uri_of = ls.uri_of(project)
        rerun = types.Command(title="Run the tests", command=CMD_RUN_TESTS,
                              arguments=[*([uri_of(f) for f in ready.fix.patch.files] or [uri]), AFTER_FIX])
        actions.append(types.CodeAction(title=ready.title, kind=types.CodeActionKind.QuickFix, diagnostics=ours,
                                        is_preferred=True, edit=fix_edit(ls, project, ready), command=rerun,
                                        data=convert.fix_action_data(ready.fix)))
        actions += alternative_actions(ls, project, ready, ours)
        actions += [types.CodeAction(title="Show the model episode (FrogNano)", kind=types.CodeActionKind.QuickFix,
                                     command=types.Command(title="Show episode", command=CMD_SHOW_EPISODE,
                                                           arguments=[record]))
                    for record in ready.episodes]
    else:
        actions.append(action("Fix with FrogNano", CMD_FIX, [uri]))
    actions.append(action("Show diagnosis", CMD_SHOW_DIAGNOSIS, [uri]))
    actions.append(action("Run tests", CMD_RUN_TESTS, [uri]))
    return actions
