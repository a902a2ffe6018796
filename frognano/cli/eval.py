"""``frognano eval TASKS.jsonl``: measure a solver on a task set (docs/ARCHITECTURE.md §6).

Registered on the main group by ``main.py``.  Progress goes to stderr (a rich bar with the
running resolve rate), the tables (or with ``--json`` one object) to stdout; a usage error
ends with one ``error: ...`` line and exit code 2.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import threading
from pathlib import Path

import click

from ..errors import EXIT_USAGE, FrogNanoError


def _error(message: str, as_json: bool = False) -> None:
    if as_json:
        click.echo(json.dumps({"status": "error", "message": message}))
    else:
        from rich.markup import escape

        from .render import stderr_console

        stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(EXIT_USAGE)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _mean(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.1f}{unit}"


def _rate(s) -> str:
    if s.resolve_rate is None:
        return "-"
    low, high = s.resolve_ci
    return f"{s.resolve_rate:.0%} [{low:.0%}, {high:.0%}]"


def _table(title: str, groups: list, ks: tuple[int, ...], ks_turns: tuple[int, ...]):
    from rich.table import Table

    table = Table(title=title)
    table.add_column("group", justify="left")
    for col in ("tasks", "episodes", "resolved", "rate [95% CI]"):
        table.add_column(col, justify="right")
    shown_ks = [k for k in ks if k > 1]
    for k in shown_ks:
        table.add_column(f"pass@{k}", justify="right")
        table.add_column(f"pass^{k}", justify="right")
    turn_cols = [k for k in ks_turns if k > 0]
    for k in turn_cols[:3]:
        table.add_column(f"SR_{k}", justify="right")
    for col in ("s/task", "errors"):
        table.add_column(col, justify="right")
    for s in groups:
        cells = [s.name, str(s.tasks), str(s.episodes), str(s.resolved), _rate(s)]
        for k in shown_ks:
            cells += [_pct(s.pass_at.get(k)), _pct(s.pass_hat.get(k))]
        cells += [_pct(s.sr_at.get(k)) for k in turn_cols[:3]]
        cells += ["-" if s.seconds_per_task is None else f"{s.seconds_per_task:.1f}", str(s.errors)]
        table.add_row(*cells)
    return table


class _Bar:
    """The progress protocol as one rich bar whose note is the running resolve rate."""

    def __init__(self, bars) -> None:
        self._bars = bars
        self._task = None

    def phase(self, title: str, total: int | None = None) -> None:
        if title == "evaluating":
            self._task = self._bars.add_task(title, total=total, note="")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self._task is not None and note is not None and (note.startswith("resolved") or not note):
            self._bars.update(self._task, completed=done, total=total, note=note[:60])


@click.command("eval")
@click.argument("tasks_file", metavar="TASKS.jsonl", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", "model", metavar="SPEC",
              help="Model for repair episodes: mlx:PATH_OR_ID, torch:PATH_OR_ID, openai:MODEL@URL or "
              "replay:EPISODE.json.  With it, the search runs first and the model after (as `fix` does).")
@click.option("--search-only", is_flag=True, help="The operator search alone (no model; the default "
              "without --model).")
@click.option("--model-only", is_flag=True, help="The model alone, without the search before it.")
@click.option("--repos", "repos", multiple=True, metavar="DIR", type=click.Path(path_type=Path),
              help="Where the tasks' repositories are: a repository folder (matched by name) or a "
              "folder holding them.  Repeatable.  Default: each task's repo path as written.")
@click.option("--episodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Attempts per task (pass@k and pass^k for k up to this).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N tasks (after --family).")
@click.option("--family", "family", metavar="PATTERN", default=None,
              help="Only tasks whose family matches this glob, e.g. 'compare-*' or '*-d2'.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tasks evaluated at once, each worker with its own shadow copies.")
@click.option("--ray", "ray", metavar="ADDRESS", default=None,
              help="Evaluate on Ray actors (--workers of them): a cluster address, 'auto', or 'local'.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append one JSON row per episode here; an interrupted run resumes from it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the tables.")
@click.option("--seed", type=int, default=0, show_default=True, help="Episode i samples with seed + i.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Seconds a test may run before it counts as hanging (default 30).")
@click.option("--max-turns", type=click.IntRange(min=1), default=None, help="Assistant turns per episode (default 16).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
              help="Tokens the model may generate per turn (default 512).")
@click.option("--partial-credit", is_flag=True, help="Reward the fraction of FAIL_TO_PASS tests that pass "
              "(0 when a PASS_TO_PASS test breaks) instead of all-or-nothing; resolve rates are unchanged.")
@click.option("-v", "--verbose", count=True, help="Log more (-v steps, -vv details).")
def eval_command(tasks_file: Path, model: str | None, search_only: bool, model_only: bool,
                 repos: tuple[Path, ...], episodes: int, limit: int | None, family: str | None,
                 workers: int, ray: str | None, out: Path | None, as_json: bool, seed: int,
                 timeout: float | None, max_turns: int | None, max_new_tokens: int | None, partial_credit: bool,
                 verbose: int) -> None:
    """Measure how well the operator search, a model, or both repair the bugs of TASKS.jsonl.

    TASKS.jsonl holds `frognano synth` output or SWE-smith / SWE-bench-style rows (instance_id,
    repo, base_commit, patch, FAIL_TO_PASS, PASS_TO_PASS).  Each task's repository is laid out
    at its buggy state in a shadow copy (your files are never written), the solver works through
    the same harness as `frognano fix`, and the task's own tests, run from pristine copies,
    decide the reward.  A task that cannot be set up (repository missing, base mismatch, patch
    not applying) and any failure of FrogNano itself are counted as errors, outside every rate.

    Prints the resolve rate with its 95% Wilson interval, pass@k and pass^k, SR_k (solved within
    k turns) and seconds per task, overall and per family and difficulty feature, then the
    episode diagnostics (error recovery, regressions, lost solutions, retries, invalid calls,
    loops, how the model episodes ended, turns, tokens and seconds per episode).
    """
    from .logs import setup_logging

    setup_logging(verbose)
    from rich.console import Console

    solver = _solver(model, search_only, model_only, as_json)
    err = Console(stderr=True, highlight=False)
    try:
        plan = _plan(solver, model, episodes, seed, repos, partial_credit,
                     timeout=timeout, max_turns=max_turns, max_new_tokens=max_new_tokens)
        tasks, problems = _tasks(tasks_file, family, limit, err, as_json)
        run = _evaluate(tasks, plan, out, workers, ray, err, as_json)
    except FrogNanoError as exc:
        _error(str(exc), as_json)
        return
    except OSError as exc:
        _error(f"{exc.filename or tasks_file}: {exc.strerror or exc}", as_json)
        return
    ids = {t.instance_id for t in tasks}
    rows = [r for r in run.rows if r["instance_id"] in ids and r["episode"] < episodes]
    if as_json:
        _print_json(solver, model, len(tasks), run, problems, rows)
    else:
        _print_tables(solver, model, len(tasks), run, rows, out)


def _solver(model: str | None, search_only: bool, model_only: bool, as_json: bool) -> str:
    """search, model or both, from the flags (a usage error for flags that contradict)."""
    if search_only and (model or model_only):
        _error("--search-only cannot be combined with --model or --model-only", as_json)
    if model_only and not model:
        _error("--model-only needs --model SPEC", as_json)
    return "search" if not model else ("model" if model_only else "both")


def _plan(solver: str, model: str | None, episodes: int, seed: int, repos: tuple[Path, ...],
          partial_credit: bool, **settings: float | int | None):
    """The evaluation's ``EvalPlan``, the model SPEC checked first; ``settings``: the Settings
    fields given as flags (None: not given)."""
    from ..training.env import RewardConfig
    from ..training.evaluate import EvalPlan

    if model:
        from ..runtime.base import parse_spec

        parse_spec(model)
    given = {k: v for k, v in settings.items() if v is not None}
    return EvalPlan(solver, model, episodes, seed, tuple(str(Path(r).resolve()) for r in repos),
                    given, RewardConfig(partial=partial_credit))


def _tasks(tasks_file: Path, family: str | None, limit: int | None, err, as_json: bool) -> tuple[list, list[str]]:
    """(the tasks to evaluate, the file's skipped rows), after --family and --limit; the skipped
    rows are shown on stderr, and no task left is a usage error."""
    from ..training.tasks import load_tasks

    tasks, problems = load_tasks(tasks_file)
    for line in problems:
        err.print(f"[yellow]skipped[/] {line}", soft_wrap=True, markup=True)
    if family:
        tasks = [t for t in tasks if fnmatch.fnmatchcase(t.family, family)]
    if limit:
        tasks = tasks[:limit]
    if not tasks:
        _error(f"{tasks_file}: no tasks to evaluate" + (f" in family {family!r}" if family else ""), as_json)
    return tasks, problems


def _evaluate(tasks: list, plan, out: Path | None, workers: int, ray: str | None, err, as_json: bool):
    """``training.evaluate.evaluate`` under a progress bar on stderr; Ctrl-C cancels the
    episodes in flight and exits 130 (a rerun with the same --out resumes)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..training.evaluate import evaluate

    cancel = threading.Event()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("[dim]{task.fields[note]}"),
                  console=err, transient=True, disable=as_json) as bars:
        try:
            return evaluate(tasks, plan, out=out, workers=workers, ray=ray, progress=_Bar(bars), cancel=cancel)
        except KeyboardInterrupt:
            cancel.set()
            err.print("interrupted" + (f"; rerun the same command to resume from {out}" if out else ""))
            sys.exit(130)


