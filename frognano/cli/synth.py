"""``frognano synth REPO... -o TASKS -n N``: synthesise validated bug tasks (docs/ARCHITECTURE.md §5, §6).

Registered on the main group by ``main.py``.  Progress goes to stderr (a rich bar), the summary
table to stdout; any error ends with one ``error: ...`` line and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EXIT_USAGE, FrogNanoError


class _Bars:
    """The progress protocol (``frognano.progress``) as rich bars: one per phase (a repository),
    each kept, filled, while the next one runs."""

    def __init__(self, bars) -> None:  # a started rich.progress.Progress
        self._bars = bars
        self._task = None

    def phase(self, title: str, total: int | None = None) -> None:
        self._task = self._bars.add_task(title, total=total, note="")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=done, total=total, note=note[:60])


def _error(message: str) -> None:
    from rich.markup import escape

    from .render import stderr_console

    stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(EXIT_USAGE)


@click.command("synth")
@click.argument("repos", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Task file (JSON lines); appended to, and resumed when it exists.")
@click.option("-n", "n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Tasks wanted per repository (tasks already in the file count).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Validation worker processes, each with its own shadow copy.")
@click.option("--seed", type=int, default=0, show_default=True, help="Shuffles the candidate bugs.")
@click.option("--ray", "ray", metavar="ADDRESS", default=None,
              help="Validate on Ray actors (--workers of them): a cluster address, 'auto', or "
              "'local' to start a local Ray for the run.")
@click.option("--hint", type=click.Choice(["function", "file", "test"]), default="function",
              show_default=True, help="Hint level written into the tasks: names the function, "
              "only the file, or only the failing tests.")
@click.option("--bugs", "bugs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Bugs per task; K > 1 combines K validated single bugs of one module "
              "(a file, or files of one package directory).")
def synth_command(repos: tuple[Path, ...], out: Path, n: int, workers: int, seed: int,
                  hint: str = "function", bugs: int = 1, ray: str | None = None) -> None:
    """Inject bugs into green REPOs and keep those the tests catch deterministically.

    Each REPO's suite must pass before any mutation (a red or hanging suite is refused), and
    tests that fail when the suite runs in reverse order are never used.  Candidate bugs come
    from the operator catalogue, in functions the tests cover, one per function before any gets
    a second; each runs against the tests covering it plus a sample of the others.  Tasks are
    appended to the --output file (JSON lines, SWE-bench-style fields); running the same
    command again resumes.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from ..synthesis.synth import synthesize

    err = Console(stderr=True, highlight=False)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("[dim]{task.fields[note]}"),
                      console=err, transient=True) as bars:
            summary = synthesize(list(repos), out, n=n, seed=seed, workers=workers, progress=_Bars(bars),
                                 hint=hint, bugs=bugs, ray=ray)
    except FrogNanoError as exc:
        _error(str(exc))
    except OSError as exc:
        _error(f"{exc.filename or out}: {exc.strerror or exc}")

    table = Table(title=f"synth: {summary.written} new task(s) -> {out}")
    for col in ("family", "tried", "valid", "yield", "seconds", "skipped"):
        table.add_column(col, justify="left" if col in ("family", "skipped") else "right")
    for fam, s in sorted(summary.families.items()):
        skipped = ", ".join(f"{k} {v}" for k, v in s.skips.most_common())
        table.add_row(fam, str(s.tried), str(s.valid), f"{s.yield_:.0%}", f"{s.seconds:.1f}", skipped)
    Console(highlight=False).print(table)
    for repo, have in summary.per_repo.items():
        if repo in summary.refused:
            click.echo(f"{repo}: refused: {summary.refused[repo]}")
            continue
        click.echo(f"{repo}: {have}/{n} task(s)" + ("" if have >= n else " (candidates ran out)"))
        dependent = summary.order_dependent.get(repo)
        if dependent:
            click.echo(f"  {len(dependent)} test(s) depend on their order, not used: "
                       + ", ".join(dependent[:3]) + (", ..." if len(dependent) > 3 else ""))
        flaky = summary.flaky.get(repo)
        if flaky:
            click.echo(f"  {len(flaky)} test(s) fail now and then on the clean code, not used: "
                       + ", ".join(flaky[:3]) + (", ..." if len(flaky) > 3 else ""))
        over = summary.passed_over.get(repo)
        if over:
            click.echo("  passed over: " + ", ".join(f"{why} {count}" for why, count in over.most_common()))
