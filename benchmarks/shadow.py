"""What keeping the shadow copy pristine costs per run, against a run of the tests it guards.

What it measures
    Before and after every run, verification calls ``Workspace.ensure_pristine``: one
    ``scandir`` walk of the shadow with a stat per file, which restores every project file a run
    changed and removes every file the project does not have (issue 25, row 2).  Timed in the
    same process, on the same shadow:

    ``check (pristine)``       ``ensure_pristine`` on a shadow that is as FrogNano left it: the
                               common case, and what every run pays twice;
    ``check (planted)``        the same after a "run" planted ``tests/__init__.py``,
                               ``tests/sub/conftest.py``, a ``pytest.toml`` and an output file
                               (the walk, the removals and their report);
    ``earlier check``          the check it replaces, for reference: a stat of the protected
                               files and an existence test of a fixed list of names;
    ``candidate run``          a warm run of one test class (what a candidate costs);
    ``suite run``              a warm run of the whole suite;
    ``a 5,000-file tree``      the pristine check on a generated tree of one-line modules.

    ``ms`` is the median of the repetitions; ``per run`` is twice a check (before and after),
    as a fraction of the candidate run and of the suite run.

Project
    more-itertools 10.5.0 (an sdist with its own ``.venv``, pytest installed; ``--library``),
    about 60 files and 663 tests.  The shadow lives in a temporary cache.

    .venv/bin/python benchmarks/shadow.py [--library /tmp/more-itertools-10.5.0] [--repeat 200]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from frognano.sandbox.runner import RunnerConfig, TestRunner  # noqa: E402
from frognano.sandbox.specification import Specification  # noqa: E402
from frognano.sandbox.shadow_files import shadow_signature as _signature  # noqa: E402
from frognano.sandbox.workspace import Workspace  # noqa: E402

PLANTS = {"tests/__init__.py": "import more_itertools\n", "tests/sub/conftest.py": "x = 1\n",
          "pytest.toml": "[pytest]\n", "out.txt": "a test's output\n"}


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def wide_tree_ms(files: int, repeat: int) -> float:
    """The pristine check on a generated tree of ``files`` one-line modules, 20 a folder: how it
    scales (a stat a file) where more-itertools is small."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "wide"
        for i in range(files):
            path = root / f"pkg{i // 20}" / f"mod{i % 20}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("X = 1\n")
        (root / "pyproject.toml").write_text("[project]\nname = 'wide'\n")
        with Workspace(root, cache=Path(tmp) / "cache") as ws:
            ws.sync()
            return median_ms(ws.ensure_pristine, repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", type=Path, default=Path("/tmp/more-itertools-10.5.0"))
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--files", type=int, default=5000, help="files of the generated wide tree")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the planted rows' warnings are the point, not news
    if not (args.library / "more_itertools").is_dir():
        print(f"{args.library}: not a more-itertools source tree (give --library)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as cache, Workspace(args.library, cache=Path(cache)) as ws:
        ws.sync()
        spec = Specification.of_workspace(ws)
        protected, strays = spec.protected(ws.entries), spec.strays(ws.entries)
        assert ws.ensure_pristine(protected, strays) == [], "the shadow was not pristine after sync"

        def earlier() -> None:
            for rel in protected:
                _signature(ws.shadow / rel)
            for rel in strays:
                (ws.shadow / rel).exists()

        def planted_ms(repeat: int) -> float:
            times = []
            for _ in range(repeat):
                for rel, text in PLANTS.items():
                    path = ws.shadow / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                started = time.perf_counter()
                reported = ws.ensure_pristine(protected, strays)
                times.append((time.perf_counter() - started) * 1000)
                assert set(reported) == set(PLANTS) - {"out.txt"}, reported
            return statistics.median(times)

        check_ms = median_ms(lambda: ws.ensure_pristine(protected, strays), args.repeat)
        earlier_ms = median_ms(earlier, args.repeat)
        dirty_ms = planted_ms(max(20, args.repeat // 5))

        runner = TestRunner(ws, RunnerConfig())
        try:
            suite = runner.run(None)  # also the warm-up of the fork server
            assert suite.tests and not suite.failing, "the library's suite does not pass as it is"
            nodeids = sorted(suite.tests)
            padded = [n for n in nodeids if "::PaddedTest::" in n]
            suite_ms = median_ms(lambda: runner.run(nodeids), args.runs)
            runner.run(padded)
            candidate_ms = median_ms(lambda: runner.run(padded), args.runs)
        finally:
            runner.close()
        files = len(ws.entries)
    per_run = 2 * check_ms
    big_ms = wide_tree_ms(args.files, args.repeat // 10 or 1)

    def pct(x: float) -> str:
        return f"{100 * x:.3g}%"

    rows = [
        ["check (pristine)", f"{check_ms:.2f}", pct(per_run / candidate_ms), pct(per_run / suite_ms)],
        ["check (planted)", f"{dirty_ms:.2f}", "", ""],
        ["earlier check", f"{earlier_ms:.2f}", pct(2 * earlier_ms / candidate_ms), pct(2 * earlier_ms / suite_ms)],
        [f"check (pristine), a {args.files:,}-file tree", f"{big_ms:.2f}", "", ""],
        [f"candidate run ({len(padded)} tests)", f"{candidate_ms:.1f}", "100%", ""],
        [f"suite run ({len(nodeids)} tests)", f"{suite_ms:.1f}", "", "100%"],
    ]
    _table.print_table(f"The pristine-shadow check on more-itertools ({files} files; python {sys.version.split()[0]}, "
                       f"{os.cpu_count()} CPUs)", ["", "ms", "per run / candidate run", "per run / suite run"],
                       rows, left={0})
    return 0


if __name__ == "__main__":
    sys.exit(main())
