"""The ``frognano`` command line.  Subcommands import their machinery lazily, so ``--help``
and small commands start fast.

Exit codes (docs/ARCHITECTURE.md §6): 0 success, 1 tests fail and no verified fix, 2 usage or config error.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from .. import __version__
from ..errors import EXIT_USAGE, FrogNanoError
from .logs import setup_logging

log = logging.getLogger("frognano")


class _Group(click.Group):
    """Lists each command with its whole first sentence: click's default cuts summaries to the
    width left beside the names, ending them with "..."."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _fail(message: str, code: int = EXIT_USAGE, as_json: bool = False) -> None:
    if as_json:
        click.echo(json.dumps({"status": "error", "failing": [], "fix": None, "message": message}))
    else:
        from rich.markup import escape

        from .render import stderr_console

        stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="frognano")
def main() -> None:
    """FrogNano turns failing pytest runs into verified patches, on your own machine.

    Every fix it offers was proven in an isolated copy of the project: the failing tests pass
    and the tests that passed before still pass.  Your files are only written with --apply.
    """
    _terminate_like_interrupt()
    _quiet_project_compile_warnings()


def _quiet_project_compile_warnings() -> None:
    """This process parses and compiles the project's code (localisation, operators, the
    syntax check of every candidate): the ``SyntaxWarning``s of that code (an invalid escape
    sequence, ``is`` with a literal) are the project's, and its own test runs show them.
    Printed here they broke the one-line error and ``--json``'s clean stderr.  FrogNano's own
    modules are compiled before this runs."""
    import warnings

    warnings.filterwarnings("ignore", category=SyntaxWarning)


def _terminate_like_interrupt() -> None:
    """SIGTERM (a CI job cancelled, ``kill``, a supervisor stopping the process) unwinds the
    stack as Ctrl-C does, so that shadow copies are released and a model episode's record is
    written in its ``finally`` (the default action ends the process on the spot)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread (tests call main in others)

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, terminate)


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
    """Find, verify and print a fix for the failing tests of the project at PATH (default: the current folder).

    \b
    1. runs the tests in a shadow copy of PATH, with per-test coverage;
    2. ranks suspicious statements (Ochiai spectra + traceback frames);
    3. tries catalogue edits there (comparison flips, off-by-ones, wrong names, ...);
    4. with --model, runs model episodes (read/search/edit/run_tests/submit tools);
    5. verifies the best candidate against every test that passed before.

    Failing tests and suspicious lines are printed as soon as the tests ran, then the search
    shows its progress (a bar on a terminal; with -v, plain lines on stderr elsewhere).  A
    verified fix is kept: `frognano fix PATH --apply` then writes it without searching again
    while the files are unchanged.  Episodes are recorded as JSON in FrogNano's cache (the
    path is printed).

    Settings come from [tool.frognano] in PATH/pyproject.toml (test_args, timeout,
    max_candidates, ...), then FROGNANO_* variables, then these flags.

    Exit codes: 0 fixed (or nothing to fix), 1 tests fail and no verified fix, 2 usage error.
    """
    setup_logging(verbose)
    from .fixcmd import FixOptions, run_fix

    overrides = {"timeout": timeout, "model": model, "episodes": episodes,
                 "constrain": False if no_constrain else None}
    sys.exit(run_fix(FixOptions(path, keyword, apply_, as_json, overrides)))


@main.command()
@click.argument("path", default=".", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Restore even if the files changed after the fix was applied.")
def undo(path: Path, force: bool) -> None:
    """Restore the files changed by the last `frognano fix --apply` in PATH (default: the current folder)."""
    setup_logging(0)
    from ..repair.apply import undo_last
    from ..sandbox.workspace import Workspace

    try:
        result = undo_last(Workspace(path).root, force=force)  # Workspace: fix's errors for a bad PATH
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
@click.option("-k", "keyword", metavar="EXPR", help="Only run tests matching this pytest -k expression.")
@click.option("--model", metavar="SPEC", help="Model SPEC for episodes after the operator search (as for fix).")
@click.option("--apply", "apply_", is_flag=True,
              help="Write verified fixes, only when the files still match what the fix was computed on.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per run (JSON lines) instead of the report.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a test may run before it counts as hanging (default 30).")
@click.option("-v", "--verbose", count=True, help="Log what happens (-vv for debug detail).")
def watch(path: Path, keyword: str | None, model: str | None, apply_: bool, as_json: bool,
          timeout: float | None, verbose: int) -> None:
    """Watch PATH (default: the current folder): on every change run the affected tests, and on failure find a verified fix.

    Changes are debounced; .git, virtualenvs, caches and FrogNano's shadow copy are ignored.
    With --apply a fix is written only if the files still match what it was computed on (an
    undo copy is kept, `frognano undo` restores it), so an edit you make meanwhile is never
    overwritten.  Ctrl-C stops.
    """
    setup_logging(verbose)
    from ..config import load_settings
    from ..repair.apply import recover as recover_interrupted
    from ..sandbox.workspace import Workspace
    from .watch import watch as run_watch

    try:
        ws = Workspace(path)
        recover_interrupted(ws.root)  # an --apply or undo killed midway: finish or roll it back
        settings = load_settings(ws.root, {"timeout": timeout, "model": model})
    except FrogNanoError as exc:
        _fail(str(exc), exc.exit_code, as_json)
        return
    sys.exit(run_watch(ws, settings, apply=apply_, keyword=keyword, as_json=as_json))


from .models import export_command, model_group  # noqa: E402 - light: click only

main.add_command(model_group)
main.add_command(export_command)

from .synth import synth_command  # noqa: E402 - light: click only

main.add_command(synth_command)

from .eval import eval_command  # noqa: E402 - light: click only

main.add_command(eval_command)

from .train import train_command  # noqa: E402 - light: click only

main.add_command(train_command)

from .cache import cache_group  # noqa: E402 - light: click only

main.add_command(cache_group)

if __name__ == "__main__":  # pragma: no cover
    main()
