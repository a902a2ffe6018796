"""The cost of confining test runs: the same runs with ``sandbox = "off"`` and confined.

What it measures
    A bundled example project (copied to a temp dir) or any project given with ``--repo`` (a
    real library in its own venv, say more-itertools' sdist with pytest in ``.venv``) runs its
    whole suite N times through one ``TestRunner`` per (strategy, sandbox) pair: ``warm`` (the
    fork server forks a child per run) and ``fresh`` (a new interpreter per run); ``warm+cov``
    is a warm run with per-test line coverage, as the baseline of every fix runs.  ``off`` is the baseline; ``confined`` adds,
    per run, the Landlock ruleset (or Seatbelt profile) applied in the run's process and the
    subreaper's sweep of leftover processes.  (The audit hook that names denied writes runs only
    in the engine's rerun of failing tests: under coverage it cost +37% on more-itertools.)  Rounds
    alternate the two so that drift in machine load hits both.

Target: confined / off <= 1.05 (the confinement is about a millisecond a run).

    .venv/bin/python benchmarks/confinement.py                # calc, 20 warm and 6 fresh runs a round
    .venv/bin/python benchmarks/confinement.py --quick        # smoke run
    .venv/bin/python benchmarks/confinement.py --repo /tmp/more-itertools-10.5.0 --runs 3 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="calc", help="an example under examples/")
    parser.add_argument("--repo", type=Path, help="a real project to measure instead (used in place, "
                        "read-only: its shadow copy is what runs)")
    parser.add_argument("--runs", type=int, default=20, help="warm runs per round and sandbox mode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.rounds = 4, 1

    work = Path(tempfile.mkdtemp(prefix="frognano-bench-"))
    os.environ["FROGNANO_CACHE_DIR"] = str(work / "cache")
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.workspace import Workspace

    if args.repo is not None:
        project, name = args.repo.resolve(), args.repo.resolve().name
    else:
        project, name = work / args.project, args.project
        shutil.copytree(REPO / "examples" / args.project, project,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    # A real suite takes seconds a run: fewer of them (the ratio is what matters).
    strategies = (("warm", args.runs, False), ("fresh", max(2, args.runs // 3), False),
                  ("warm+cov", max(2, args.runs // 3), True))
    times: dict[tuple[str, str], list[float]] = {}
    how = ""
    try:
        with Workspace(project) as ws:
            ws.sync()
            for _ in range(args.rounds):
                for strategy, runs, coverage in strategies:
                    for mode in ("off", "auto"):
                        config = RunnerConfig(warm=strategy != "fresh", sandbox=mode)
                        with TestRunner(ws, config) as runner:
                            runner.run()  # start-up (the fork server) is not what is measured
                            for _ in range(runs):
                                started = time.perf_counter()
                                run = runner.run(coverage=coverage)
                                times.setdefault((strategy, mode), []).append(time.perf_counter() - started)
                            how = how or run.confinement or ""
    finally:
        shutil.rmtree(work, ignore_errors=True)

    body = []
    for strategy, _, _ in strategies:
        off = statistics.median(times[(strategy, "off")]) * 1000
        on = statistics.median(times[(strategy, "auto")]) * 1000
        body.append([name, strategy, str(len(times[(strategy, "off")])), f"{off:.1f}", f"{on:.1f}",
                     f"{on - off:+.1f}", f"{on / off:.3f}", "<= 1.05"])
    title = f"Confinement cost per run ({how or 'unconfined here: both columns are off'})"
    _table.print_table(title, ["project", "runner", "runs", "off ms", "confined ms", "delta ms",
                               "ratio", "target"], body, left={0, 1})


if __name__ == "__main__":
    main()