def _print_json(solver: str, model: str | None, n_tasks: int, run, problems: list[str], rows: list[dict]) -> None:
    from ..training.metrics import summarize

    errors = [r for r in rows if r["status"] == "error"]
    click.echo(json.dumps({"status": "ok", "solver": solver, "model": model, "tasks": n_tasks,
                           "ran": run.ran, "resumed": run.skipped, "seconds": round(run.seconds, 3),
                           "skipped_rows": problems, **summarize(rows).to_json(),
                           "errors": [{"instance_id": r["instance_id"], "episode": r["episode"],
                                       "kind": r.get("error_kind"), "error": r.get("error")}
                                      for r in errors]}))


def _print_tables(solver: str, model: str | None, n_tasks: int, run, rows: list[dict], out: Path | None) -> None:
    import shutil

    from rich.console import Console

    from ..training.metrics import summarize

    summary = summarize(rows)
    errors = [r for r in rows if r["status"] == "error"]
    # Wide enough that each row stays on one line when piped (rich assumes 80 columns then).
    console = Console(highlight=False, width=max(132, shutil.get_terminal_size((132, 24)).columns))
    what = {"search": "operator search", "model": f"model {model}", "both": f"search + model {model}"}[solver]
    overall = [summary.overall]
    console.print(_table(f"frognano eval: {what} on {n_tasks} task(s)", overall + list(summary.families.values()),
                         summary.ks, summary.ks_turns))
    console.print(_table("by difficulty feature", list(summary.features.values()), summary.ks, summary.ks_turns))
    _print_diagnostics(console, summary.overall, solver)
    resumed = f", {run.skipped} episode(s) resumed from {out}" if run.skipped else ""
    console.print(f"{run.ran} episode(s) run in {run.seconds:.1f} s{resumed}" + (f"; rows in {out}" if out else ""))
    for r in errors[:10]:
        console.print(f"[red]error[/] {r['instance_id']} (episode {r['episode']}): {r.get('error')}", soft_wrap=True)
    if len(errors) > 10:
        console.print(f"... {len(errors) - 10} more errors" + (f" (see {out})" if out else ""))


def _print_diagnostics(console, s, solver: str) -> None:
    """The episode diagnostics of the overall group ``s`` (a model's, or the search's regressions)."""
    if solver == "search":
        console.print(f"regressions {_pct(s.regression_rate)}")
        return
    console.print(f"error recovery {_pct(s.error_recovery_rate)}, regressions {_pct(s.regression_rate)}, "
                  f"lost solutions {_pct(s.lost_solution_rate)}, identical retries "
                  f"{_pct(s.identical_retry_rate)}, invalid tool calls {_pct(s.invalid_call_rate)}; "
                  f"per episode {_mean(s.mean_turns)} turns, {_mean(s.mean_tokens)} tokens "
                  f"({_mean(s.mean_tokens_out)} generated), "
                  f"{_mean(s.mean_seconds, ' s')}", soft_wrap=True)
    if s.model_episodes:
        ends = ", ".join(f"{end} {n}" for end, n in s.ends.items())
        console.print(f"{s.model_episodes} model episode(s): with an invalid call {_pct(s.invalid_episode_rate)}, "
                      f"looping {_pct(s.loop_rate)}; ended {ends}", soft_wrap=True)
