"""Candidates validated per second: FrogNano's warm runner against a fresh pytest per candidate.

What it measures
    A *candidate* is a one-token edit to the buggy module of a project.  Validating it means
    applying the edit, running the originally failing test(s) plus the tests covering that
    module, reading the outcome, and reverting.  Candidates alternate between the correct fix
    and a wrong edit, so half of them pass.  Three ways to validate the same candidates are
    timed in the same run:

    ``pytest (fresh)``   the baseline, what a SWE-smith-style validator does: write the edit into
                         a plain temporary copy of the project and run
                         ``python -m pytest -q -p no:cacheprovider NODEIDS`` in a new process,
                         reading only its exit code;
    ``frognano fresh``   ``TestRunner(RunnerConfig(warm=False))``: a new worker process per
                         candidate, structured per-test results;
    ``frognano warm``    ``TestRunner(RunnerConfig(warm=True, swap=False))``: the fork server,
                         which imports pytest and the project's third-party dependencies once
                         and forks a child per candidate, which imports the project and collects
                         the selected tests;
    ``frognano warm+swap`` ``TestRunner(RunnerConfig(warm=True, swap=True))``, the default: a
                         warm session imports the project and collects the suite once; each
                         candidate forks it, swaps the edited function's code in and runs the
                         already collected items (the script exits 1 if a candidate was not
                         swapped, so the row measures the swap alone).

    ``seconds`` covers the candidate loop only.  One-time costs (copying the project, syncing
    the shadow, starting the fork server, one warm-up run of the unedited code) are shown
    apart, as ``setup s``.  Every mode runs with ``PYTHONDONTWRITEBYTECODE=1`` (the runner sets
    it itself; the baseline gets it so that two same-size edits within one second cannot be
    served a stale ``.pyc``), so all three compile the project's files afresh each time.

Projects
    (a) ``examples/calc``: pure Python, a comparison bug; start-up is mostly pytest itself.
    (b) a project generated into a temporary folder whose ``conftest.py`` imports numpy and
        pandas and builds a DataFrame in a fixture: the heavy-import case a warm server is for.
    (c) a real library: more-itertools 10.5.0 from its sdist (downloaded, or ``--library-source``)
        in its own venv with only pytest, a one-token bug in ``padded`` (``n - 1`` -> ``n``), the
        candidates running ``tests/test_more.py::PaddedTest`` out of a 5,000-line test module.

Targets: ``frognano warm`` at least 5x ``pytest (fresh)`` on (b); ``frognano warm+swap`` at least
20x on (c) and at least 30 candidates/s on the examples.  The script exits 1 if the modes disagree on which candidates pass (or with
what the candidate is known to do), so a fast but wrong runner never reports a good number.

    .venv/bin/python benchmarks/validation.py               # ~20 candidates per project
    .venv/bin/python benchmarks/validation.py --quick       # smoke run
    .venv/bin/python benchmarks/validation.py --phases      # also time the warm run's phases
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Candidate:
    label: str
    text: str  # the whole new text of the module
    expect_pass: bool


@dataclass
class Project:
    name: str
    root: Path
    module: str  # relative path of the buggy module
    nodeids: list[str]  # failing test(s) plus the tests covering the module
    candidates: list[Candidate] = field(default_factory=list)
    python: str = sys.executable  # the project's interpreter (a real library has its own venv)


@dataclass
class Row:
    project: str
    mode: str
    n: int
    setup: float
    seconds: float
    outcomes: list[bool]
    profile: dict[str, list[float]] = field(default_factory=dict)  # warm+swap: ms per phase

    @property
    def rate(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("inf")


# -- projects -------------------------------------------------------------------------------------

def _one_token_edits(original: str, old: str, fix: str, wrong: list[str], n: int) -> list[Candidate]:
    """``n`` candidates: the fix at even positions, the wrong edits in turn at odd ones."""
    assert original.count(old) == 1, f"{old!r} must occur exactly once"
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(Candidate(f"fix {fix!r}", original.replace(old, fix), True))
        else:
            bad = wrong[(i // 2) % len(wrong)]
            out.append(Candidate(f"wrong {bad!r}", original.replace(old, bad), False))
    return out


def calc_project(n: int) -> Project:
    root = REPO / "examples" / "calc"
    module = "calc/stats.py"
    original = (root / module).read_text()
    # ``age > 17`` would be a correct fix as well (ages are integers), so it is not a wrong edit.
    candidates = _one_token_edits(original, "age > 18", "age >= 18",
                                  ["age < 18", "age > 19", "age == 18", "age <= 18"], n)
    return Project("calc", root, module, ["tests/test_stats.py"], candidates)


_DATA_FILES = {
    "pyproject.toml": """\
        [project]
        name = "readings"
        version = "0.1.0"

        [tool.pytest.ini_options]
        testpaths = ["tests"]
        """,
    "readings/__init__.py": "",
    "readings/clean.py": '''\
        """Sensor readings: keep the good ones, summarise them."""

        import numpy as np
        import pandas as pd


        def in_range(frame: pd.DataFrame, low: float, high: float) -> pd.DataFrame:
            """Rows whose value lies in the closed interval [low, high]."""
            return frame[(frame["value"] >= low) & (frame["value"] < high)]


        def spread(frame: pd.DataFrame) -> float:
            return float(np.ptp(frame["value"].to_numpy()))


        def per_sensor_mean(frame: pd.DataFrame) -> dict:
            return {k: float(v) for k, v in frame.groupby("sensor")["value"].mean().items()}
        ''',
    "tests/conftest.py": '''\
        import numpy as np
        import pandas as pd
        import pytest


        @pytest.fixture
        def readings():
            values = np.array([0.5, 1.0, 2.5, 4.0, 5.0, 7.5])
            return pd.DataFrame({"sensor": ["a", "b", "a", "b", "a", "b"], "value": values})
        ''',
    "tests/test_clean.py": '''\
        from readings.clean import in_range, per_sensor_mean, spread


        def test_in_range_inside(readings):
            assert list(in_range(readings, 1.5, 4.5)["value"]) == [2.5, 4.0]


        def test_in_range_edges(readings):
            assert list(in_range(readings, 1.0, 5.0)["value"]) == [1.0, 2.5, 4.0, 5.0]


        def test_in_range_empty(readings):
            assert in_range(readings, 8.0, 9.0).empty


        def test_spread(readings):
            assert spread(readings) == 7.0


        def test_per_sensor_mean(readings):
            assert per_sensor_mean(readings) == {"a": 8.0 / 3, "b": 12.5 / 3}
        ''',
}


def data_project(parent: Path, n: int) -> Project:
    root = parent / "readings"
    for rel, text in _DATA_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    module = "readings/clean.py"
    original = (root / module).read_text()
    candidates = _one_token_edits(original, '(frame["value"] < high)', '(frame["value"] <= high)',
                                  ['(frame["value"] > high)', '(frame["value"] == high)',
                                   '(frame["value"] != high)'], n)
    return Project("numpy+pandas", root, module, ["tests/test_clean.py"], candidates)


LIBRARY = "more-itertools==10.5.0"
# The bug: padded(..., next_multiple=True) yields one item too many per group.
LIBRARY_BUG = ("yield islice(iterable_with_repeat, n - 1)", "yield islice(iterable_with_repeat, n)")


def library_project(parent: Path, n: int, source: Path | None) -> Project:
    """more-itertools from its sdist (or ``source``, an unpacked copy), in its own venv with only
    pytest, with a one-token bug in ``padded``; the candidates run ``PaddedTest``."""
    from synthesis import fetch_library, make_venv  # benchmarks/synthesis.py: sdist + venv

    scratch = parent / "library"
    scratch.mkdir()
    if source is None:
        source = fetch_library(LIBRARY, scratch)
    root = scratch / "more-itertools"
    shutil.copytree(source, root, ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", ".git"))
    py = make_venv(scratch)
    module = "more_itertools/more.py"
    fixed = (root / module).read_text()
    good, bad = LIBRARY_BUG
    buggy = fixed.replace(good, bad, 1)
    (root / module).write_text(buggy)
    candidates = _one_token_edits(buggy, bad, good, [
        "yield islice(iterable_with_repeat, n - 2)", "yield islice(iterable_with_repeat, n + 1)",
        "yield islice(iterable_with_repeat, n * 1)", "yield islice(iterable_with_repeat, 1 - n)"], n)
    return Project("more-itertools", root, module, ["tests/test_more.py::PaddedTest"], candidates, py)


# -- the ways to validate ----------------------------------------------------------------------------

def _pytest_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_pytest_fresh(project: Project, scratch: Path) -> Row:
    started = time.perf_counter()
    copy = scratch / f"{project.root.name}-plain"
    shutil.copytree(project.root, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    target = copy / project.module
    original = target.read_bytes()
    env = _pytest_env()
    cmd = [project.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *project.nodeids]

    def once() -> bool:
        proc = subprocess.run(cmd, cwd=copy, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if proc.returncode not in (0, 1):  # 2+: interrupted, internal or usage error, no tests
            raise SystemExit(f"pytest exited {proc.returncode} in {copy}: the benchmark is broken")
        return proc.returncode == 0

    once()  # warm-up on the unedited code: page cache, same as the other modes
    setup = time.perf_counter() - started
    outcomes = []
    started = time.perf_counter()
    for cand in project.candidates:
        target.write_text(cand.text)
        try:
            outcomes.append(once())
        finally:
            target.write_bytes(original)
    return Row(project.name, "pytest (fresh)", len(outcomes), setup, time.perf_counter() - started, outcomes)


def run_frognano(project: Project, warm: bool, phases: dict[str, list[float]] | None = None,
                 swap: bool = False) -> Row:
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.workspace import Workspace

    started = time.perf_counter()
    with Workspace(project.root) as ws:
        ws.sync()
        runner = TestRunner(ws, RunnerConfig(warm=warm, swap=swap, python=project.python))
        try:
            first = runner.run(project.nodeids)  # the run that finds the failures; starts the server
            if warm and not runner.warm:
                raise SystemExit(f"the warm server did not start: {runner.warm_reason}")
            if not first.failing:
                raise SystemExit(f"{project.name}: the unedited project has no failing test")
            if swap and runner.sessions != 1:
                raise SystemExit(f"{project.name}: no warm session ({runner._session_failed})")
            setup = time.perf_counter() - started
            outcomes = []
            profile: dict[str, list[float]] = {}
            started = time.perf_counter()
            for cand in project.candidates:
                t0 = time.perf_counter()
                with ws.edited({project.module: cand.text}):
                    t1 = time.perf_counter()
                    result = runner.run(project.nodeids)
                    t2 = time.perf_counter()
                t3 = time.perf_counter()
                if not result.tests:
                    raise SystemExit(f"{project.name}: no test ran for {cand.label}")
                if swap and result.swapped is None:
                    raise SystemExit(f"{project.name}: {cand.label} was not swapped: {result.fallback}")
                if swap:
                    for phase, ms in result.timing.items():
                        profile.setdefault(phase, []).append(ms)
                    profile.setdefault("whole candidate (edit, run, revert)", []).append((t3 - t0) * 1000)
                outcomes.append(result.ok)
                if phases is not None:
                    phases["apply edit"].append(t1 - t0)
                    phases["runner.run"].append(t2 - t1)
                    phases["revert edit"].append(t3 - t2)
                    phases["  test bodies (plugin durations)"].append(
                        sum(t.duration for t in result.tests.values()))
            elapsed = time.perf_counter() - started
        finally:
            runner.close()
    mode = "frognano warm+swap" if swap else "frognano warm" if warm else "frognano fresh"
    return Row(project.name, mode, len(outcomes), setup, elapsed, outcomes, profile)


# -- the swap against a re-import, every operator kind, on the real library --------------------------

def operator_agreement(project: Project, per_kind: int = 2) -> tuple[list[list[str]], list[str]]:
    """For up to ``per_kind`` mutations of every operator kind in the library's module, the
    tests covering the mutated function run swapped and re-imported: the outcomes must match."""
    from frognano.operators import mutations
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.spectra import CoverageMap
    from frognano.sandbox.workspace import Workspace
    from frognano.repair.localize import StatementMap

    rows: dict[str, list[int]] = {}
    reasons: dict[str, int] = {}
    problems: list[str] = []
    with Workspace(project.root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(python=project.python)) as runner:
            coverage = CoverageMap.from_run(runner.run(None, coverage=True))
            source = (ws.shadow / project.module).read_text()
            spans = StatementMap(source)
            counts: dict[str, int] = {}
            for m in mutations(source, project.module):
                if counts.get(m.operator, 0) >= per_kind or not m.function:
                    continue
                ids = sorted(coverage.tests_covering(project.module, spans.function_span(m.function)))[:40]
                if not ids:
                    continue
                counts[m.operator] = counts.get(m.operator, 0) + 1
                limits = {n: 2.0 for n in ids}  # a mutant that loops forever: 2 s, as the search allows
                with ws.edited({project.module: m.apply(source)}):
                    runner.config.swap = True
                    swapped = runner.run(ids, timeouts=limits)
                    runner.config.swap = False
                    plain = runner.run(ids, timeouts=limits)
                    runner.config.swap = True
                row = rows.setdefault(m.operator, [0, 0, 0])
                row[0] += 1
                row[1] += swapped.swapped is not None
                if swapped.fallback:
                    reasons[swapped.fallback.split(": ", 1)[-1]] = reasons.get(swapped.fallback.split(": ", 1)[-1], 0) + 1
                same = {n: t.outcome for n, t in swapped.tests.items()} == {n: t.outcome for n, t in plain.tests.items()}
                row[2] += same
                if not same:
                    problems.append(f"{project.name}: swap and re-import disagree on {m.function} "
                                    f"line {m.line} ({m.operator}: {m.description})")
    table = [[kind, str(n), str(swapped), str(agree)] for kind, (n, swapped, agree) in sorted(rows.items())]
    for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]:
        print(f"re-imported {n}x: {why}", file=sys.stderr)
    return table, problems


# -- phase timing (warm mode) ---------------------------------------------------------------------

def _instrument(phases: dict[str, list[float]]) -> Callable[[], None]:
    """Wrap the runner's internals with timers; returns the function that unwraps them."""
    from frognano.sandbox import runner as runner_mod

    originals = {}

    def wrap(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)
        originals[(owner, name)] = fn

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                phases[label].append(time.perf_counter() - t)

        setattr(owner, name, timed)

    wrap(runner_mod.TestRunner, "_request", "  build request")
    wrap(runner_mod.TestRunner, "_run_warm", "  fork + pytest in the child (request -> exit)")
    wrap(runner_mod, "parse_results", "  parse results")
    wrap(runner_mod, "tail", "  read log tail")

    def undo() -> None:
        for (owner, name), fn in originals.items():
            setattr(owner, name, fn)

    return undo


