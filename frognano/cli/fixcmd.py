"""``frognano fix``: diagnose, show it, search, report; ``--apply`` writes the verified fix.

The order is the user's: a broken ``--model`` is said before any test runs (and the search
goes on without it, so the diagnosis is not lost); the failing tests and suspicious lines are
printed as soon as the tests ran, before minutes of search; the fix comes last.  A verified fix
is kept with the hashes of the files it was verified on (``repair.lastfix``), so ``fix
--apply`` right after ``fix`` (even ``fix --model ...``) writes it without searching again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shlex
import time
from pathlib import Path

import click
from rich.markup import escape

from ..config import Settings, load_settings
from ..errors import EXIT_USAGE, FrogNanoError
from ..repair import lastfix
from ..repair.apply import apply_patch
from ..repair.apply import recover as recover_interrupted
from ..repair.engine import Engine, FixReport
from ..sandbox.storage import storage_error
from ..sandbox.workspace import Workspace
from .render import FixRenderer, stderr_console

log = logging.getLogger(__name__)


@dataclasses.dataclass
class FixOptions:
    path: Path
    keyword: str | None = None
    apply: bool = False
    as_json: bool = False
    overrides: dict = dataclasses.field(default_factory=dict)  # flags over [tool.frognano]


def run_fix(opts: FixOptions) -> int:
    """The whole command; returns its exit code (docs/ARCHITECTURE.md §6)."""
    errors = stderr_console()
    try:
        ws = Workspace(opts.path)
        recover_interrupted(ws.root)  # an --apply or undo killed midway: finish or roll it back
        settings = load_settings(ws.root, opts.overrides)
        if settings.model:
            from ..runtime.base import parse_spec

            parse_spec(settings.model)
    except FrogNanoError as exc:
        return _fail(str(exc), exc.exit_code, opts.as_json)
    renderer = FixRenderer(errors)
    context = {"k": opts.keyword, "test_args": list(settings.test_args), "python": settings.python}
    if opts.apply:
        done = _apply_kept(ws.root, context, renderer, opts)
        if done is not None:
            return done

    model_error = _check_model(settings)
    if model_error is not None:
        # One line now, and the search still runs: its diagnosis is worth having anyway.
        if not opts.as_json:
            errors.print(f"[bold red]error:[/] {escape(model_error)}; searching without it", soft_wrap=True)
        settings = dataclasses.replace(settings, model=None)
    files = lastfix.fingerprint(ws.root)
    try:
        report = _search(ws, settings, renderer, opts)
    except FrogNanoError as exc:  # before any report: the cache cannot be written (StorageError)
        return _fail(str(exc), exc.exit_code, opts.as_json)
    except OSError as exc:  # a write for a run (its request, its results) found the disk full
        error = storage_error(exc, ws.cache)
        if error is None:
            raise
        return _fail(str(error), error.exit_code, opts.as_json)
    if model_error is not None:
        _blame_model(report, model_error, opts.as_json)
    if report.fix is not None:
        if opts.apply:
            _apply(ws.root, report)
        elif lastfix.fingerprint(ws.root) == files:  # not when the user edited during the search
            lastfix.save(ws.root, report.fix, report.failing, files, context)
    if opts.as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        renderer.report(report, opts.path, apply_hint=_apply_command(opts), suggest_model=model_error is None)
    return report.exit_code


def _search(ws: Workspace, settings: Settings, renderer: FixRenderer, opts: FixOptions) -> FixReport:
    with ws, renderer.live(), Engine(ws, settings, progress=renderer) as engine:
        started = time.monotonic()  # fix_seconds counts the diagnosis shown first, too
        try:
            diagnosis = engine.diagnose(opts.keyword)
        except FrogNanoError as exc:
            return FixReport("error", message=str(exc), notes=engine.notes, exit_code=exc.exit_code)
        if not opts.as_json:
            renderer.diagnosis(diagnosis)
        return engine.fix(opts.keyword, diagnosis=diagnosis, started=started)


def _check_model(settings: Settings) -> str | None:
    """Why the configured model cannot work (one line), or None."""
    if not settings.model:
        return None
    from ..runtime.preflight import check_spec

    try:
        check_spec(settings.model)
    except FrogNanoError as exc:
        return f"--model {settings.model}: {exc}" if settings.model not in str(exc) else str(exc)
    return None


def _blame_model(report: FixReport, model_error: str, as_json: bool) -> None:
    """The report of a search that ran without the asked-for model: a fix stands, no fix is
    the model's error (exit 2); the diagnosis stays.  The terminal had the error in one line
    up front, so its report only points back; JSON, which had no such line, carries it."""
    if report.status == "fixed" and as_json:
        report.notes = [*report.notes, f"the model was not used: {model_error}"]
    elif report.status == "unfixed":
        report.exit_code = EXIT_USAGE
        if as_json:
            report.status = "error"
            report.message = f"{model_error} (the search alone: {report.message})"
        else:
            report.message += "; the model was not used (see the error above)"


def _apply(root: Path, report: FixReport) -> None:
    assert report.fix is not None
    try:
        record = apply_patch(root, report.fix.patch)
    except FrogNanoError as exc:
        report.status, report.message, report.exit_code = "error", str(exc), exc.exit_code
        report.applied = False
        return
    report.applied, report.undo = True, str(record)
    lastfix.forget(root)


def _apply_kept(root: Path, context: dict, renderer: FixRenderer, opts: FixOptions) -> int | None:
    """Write the kept fix when the files are still the ones it was verified on; None when the
    search must run (nothing kept, or something changed: then say what)."""
    saved = lastfix.load(root)
    if saved is None:
        return None
    if saved.context != context:
        log.info("the kept fix was found with other test options (%s); searching again", saved.context)
        return None
    changed = saved.changed(lastfix.fingerprint(root))
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        if not opts.as_json:
            stderr_console().print(f"[yellow]note:[/] {escape(shown)} changed since the last verified "
                                   "fix; searching again", soft_wrap=True)
        return None
    report = FixReport("fixed", saved.failing, saved.fix, saved.fix.verified.describe(),
                       notes=[f"the verified fix found at {saved.created} was applied without a new "
                              "search: the files are unchanged"])
    _apply(root, report)
    if opts.as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        renderer.report(report, opts.path)
    return report.exit_code


def _apply_command(opts: FixOptions) -> str:
    """How to write the fix just shown: the same test selection, and no search again."""
    k = f" -k {shlex.quote(opts.keyword)}" if opts.keyword else ""
    return f"frognano fix {shlex.quote(str(opts.path))}{k} --apply"


def _fail(message: str, code: int, as_json: bool) -> int:
    if as_json:
        click.echo(json.dumps({"status": "error", "failing": [], "fix": None, "message": message}))
    else:
        stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    return code
