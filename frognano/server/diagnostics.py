"""Test runs and what they show: diagnostics, hovers and the status.

A save (an opened file in a project without results, a change on disk, an applied fix) asks
for the tests it affects after ``debounceMs``; the run happens on the project's
worker thread (``jobs.py``) and only the newest run's results are published.  A failing run
starts a fix job when ``autoFix`` is on: ``ls.after_run`` is ``fixes.after_run`` (wired in
``app.py``, so this module does not import the fixes that import it).
"""

from __future__ import annotations

import asyncio
import logging
import threading

from lsprotocol import types

from . import convert
from .jobs import Debouncer, Project, Snapshot, TestOutcome
from .state import FrogNanoServer, plural

log = logging.getLogger(__name__)


def summarize(ls: FrogNanoServer, project: Project, outcome: TestOutcome) -> None:
    """The status a test run leaves."""
    run = outcome.run
    if outcome.state == "error":
        ls.status(project, "error", len(run.failing), outcome.message)
    elif outcome.state == "idle":
        ls.status(project, "idle", 0, outcome.message)
    elif run.collect_errors:
        first = run.collect_errors[0]
        ls.status(project, "error", len(run.failing), f"cannot collect {first.nodeid or 'the tests'}: {first.summary}")
    elif run.failing:
        ready = project.offer.valid(project.state, lambda rel: ls.current_text(project, rel))
        if ready is not None:
            ls.status(project, "fixed", len(run.failing), ready.title)
        else:
            ls.status(project, "failing", len(run.failing), plural(len(run.failing), "failing test"))
    else:
        ls.status(project, "passing", 0, f"all {plural(len(run.tests), 'test')} pass")


def publish(ls: FrogNanoServer, project: Project, outcome: TestOutcome) -> None:
    """Replace the project's diagnostics with the ones of ``outcome`` (clearing the rest)."""
    if outcome.state == "error":
        return  # nothing new is known; the last diagnostics stay
    uri_of = ls.uri_of(project)
    new: dict[str, list[types.Diagnostic]] = {}
    if outcome.state == "ran":
        run = outcome.run
        found = convert.failure_diagnostics(run, outcome.locations, outcome.coverage, outcome.texts,
                                            uri_of, ls.encoding)
        errors = convert.collect_diagnostics(run.collect_errors, outcome.shadow, str(project.root),
                                             outcome.texts, uri_of, ls.encoding)
        for rel, diags in [*found.items(), *errors.items()]:
            new.setdefault(rel, []).extend(diags)
    # Each open document's diagnostics carry the version the run saw, so a client can tell
    # results for text it has since changed; files the run read from disk carry none.
    open_now = ls.open_documents(project)
    seen = outcome.snapshot.versions

    def send(rel: str, diags: list[types.Diagnostic]) -> None:
        version = seen.get(rel) if rel in open_now else None
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri_of(rel), diagnostics=diags,
                                                                            version=version))

    for key in [k for k in ls.published if k[0] == project.root and k[1] not in new]:
        ls.published.pop(key)
        send(key[1], [])
    for rel, diags in new.items():
        ls.published[(project.root, rel)] = diags
        send(rel, diags)


def clear(ls: FrogNanoServer, project: Project) -> None:
    publish(ls, project, TestOutcome(Snapshot(project.state), state="idle", message="cleared"))


def debouncer(ls: FrogNanoServer, project: Project) -> Debouncer:
    if project.root not in ls.debouncers:
        ls.debouncers[project.root] = Debouncer(lambda files: ls.spawn(run_tests(ls, project, files)))
    return ls.debouncers[project.root]


def request_tests(ls: FrogNanoServer, project: Project, files: set[str] | None) -> None:
    """Run the tests ``files`` affect after ``debounceMs``; the run in flight is dropped."""
    if project.tests_job is not None and not project.tests_job.done():
        project.tests_job.cancel.set()
    fix = project.fix_job
    if fix is not None and not fix.done() and fix.snapshot.state != project.state:
        fix.cancel.set()  # computed for text that no longer exists
    debouncer(ls, project).trigger(files, ls.options.debounce_ms / 1000)


async def run_tests(ls: FrogNanoServer, project: Project, files: set[str] | None,
                    cancel: threading.Event | None = None) -> TestOutcome | None:
    """Run the tests for ``files`` (None: all) now; None when a newer run superseded it."""
    if ls.settings_ready is not None and not ls.settings_ready.is_set():
        await ls.settings_ready.wait()
    if project.tests_job is not None and not project.tests_job.done():
        project.tests_job.cancel.set()
    handle = project.run_tests(files, ls.snapshot(project), cancel)
    what = "all tests" if files is None else ", ".join(sorted(files))
    fix = project.fix_job
    if fix is None or fix.done():
        # (While a fix runs, this run waits behind it on the project's worker: the status
        # keeps saying "fixing" rather than "running" for minutes.)
        ls.status(project, "running", message=f"running the tests of {what}")
    try:
        outcome: TestOutcome = await handle.future
    except asyncio.CancelledError:
        handle.cancel.set()
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a job must not end the server
        log.exception("test job failed")
        ls.log(f"FrogNano: the test run failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        ls.status(project, "error", message=f"internal error: {exc}")
        return None
    if outcome.cancelled or project.tests_job is not handle:
        return None  # a newer save took over: only the last run's diagnostics are published
    _log_outcome(ls, project, outcome)
    if outcome.state != "error":
        project.last = outcome
        if not outcome.failing:
            project.offer.drop()  # nothing left to fix
    publish(ls, project, outcome)
    summarize(ls, project, outcome)
    if ls.after_run is not None:  # fixes.after_run: the background search when autoFix is on
        ls.after_run(project, outcome)
    return outcome


def _log_outcome(ls: FrogNanoServer, project: Project, outcome: TestOutcome) -> None:
    if outcome.state == "error":
        ls.log(f"FrogNano: cannot run the tests of {project.folder}: {outcome.message}", types.MessageType.Error)
    elif outcome.state == "idle":
        ls.log(f"FrogNano: {outcome.message}")
        if outcome.message.startswith("no tests found") and outcome.message not in ls.shown:
            # Shown once, not at every save: a client may show neither the log nor the status.
            ls.shown.add(outcome.message)
            ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Info, message=(
                f"FrogNano: {outcome.message}. It looked for pytest's test files (test_*.py, *_test.py, or the "
                "project's python_files) under the project folder, the nearest one with pyproject.toml, "
                "setup.cfg, setup.py, tox.ini or pytest.ini")))
    else:
        ls.log(f"FrogNano: ran {plural(outcome.ran, 'test')} ({outcome.selection.reason}) in {outcome.seconds:.2f} s: "
               f"{plural(len(outcome.failing), 'failing test')}, "
               f"{plural(len(outcome.run.collect_errors), 'collection error')}")
    for note in outcome.notes:
        if note not in ls.noted:  # once per session, not at every save
            ls.noted.add(note)
            ls.log(f"FrogNano: {note}", types.MessageType.Warning)


def hover(ls: FrogNanoServer, params: types.HoverParams) -> types.Hover | None:
    found = ls.locate(params.text_document.uri)
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