def child_pytest_profile(project: Project, scratch: Path, top: int = 18) -> str:
    """cProfile of what a warm child does: pytest.main on the project, dependencies pre-imported.

    Runs in a separate process that imports pytest and the project's third-party modules first,
    as the fork server does, so the profile shows only the per-candidate work.
    """
    copy = scratch / f"{project.root.name}-profile"
    shutil.copytree(project.root, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    script = textwrap.dedent(f"""
        import cProfile, io, os, pstats, sys
        sys.dont_write_bytecode = True
        import pytest, numpy, pandas  # what the fork server pre-imports for this project
        import _pytest.config
        for name in _pytest.config.default_plugins:
            try:
                __import__("_pytest." + name)
            except Exception:
                pass
        sys.path.insert(0, os.getcwd())
        out = open(os.devnull, "w"); real = sys.stdout; sys.stdout = out
        prof = cProfile.Profile()
        prof.enable()
        pytest.main(["-q", "-p", "no:cacheprovider", *{project.nodeids!r}])
        prof.disable()
        sys.stdout = real
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats({top})
        print(s.getvalue())
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=copy, env=_pytest_env(),
                          capture_output=True, text=True)
    return proc.stdout + proc.stderr


# -- report ---------------------------------------------------------------------------------------

def check(project: Project, rows: list[Row]) -> list[str]:
    problems = []
    expected = [c.expect_pass for c in project.candidates]
    for row in rows:
        for i, (got, want) in enumerate(zip(row.outcomes, expected)):
            if got != want:
                problems.append(f"{project.name} / {row.mode}: candidate {i} ({project.candidates[i].label}) "
                                f"{'passed' if got else 'failed'}, expected it to "
                                f"{'pass' if want else 'fail'}")
    base = rows[0].outcomes
    for row in rows[1:]:
        if row.outcomes != base:
            problems.append(f"{project.name}: {row.mode} disagrees with {rows[0].mode}: "
                            f"{row.outcomes} vs {base}")
    return problems


def print_table(rows: list[Row], elapsed: float) -> None:
    baseline = {r.project: r.rate for r in rows if r.mode == "pytest (fresh)"}
    headers = ["project", "mode", "candidates", "setup s", "seconds", "candidates/s", "ratio vs fresh pytest"]
    body = [
        [r.project, r.mode, str(r.n), f"{r.setup:.2f}", f"{r.seconds:.2f}", f"{r.rate:.1f}",
         f"{r.rate / baseline[r.project]:.2f}x"]
        for r in rows
    ]
    title = f"Candidate validation throughput (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)"
    _table.print_table(title, headers, body, left={0, 1}, width=110)
    print(f"total wall time {elapsed:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time candidate validation (edit, run the covering tests, read the outcome) with "
                    "FrogNano's warm fork server, its fresh-process mode, and a fresh `python -m pytest` "
                    "per candidate, on examples/calc and on a generated numpy+pandas project. "
                    "Exits 1 if the modes disagree on which candidates pass.",
    )
    parser.add_argument("--candidates", type=int, default=20, metavar="N",
                        help="candidates per project and mode, alternating fix / wrong edit (default 20)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 4 candidates per project (overrides --candidates)")
    parser.add_argument("--project", choices=["calc", "data", "library", "all"], default="all",
                        help="which project to measure (default all: calc, data and the real library)")
    parser.add_argument("--operators", action="store_true",
                        help="also run up to 2 mutations of every operator kind in the real library swapped "
                             "and re-imported, and check that the outcomes agree")
    parser.add_argument("--library-source", type=Path, metavar="DIR",
                        help=f"an unpacked sdist of {LIBRARY} to use instead of downloading it")
    parser.add_argument("--phases", action="store_true",
                        help="also time the phases of the warm runs and print a cProfile of one "
                             "warm-child-equivalent pytest run on the numpy+pandas project")
    args = parser.parse_args(argv)
    n = 4 if args.quick else args.candidates
    if n < 2:
        parser.error("--candidates must be at least 2 (one fix, one wrong edit)")

    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="frognano-bench-") as tmp:
        scratch = Path(tmp)
        # Shadow copies go to a throwaway cache, never the user's ~/.cache/frognano.
        os.environ["FROGNANO_CACHE_DIR"] = str(scratch / "cache")
        projects = []
        if args.project in ("calc", "all"):
            projects.append(calc_project(n))
        if args.project in ("data", "all"):
            projects.append(data_project(scratch, n))
        if args.project in ("library", "all"):
            projects.append(library_project(scratch, n, args.library_source))

        rows: list[Row] = []
        problems: list[str] = []
        phases: dict[str, dict[str, list[float]]] = {}
        for project in projects:
            print(f"{project.name}: {n} candidates x 4 modes ...", file=sys.stderr, flush=True)
            mine = [run_pytest_fresh(project, scratch), run_frognano(project, warm=False)]
            if args.phases:
                timing: dict[str, list[float]] = {k: [] for k in (
                    "apply edit", "runner.run", "  build request",
                    "  fork + pytest in the child (request -> exit)", "  parse results",
                    "  read log tail", "  test bodies (plugin durations)", "revert edit")}
                undo = _instrument(timing)
                try:
                    mine.append(run_frognano(project, warm=True, phases=timing))
                finally:
                    undo()
                # Drop the warm-up run's timings (taken before the candidate loop).
                for key in ("  build request", "  fork + pytest in the child (request -> exit)",
                            "  parse results", "  read log tail"):
                    timing[key] = timing[key][-n:]
                phases[project.name] = timing
            else:
                mine.append(run_frognano(project, warm=True))
            mine.append(run_frognano(project, warm=True, swap=True))
            problems += check(project, mine)
            rows += mine

        if args.operators:
            library = next((p for p in projects if p.name == "more-itertools"), None)
            if library is not None:
                table, more = operator_agreement(library)
                problems += more
                _table.print_table("Swap vs re-import on more-itertools, by operator kind",
                                   ["operator", "mutations", "swapped", "same outcomes"], table, left={0})
        print_table(rows, time.perf_counter() - wall)
        for row in rows:
            if row.profile:
                whole = statistics.median(row.profile.pop("whole candidate (edit, run, revert)"))
                parts = {k: statistics.median(v) for k, v in row.profile.items()}
                rest = whole - sum(parts.values())
                print(f"\n{row.project}, {row.mode}: median ms per candidate, {whole:.1f} in all")
                for label, ms in [*parts.items(), ("edit + revert, request, relay, results, exit", rest)]:
                    print(f"  {label:<48} {ms:8.1f}")
        for name, timing in phases.items():
            print(f"\nwarm run phases, {name} (median ms per candidate):")
            for label, values in timing.items():
                if values:
                    print(f"  {label:<50} {statistics.median(values) * 1000:8.1f}")
        if args.phases:
            data = next((p for p in projects if p.name == "numpy+pandas"), None)
            if data is not None:
                print("\ncProfile of pytest.main in a process with pytest, numpy and pandas already "
                      "imported (what a warm child does per candidate):")
                print(child_pytest_profile(data, scratch))

    if problems:
        print("\n!!! MISMATCH: the modes do not agree on which candidates pass !!!", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
