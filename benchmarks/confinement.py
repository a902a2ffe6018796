"""The cost of confining test runs: the same runs with ``sandbox = "off"`` and confined.

What it measures
    A bundled example project (copied to a temp dir) or any project given with ``--repo`` (a
    real library in its own venv, say more-itertools' sdist with pytest in ``.venv``) runs its
    whole suite N times through one ``TestRunner`` per (strategy, sandbox) pair: ``warm`` (the
    fork server forks a child per run) and ``fresh`` (a new interpreter per run); ``warm+cov``
    is a warm run with per-test line coverage, as the baseline of every fix runs.  ``off`` is
    the baseline; ``confined`` adds, per run, what the run's process does to confine itself
    (Landlock's ruleset, or Seatbelt's profile; on Linux also its own user, mount and network
    namespaces with the tree read-only, and the seccomp filter) and the subreaper's sweep of
    leftover processes.  (The audit hook that names denied writes runs only in the engine's
    rerun of failing tests: under coverage it cost +37% on more-itertools.)  The two modes'
    runs take turns, so that drift in the machine's load hits both alike.

Target: confined / off <= 1.05 (the confinement is a few milliseconds a run).  On a
loaded machine a whole run's time varies by more than that, so a second table measures the
confinement alone: a forked child that confines itself (or not) and exits, the median of many.

    .venv/bin/python benchmarks/confinement.py                # calc, 20 warm and 6 fresh runs a round
    .venv/bin/python benchmarks/confinement.py --quick        # smoke run
    .venv/bin/python benchmarks/confinement.py --repo /tmp/more-itertools-10.5.0 --runs 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent

# A child per sample: fork, confine (or not) in the child as a run's process does, exit, reap.
SETUP = """
import json, os, statistics, sys, tempfile, time
import frognano_confine
frognano_confine.probe()  # as the fork server does before it forks any run
frognano_confine.probe_namespaces()
tmp = tempfile.mkdtemp()
out = {}
for mode in ("off", "confined") * 3:
    for _ in range(int(sys.argv[1])):
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            if mode == "confined":
                frognano_confine.confine([tmp])
            os._exit(0)
        os.waitpid(pid, 0)
        out.setdefault(mode, []).append((time.perf_counter() - started) * 1000)
print(json.dumps({m: statistics.median(v) for m, v in out.items()}))
"""


def setup_cost(samples: int) -> dict[str, float]:
    """Median ms of a forked child that exits at once, unconfined and confined."""
    from frognano.sandbox.process import WORKER_DIR

    env = {**os.environ, "PYTHONPATH": str(WORKER_DIR)}
    out = subprocess.run([sys.executable, "-c", SETUP, str(samples)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


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

    setup = setup_cost(10 if args.quick else 50)
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
                    runners = {mode: TestRunner(ws, RunnerConfig(warm=strategy != "fresh", sandbox=mode))
                               for mode in ("off", "auto")}
                    try:
                        for runner in runners.values():
                            runner.run()  # start-up (the fork server) is not what is measured
                        # Run by run in turn, so that the machine's load hits both alike.
                        for _ in range(runs):
                            for mode, runner in runners.items():
                                started = time.perf_counter()
                                run = runner.run(coverage=coverage)
                                times.setdefault((strategy, mode), []).append(time.perf_counter() - started)
                                how = how or run.confinement or ""
                    finally:
                        for runner in runners.values():
                            runner.close()
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
    _table.print_table("The confinement alone: fork, confine, exit (median ms)",
                       ["off ms", "confined ms", "delta ms"],
                       [[f"{setup['off']:.2f}", f"{setup['confined']:.2f}",
                         f"{setup['confined'] - setup['off']:+.2f}"]], left=set())


if __name__ == "__main__":
    main()
