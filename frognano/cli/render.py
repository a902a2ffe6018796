"""Terminal rendering of engine results with rich (used by the CLI and watch mode)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax

from ..repair.engine import FixReport


@lru_cache(maxsize=1)
def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


class FixRenderer:
    """Progress while the engine works (stderr, transient), then the report (stdout)."""

    def __init__(self, progress_console: Console, *, show_progress: bool = True,
                 out: Console | None = None) -> None:
        self.console = out or Console(highlight=False)
        self._pconsole = progress_console
        self._show = show_progress
        self._progress: Progress | None = None
        self._task = None

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        if not self._show:
            yield
            return
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("[dim]{task.fields[note]}"),
            console=self._pconsole, transient=True,
        )
        with self._progress:
            yield
        self._progress = None

    # the Progress protocol (frognano.progress.Progress)
    def phase(self, title: str, total: int | None = None) -> None:
        if self._progress is None:
            return
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(title, total=total, note="")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=done, total=total, note=note[:60])

    # -- the report -----------------------------------------------------------------------
    def report(self, report: FixReport, path: Path) -> None:
        c = self.console
        for note in report.notes:
            self._pconsole.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
        if report.status == "error":
            self._pconsole.print(f"[bold red]error:[/] {escape(report.message)}", soft_wrap=True)
            return
        if report.status == "passing":
            c.print(f"[green]✓[/] {escape(report.message)}; nothing to fix.")
            return
        run = report.diagnosis.run if report.diagnosis else None
        total = len(run.tests) if run else 0
        c.print(f"[bold red]✗ {len(report.failing)} failing test{'s' * (len(report.failing) != 1)}[/]"
                f" (of {total})")
        for nodeid in report.failing[:10]:
            t = run.tests[nodeid] if run else None
            c.print(f"  [bold]{escape(nodeid)}[/]", soft_wrap=True)
            if t is not None:
                c.print(f"      {t.summary}", style="red", soft_wrap=True, markup=False)
                if t.frames:
                    f = t.frames[-1]
                    c.print(f"      at {f.path}:{f.line} in {f.function}", style="dim", markup=False)
        if len(report.failing) > 10:
            c.print(f"  ... and {len(report.failing) - 10} more")
        if report.diagnosis and report.diagnosis.locations:
            c.print("\n[bold]Suspicious lines[/]")
            for loc in report.diagnosis.locations[:5]:
                c.print(f"  {loc.describe()}", markup=False, soft_wrap=True)
        s = report.search
        tried = f"{s.tried + s.pairs_tried} candidates, {s.seconds:.1f} s" if s else ""
        for i, e in enumerate(report.episodes, 1):
            c.print(f"  model episode {i}: {e.status}, {len(e.turns)} turns, {e.malformed} malformed calls, "
                    f"{e.tokens_in + e.tokens_out} tokens — {e.record}", markup=False, soft_wrap=True)
        if report.fix is None:
            c.print(f"\n[bold yellow]No verified fix[/] ({tried}): {escape(report.message)}")
            if s and s.best:
                c.print("  closest candidates:")
                for t in s.best:
                    c.print(f"    {'; '.join(map(str, t.candidate.notes))} — fixes {len(t.result.fixed)} of "
                            f"{len(report.failing)}, breaks {len(t.result.broken)}", markup=False)
            return
        edits_tests = " [bold yellow](edits tests)[/]" if report.fix.edits_tests else ""
        c.print(f"\n[bold green]✓ Verified fix[/]{edits_tests} ({report.fix.source}, {tried})")
        for note in report.fix.notes:
            c.print(f"  [bold]{escape(f'{note.path}:{note.line}')}[/] {escape(note.description)}")
        if report.fix.record is not None:
            c.print(f"  {report.fix.record}", markup=False, soft_wrap=True)
        c.print(Syntax(report.fix.patch.diff(), "diff", theme="ansi_dark", background_color="default"))
        c.print(f"[green]Verified:[/] {report.fix.verified.describe()} (in a shadow copy)")
        if report.applied:
            c.print(f"[bold green]Applied[/] to {', '.join(report.fix.patch.files)}. "
                    f"Undo with: frognano undo {path}")
        elif report.applied is None:
            c.print(f"[dim]Nothing was written. Apply it with: frognano fix {path} --apply[/]")
