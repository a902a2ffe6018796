"""The ``frognano`` command line.  Subcommands import their machinery lazily, so ``--help``
and small commands start fast.

Exit codes (DESIGN.md §3): 0 success, 1 tests fail and no verified fix, 2 usage or config error.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import EXIT_USAGE, FrogNanoError

log = logging.getLogger("frognano")


def _setup_logging(verbose: int) -> None:
    from rich.logging import RichHandler

    from .render import stderr_console

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=stderr_console(), show_time=False, show_path=False)
    logging.basicConfig(level=level, handlers=[handler], format="%(message)s", force=True)


def _fail(message: str, code: int = EXIT_USAGE, as_json: bool = False) -> None:
    if as_json:
        click.echo(json.dumps({"status": "error", "failing": [], "fix": None, "message": message}))
    else:
        from rich.markup import escape

        from .render import stderr_console

        stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="frognano")
def main() -> None:
    """FrogNano turns failing pytest runs into verified patches, on your own machine.

    Every fix it offers was proven in an isolated copy of the project: the failing tests pass
    and the tests that passed before still pass.  Your files are only written with --apply.
    """


@main.command()
@click.argument("path", default=".", type=click.Path(file_okay=True, dir_okay=True, path_type=Path))
@click.option("-k", "keyword", metavar="EXPR", help="Only run tests matching this pytest -k expression.")
@click.option("--apply", "apply_", is_flag=True, help="Write the verified fix to the project (an undo copy is kept).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the report.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a test may run before it counts as hanging (default 30).")
@click.option("--model", metavar="SPEC",
              help="After the operator search, let a model try: mlx:PATH_OR_ID, torch:PATH_OR_ID, "
                   "openai:MODEL@BASE_URL or replay:EPISODE.json.")
@click.option("--episodes", type=click.IntRange(min=0), metavar="N", help="Model episodes to try (default 2).")
@click.option("--no-constrain", is_flag=True, help="Let in-process models emit free text instead of "
                                                    "only well-formed tool calls.")
@click.option("-v", "--verbose", count=True, help="Log what happens (-vv for debug detail).")
def fix(path: Path, keyword: str | None, apply_: bool, as_json: bool, timeout: float | None,
        model: str | None, episodes: int | None, no_constrain: bool, verbose: int) -> None:
    """Find, verify and print a fix for the failing tests of the project at PATH.

    \b
    1. runs the tests in a shadow copy of PATH, with per-test coverage;
    2. ranks suspicious statements (Ochiai spectra + traceback frames);
    3. tries catalogue edits there (comparison flips, off-by-ones, wrong names, ...);
    4. with --model, runs model episodes (read/search/edit/run_tests/submit tools);
    5. verifies the best candidate against every test that passed before.

    Episodes are recorded as JSON in FrogNano's cache (the path is printed).

    Settings come from [tool.frognano] in PATH/pyproject.toml (test_args, timeout,
    max_candidates, ...), then FROGNANO_* variables, then these flags.

    Exit codes: 0 fixed (or nothing to fix), 1 tests fail and no verified fix, 2 usage error.
    """
    _setup_logging(verbose)
    from ..config import load_settings
    from .render import FixRenderer, stderr_console
    from ..repair.engine import Engine
    from ..repair.apply import recover as recover_interrupted
    from ..sandbox.workspace import Workspace

    try:
        ws = Workspace(path)
        recover_interrupted(ws.root)  # an --apply or undo killed midway: finish or roll it back
        settings = load_settings(ws.root, {"timeout": timeout, "model": model, "episodes": episodes,
                                           "constrain": False if no_constrain else None})
        if model:
            from ..runtime.base import parse_spec

            parse_spec(model)
    except FrogNanoError as exc:
        _fail(str(exc), exc.exit_code, as_json)
        return
    renderer = FixRenderer(stderr_console(), show_progress=True)
    with ws, renderer.live(), Engine(ws, settings, progress=renderer) as engine:
        report = engine.fix(keyword)
    if apply_ and report.fix is not None:
        from ..repair.apply import apply_patch

        try:
            record = apply_patch(ws.root, report.fix.patch)
            report.applied = True
            report.undo = str(record)
        except FrogNanoError as exc:
            report.status, report.message, report.exit_code = "error", str(exc), exc.exit_code
            report.applied = False
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        renderer.report(report, path)
    sys.exit(report.exit_code)


@main.command()
@click.argument("path", default=".", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Restore even if the files changed after the fix was applied.")
def undo(path: Path, force: bool) -> None:
    """Restore the files changed by the last `frognano fix --apply` in PATH."""
    _setup_logging(0)
    from ..repair.apply import undo_last

    try:
        result = undo_last(path, force=force)
    except FrogNanoError as exc:
        _fail(str(exc), exc.exit_code)
        return
    click.echo(f"restored {', '.join(result.files)}")


@main.command()
@click.option("-v", "--verbose", count=True, help="Log to stderr what the server does (-vv for debug).")
def serve(verbose: int) -> None:
    """Run the language server over stdio (started by the VS Code and Neovim clients).

    Failing tests become diagnostics, verified fixes become code actions.  Settings come from
    the client (initializationOptions and workspace/configuration, section "frognano"), over
    [tool.frognano] in the project's pyproject.toml.  The server listens on no port.
    """
    # stdout is the protocol: logging must go to stderr only.
    logging.basicConfig(level=logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG,
                        stream=sys.stderr, format="frognano: %(levelname)s %(name)s: %(message)s", force=True)
    from ..server.app import run_stdio

    run_stdio()


@main.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@click.option("--model", metavar="SPEC", help="Model SPEC for episodes after the operator search (as for fix).")
@click.option("--apply", "apply_", is_flag=True,
              help="Write verified fixes, only when the files still match what the fix was computed on.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a test may run before it counts as hanging (default 30).")
@click.option("-v", "--verbose", count=True, help="Log what happens (-vv for debug detail).")
def watch(path: Path, model: str | None, apply_: bool, timeout: float | None, verbose: int) -> None:
    """Watch PATH: on every change run the affected tests, and on failure find a verified fix.

    Changes are debounced; .git, virtualenvs, caches and FrogNano's shadow copy are ignored.
    With --apply a fix is written only if the files still match what it was computed on (an
    undo copy is kept, `frognano undo` restores it), so an edit you make meanwhile is never
    overwritten.  Ctrl-C stops.
    """
    _setup_logging(verbose)
    from ..config import load_settings
    from ..repair.apply import recover as recover_interrupted
    from ..sandbox.workspace import Workspace
    from .watch import watch as run_watch

    try:
        ws = Workspace(path)
        recover_interrupted(ws.root)  # an --apply or undo killed midway: finish or roll it back
        settings = load_settings(ws.root, {"timeout": timeout, "model": model})
    except FrogNanoError as exc:
        _fail(str(exc), exc.exit_code)
        return
    sys.exit(run_watch(ws, settings, apply=apply_))


from .models import export_command, model_group  # noqa: E402 - light: click only

main.add_command(model_group)
main.add_command(export_command)

from .synth import synth_command  # noqa: E402 - light: click only

main.add_command(synth_command)

from .eval import eval_command  # noqa: E402 - light: click only

main.add_command(eval_command)

from .train import train_command  # noqa: E402 - light: click only

main.add_command(train_command)

if __name__ == "__main__":  # pragma: no cover
    main()
