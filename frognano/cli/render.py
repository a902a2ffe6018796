"""Terminal rendering of engine results with rich (used by the CLI and watch mode)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..repair.engine import Diagnosis, FixReport

progress_log = logging.getLogger("frognano.progress")


@lru_cache(maxsize=1)
def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


class FixRenderer:
    """The diagnosis as soon as it is known, progress while the engine searches, then the
    report (stdout).

    Progress is a transient bar on stderr when both streams are terminals; anywhere else it is
    plain log lines (logger ``frognano.progress``, INFO: shown with ``-v``), so a pipe or a
    log file never gets cursor codes or blank lines.  Nothing is ever cut at the terminal's
    width: long lines are left for the terminal to wrap (``soft_wrap``).
    """

    LOG_EVERY = 2.0  # seconds between two plain progress lines of one phase

    def __init__(self, progress_console: Console, *, show_progress: bool = True,
                 out: Console | None = None) -> None:
        self.console = out or Console(highlight=False, soft_wrap=True)
        self._pconsole = progress_console
        self._show = show_progress and progress_console.is_terminal and self.console.is_terminal
        self._progress: Progress | None = None
        self._task = None
        self._phase = ""
        self._logged_at = 0.0
        self._logged_best = ""
        self._diagnosed = False  # the failing tests and suspicious lines are printed already

    @contextlib.contextmanager
    def live(self) -> Iterator[None]:
        if not self._show:
            yield
            return
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("[dim]{task.fields[note]}"),
            console=self._pconsole, transient=True, redirect_stdout=False, redirect_stderr=False,
        )
        try:
            with self._progress:
                yield
        finally:
            self._progress = None

    # the Progress protocol (frognano.progress.Progress)
    def phase(self, title: str, total: int | None = None) -> None:
        self._phase, self._logged_at, self._logged_best = title, time.monotonic(), ""
        if self._progress is None:
            progress_log.info("%s", title)
            return
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(title, total=total, note="")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self._progress is not None:
            if self._task is not None:
                self._progress.update(self._task, completed=done, total=total, note=_short(note))
            return
        # Plain lines: when the best partial fix changes, else every few seconds.
        best = note.partition(BEST)[2]
        now = time.monotonic()
        if (best and best != self._logged_best) or now - self._logged_at >= self.LOG_EVERY:
            self._logged_at, self._logged_best = now, best or self._logged_best
            progress_log.info("%s: %d%s tried%s", self._phase, done, f" of {total}" if total else "",
                              f"; best so far: {best}" if best else "")

    # -- the diagnosis, as soon as it is known --------------------------------------------
    def diagnosis(self, diagnosis: Diagnosis, *, show: bool = True) -> None:
        """The failing tests and the suspicious lines, before any search starts; ``show=False``
        when the face has shown them already (the report then leaves them out too)."""
        if not diagnosis.failing:
            return
        self._diagnosed = True
        if not show:
            return
        if self._progress is not None and self._pconsole is not self.console:
            self._progress.stop()  # a bar on stderr would be torn by lines written to stdout
            try:
                self._print_diagnosis(diagnosis)
            finally:
                self._progress.start()
        else:
            self._print_diagnosis(diagnosis)  # the same console: rich prints above the bar

    def _print_diagnosis(self, diagnosis: Diagnosis) -> None:
        c, run = self.console, diagnosis.run
        failing = diagnosis.failing
        c.print(f"[bold red]✗ {_count(len(failing), 'failing test')}[/] (of {len(run.tests)})")
        for nodeid in failing[:10]:
            t = run.tests.get(nodeid)
            c.print(f"  [bold]{escape(nodeid)}[/]")
            if t is not None:
                c.print(f"      {t.summary}", style="red", markup=False)
                if t.frames:
                    f = t.frames[-1]
                    c.print(f"      at {f.path}:{f.line} in {f.function}", style="dim", markup=False)
        if len(failing) > 10:
            c.print(f"  ... and {len(failing) - 10} more")
        if diagnosis.locations:
            c.print("\n[bold]Suspicious lines[/]")
            for loc in diagnosis.locations[:5]:
                c.print(f"  {loc.describe()}", markup=False)

    # -- the report -----------------------------------------------------------------------
    def report(self, report: FixReport, path: Path, *, apply_hint: str | None = None,
               next_steps: bool = True, suggest_model: bool = True) -> None:
        """The outcome.  ``apply_hint`` is the command that writes the fix (default: ``frognano
        fix PATH --apply``); ``next_steps`` suggests what to try after no fix (a model too,
        unless ``suggest_model`` is off: the one given could not be used)."""
        c = self.console
        for note in report.notes:
            self._pconsole.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
        if report.status == "passing":
            c.print(f"[green]✓[/] {escape(report.message)}; nothing to fix.")
            return
        if report.diagnosis is not None and not self._diagnosed:
            self._print_diagnosis(report.diagnosis)  # kept on an error too: the model's, say
        if report.episodes:
            c.print("\n[bold]Model episodes[/]")
            for i, e in enumerate(report.episodes, 1):
                c.print(f"  episode {i}: {e.status}, {_count(len(e.turns), 'turn')}, "
                        f"{_count(e.malformed, 'malformed call')}, {_count(e.tokens_in + e.tokens_out, 'token')}"
                        f" — {e.record}", markup=False)
        if report.status == "error":
            self._pconsole.print(f"[bold red]error:[/] {escape(report.message)}", soft_wrap=True)
            return
        s = report.search
        took = f"{s.tried + s.pairs_tried} candidates, {s.seconds:.1f} s" if s else ""
        if report.fix is None:
            why = report.message.removeprefix("no verified fix: ")  # the heading says it already
            c.print(f"\n[bold yellow]No verified fix[/]{f' ({took})' if took else ''}: {escape(why)}")
            if s and s.best:
                c.print("  closest candidates (not verified):")
                for t in s.best:
                    c.print(f"    {'; '.join(map(str, t.candidate.notes))} — fixes {len(t.result.fixed)} of "
                            f"{len(report.failing)}, breaks {len(t.result.broken)}", markup=False)
            located = report.diagnosis.locations[:3] if report.diagnosis is not None else []
            if any(loc.moved for loc in located):  # the search's edits ranked the lines again
                c.print("  likeliest lines, by what the edits did to the failing tests:")
                for loc in located:
                    c.print(f"    {loc.describe()}", markup=False)
            if next_steps:
                self._next_steps(report, path, suggest_model and not report.episodes)
            return
        edits_tests = " [bold yellow](edits tests)[/]" if report.fix.edits_tests else ""
        c.print(f"\n[bold green]✓ Verified fix[/]{edits_tests} ({report.fix.source}{f', {took}' if took else ''})")
        for note in report.fix.notes:
            c.print(f"  [bold]{escape(f'{note.path}:{note.line}')}[/] {escape(note.description)}")
        if report.fix.record is not None:
            c.print(f"  {report.fix.record}", markup=False)
        self.diff(report.fix.patch.diff())
        c.print(f"[green]Verified:[/] {report.fix.verified.describe()} (in a shadow copy)")
        if report.alternatives:  # the visible tests may not tell a correct fix from a plausible one
            c.print(f"[dim]Also verified ({len(report.alternatives)}, ranked below this one; "
                    "--json has their diffs):[/]")
            for alt in report.alternatives:
                c.print(f"  [dim]{escape('; '.join(map(str, alt.notes)))}[/]")
        if report.applied:
            c.print(f"[bold green]Applied[/] to {', '.join(report.fix.patch.files)}. "
                    f"Undo with: frognano undo {path}")
        elif report.applied is None:
            hint = apply_hint or f"frognano fix {path} --apply"
            c.print(f"[dim]Nothing was written. Apply it with: {escape(hint)}[/]")

    def diff(self, text: str) -> None:
        """A unified diff, every line whole (a cut ``-``/``+`` line would be a lie)."""
        for line in text.splitlines():
            style = ("bold" if line.startswith(("---", "+++")) else "green" if line.startswith("+")
                     else "red" if line.startswith("-") else "cyan" if line.startswith("@@") else "")
            self.console.print(Text(line, style=style), soft_wrap=True)

    def _next_steps(self, report: FixReport, path: Path, suggest_model: bool) -> None:
        c, s = self.console, report.search
        c.print("[bold]Next steps[/]")
        if suggest_model:
            c.print(f"  let a model try:        frognano fix {path} --model SPEC   "
                    "(mlx:PATH, torch:PATH or openai:MODEL@URL)", markup=False)
        if s is not None and s.stopped in ("budget", "time") or (s is not None and s.generated > s.tried):
            c.print("  search further:         raise max_candidates, max_pairs, search_seconds or fix_seconds in "
                    "[tool.frognano] (or FROGNANO_MAX_PAIRS=...)", markup=False)
        if len(report.failing) > 1:
            c.print(f"  one failure at a time:  frognano fix {path} -k EXPR", markup=False)


BEST = " · best so far: "  # how search.py's progress note names the best partial fix


def _short(note: str) -> str:
    """The bar's note: the best partial fix once there is one (the latest candidate flickers)."""
    head, _, best = note.partition(BEST)
    return f"best so far: {best}" if best else head


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
