"""The cost of confirming a fix in a fresh interpreter, per fix and as a share of the search.

What it measures
    ``frognano fix`` filters candidates in the warm session (a forked, already collected
    session with the edited function bodies swapped in) and confirms the fix it offers once more,
    against every test of the run, in a fresh interpreter from pristine test files
    (``Verifier.confirm``; see the README's "What verified means").  This script runs the real
    search (default settings, no model) on each project and reports:

    ``search s``            the whole search (candidates, pairs, confirmations);
    ``confirms``            how many fresh confirmations the search ran, and their seconds;
    ``share``               those seconds as a fraction of the search;
    ``warm s`` / ``fresh s`` one confirmation of the offered fix run the old way (the warm
                            server, the baseline, measured here in the same run) and the new way
                            (a fresh interpreter): the median of ``--repeats`` runs each;
    ``extra s``             what the fresh interpreter adds per fix (fresh - warm).

Projects
    (a) ``examples/calc`` (a comparison bug; three tests).
    (b) more-itertools 10.5.0 (``--repo``: an unpacked sdist with its own ``.venv`` holding pytest)
        with validation.py's one-token bug in ``padded`` (``n - 1`` -> ``n``): 663 tests.

    .venv/bin/python benchmarks/confirmation.py --repo /tmp/more-itertools-10.5.0
    .venv/bin/python benchmarks/confirmation.py            # examples/calc only
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _table import print_table  # noqa: E402

from frognano.config import Settings  # noqa: E402
from frognano.repair.engine import Engine  # noqa: E402
from frognano.sandbox.workspace import Workspace  # noqa: E402

LIBRARY_BUG = ("yield islice(iterable_with_repeat, n - 1)", "yield islice(iterable_with_repeat, n)")


@dataclass
class Row:
    project: str
    tests: int
    search_s: float
    confirms: int
    confirm_s: float
    warm_s: float
    fresh_s: float
    fix: str

    def cells(self) -> list[str]:
        share = self.confirm_s / self.search_s if self.search_s else float("nan")
        return [self.project, str(self.tests), f"{self.search_s:.2f}", f"{self.confirms}", f"{self.confirm_s:.2f}",
                f"{share:.0%}", f"{self.warm_s:.3f}", f"{self.fresh_s:.3f}", f"{self.fresh_s - self.warm_s:+.3f}",
                self.fix]


def measure(name: str, root: Path, settings: Settings, repeats: int) -> Row:
    with Workspace(root) as ws, Engine(ws, settings) as engine:
        diagnosis = engine.diagnose()
        verifier = engine.verifier(diagnosis)
        result = engine.search(diagnosis, verifier)
        if result.fix is None:
            raise SystemExit(f"{name}: the search found no fix ({result.stopped}); nothing to measure")
        wanted = [*verifier.failing, *verifier.passing]
        times: dict[bool, list[float]] = {False: [], True: []}
        with ws.edited(result.fix.patch.texts()):
            for _ in range(repeats):
                for fresh in (False, True):  # interleaved: drift on a shared machine hits both
                    started = time.monotonic()
                    run = engine.runner.run(wanted, timeouts=verifier.timeouts, fresh=fresh)
                    times[fresh].append(time.monotonic() - started)
                    bad = [n for n in wanted if n not in run.tests or not run.tests[n].passed]
                    if bad or (fresh and run.returncode != 0):
                        raise SystemExit(f"{name}: the offered fix does not pass {bad[:3]} (fresh={fresh})")
        return Row(name, len(wanted), result.seconds, verifier.confirms, verifier.confirm_seconds,
                   statistics.median(times[False]), statistics.median(times[True]),
                   ", ".join(str(n) for n in result.fix.notes)[:40])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="an unpacked more-itertools 10.5.0 with its own .venv")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="frognano-confirm-") as tmp:
        scratch = Path(tmp)
        calc = shutil.copytree(HERE.parent / "examples" / "calc", scratch / "calc",
                               ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        rows.append(measure("examples/calc", calc, Settings(episodes=0), args.repeats))
        if args.repo is not None:
            lib = shutil.copytree(args.repo, scratch / "more-itertools",
                                  ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", ".git"))
            module = lib / "more_itertools" / "more.py"
            text = module.read_text()
            if LIBRARY_BUG[0] not in text:
                raise SystemExit(f"{module}: the line the bug goes into is not there")
            module.write_text(text.replace(*LIBRARY_BUG, 1))
            python = str(args.repo / ".venv" / "bin" / "python")
            rows.append(measure("more-itertools", lib, Settings(episodes=0, python=python), args.repeats))
    print_table("Fresh-interpreter confirmation of the offered fix",
                ["project", "tests", "search s", "confirms", "confirm s", "share", "warm s", "fresh s",
                 "extra s", "fix"], [r.cells() for r in rows], left={0, 9})
    return 0


if __name__ == "__main__":
    sys.exit(main())
