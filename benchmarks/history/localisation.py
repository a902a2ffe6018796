"""Fault localisation on real historical bugs: where does the first changed line rank?

What it measures
    For each task of the corpus (``benchmarks/history/corpus``, see ``run.py``) the script
    builds FrogNano's ``Engine`` in this process on a temporary copy of ``project/`` (settings
    ``python`` = the task's interpreter, ``test_args`` = its suite and deselections, as the
    CLI would get them from FROGNANO_PYTHON / FROGNANO_TEST_ARGS), runs ``diagnose()`` once (the
    whole suite with per-test coverage; no search) and ranks the statements four ways on that
    same coverage:

    ochiai        the spectrum alone: Ochiai (ef / sqrt(nf * (ef + ep))) of each statement (the
                  best of its lines), ties broken by path and line order; the published
                  baseline on real Python bugs is about 12 % top-1 / 43 % top-5;
    +traceback    Ochiai, ties broken by the failing tests' traceback frames on the statement
                  (``localize``'s order without its last-executed-line evidence);
    frognano      FrogNano's own ranking (``localize``: Ochiai, then frames, then the failing
                  tests' last executed project line), i.e. the diagnosis' ``locations``;
    frames-first  the traceback before the spectrum (frames, last line, then Ochiai): a
                  what-if, to see whether the traceback deserves more weight.

    A statement covers its lines (a compound statement its header); a ranking *hits* at k when
    one of its first k statements covers ``first_line`` (or, when that is the line before a pure
    insertion, the first code line after it: the line before is often a ``def`` or a docstring
    that no test executes); *any-first* when its first statement covers any line the
    developers changed, *any@5* when one of its first five does (the first changed line is
    sometimes an added import).  *covered*: some failing test executed ``first_line`` (no
    spectrum ranking can find a line the failing tests never run: a missing
    statement, a default argument).  *diagnosed*: FrogNano found every FAIL_TO_PASS test failing.

    Printed: per project and all, per ranking: top-1 / top-5 / top-10 of ``first_line``,
    any-first, any@5, the median rank of first_line (of the tasks it ranked at all).

    .venv/bin/python benchmarks/history/localisation.py
    .venv/bin/python benchmarks/history/localisation.py --projects attrs --json loc.json -v
    .venv/bin/python benchmarks/history/localisation.py --table loc.json
    .venv/bin/python benchmarks/history/localisation.py --dump /tmp/diagnoses   # run once, save
    .venv/bin/python benchmarks/history/localisation.py --replay /tmp/diagnoses # re-rank in seconds
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from run import (CORPUS, REPO, TOP, Task, copy_project, corpus_or_exit, first_targets, groups, load_tasks,
                 pct, split_list, target_lines)

sys.path.insert(0, str(REPO))  # this FrogNano tree, whatever the current folder
import _table  # noqa: E402  (benchmarks/_table.py; run.py put benchmarks/ on sys.path)
from frognano.config import load_settings  # noqa: E402
from frognano.errors import FrogNanoError  # noqa: E402
from frognano.repair.engine import Engine  # noqa: E402
from frognano.repair.localize import Location, localize  # noqa: E402
from frognano.sandbox.spectra import CoverageMap, is_test_file  # noqa: E402
from frognano.sandbox.workspace import Workspace  # noqa: E402

RANKINGS = ("ochiai", "+traceback", "frognano", "frames-first")
EVERYTHING = 1_000_000  # localize's limit when the whole ranking is wanted


@dataclass
class LocRow:
    id: str
    project: str
    status: str = "ok"  # "ok", "error" (the diagnosis raised), "passing" (nothing failed)
    seconds: float = 0.0
    tests: int = 0
    failing: int = 0
    diagnosed: bool = False  # every FAIL_TO_PASS test failed in the diagnosis
    covered: bool = False  # a failing test executed first_line
    ranks: dict[str, int | None] = field(default_factory=dict)  # 1-based, None: not ranked
    best: dict[str, int | None] = field(default_factory=dict)  # the best rank of any changed line
    first: dict[str, bool] = field(default_factory=dict)  # the first statement covers a changed line
    top: dict[str, str] = field(default_factory=dict)  # each ranking's first statement, path:line
    note: str = ""


# -- the rankings ---------------------------------------------------------------------------------

def ochiai_only(locations: list[Location]) -> list[Location]:
    """The spectrum alone, ties in line order.  ``localize`` merges Ochiai with the traceback in
    one pass and exposes no separate pieces, so the plain ranking is re-derived from its output:
    its statements carry their Ochiai score (the best of their lines) apart from the frame and
    last-line counts; the statements only the traceback named (score 0) are dropped."""
    return sorted((loc for loc in locations if loc.score > 0), key=lambda x: (-x.score, x.path, x.line))


def with_traceback(locations: list[Location]) -> list[Location]:
    return sorted(locations, key=lambda x: (-x.score, -x.frames, x.path, x.line))


def frames_first(locations: list[Location]) -> list[Location]:
    return sorted(locations, key=lambda x: (-x.frames, -x.last, -x.score, x.path, x.line))


def rank_in(ranking: list[Location], path: str, line: int) -> int | None:
    for i, loc in enumerate(ranking, 1):
        if loc.path == path and loc.line <= line <= loc.end_line:
            return i
    return None


def diagnose(task: Task, scratch: Path, dump: Path | None = None) -> tuple[LocRow, dict[str, list[Location]]]:
    row = LocRow(task.id, task.project)
    project = copy_project(task, scratch / task.project)
    start = time.monotonic()
    try:
        settings = load_settings(project, {"python": task.python, "test_args": task.test_args, "lanes": 1})
        with Workspace(project, cache=scratch / "cache") as ws, Engine(ws, settings) as engine:
            diagnosis = engine.diagnose()
            # What the engine ranks: without the tests the sandbox refused (when others fail).
            run = engine.without_refused(diagnosis.run)
            full = localize(run, diagnosis.coverage, engine._read, limit=EVERYTHING)
            if [(x.path, x.line) for x in full[: len(diagnosis.locations)]] != \
                    [(x.path, x.line) for x in diagnosis.locations]:
                row.note = "localize() differs from the diagnosis' locations; "
            if dump is not None:
                save_diagnosis(dump / f"{task.id}.pickle", run, diagnosis.coverage, project)
    except FrogNanoError as exc:
        row.status, row.seconds = "error", time.monotonic() - start
        row.note += " ".join(str(exc).split())[:300]
        return row, {}
    row.seconds = time.monotonic() - start
    return judge(task, row, run, diagnosis.coverage, full)


def judge(task: Task, row: LocRow, run, coverage, full: list[Location]) -> tuple[LocRow, dict[str, list[Location]]]:
    """Fill ``row`` from one diagnosis (``run``, ``coverage``) and FrogNano's ranking ``full``."""
    row.tests, row.failing = len(run.tests), len(run.failing)
    row.diagnosed = bool(task.fail_to_pass) and set(task.fail_to_pass) <= set(run.failing)
    if not run.failing:
        row.status = "passing"
        row.note += "no test fails"
        return row, {}
    extra = set(run.failing) - set(task.fail_to_pass)
    if extra:
        row.note += f"{len(extra)} failing beyond FAIL_TO_PASS (e.g. {sorted(extra)[0]}); "
    missed = set(task.fail_to_pass) - set(run.failing)
    if missed:
        row.note += f"{len(missed)} of FAIL_TO_PASS passing (e.g. {sorted(missed)[0]}); "
    firsts, targets = first_targets(task), target_lines(task)
    row.covered = any(line in coverage.by_test.get(n, {}).get(path, ())
                      for n in run.failing for path, line in firsts)
    if is_test_file(task.first_line[0]):
        row.note += "first_line is in a test file; "
    rankings = {"ochiai": ochiai_only(full), "+traceback": with_traceback(full), "frognano": full,
                "frames-first": frames_first(full)}
    for name, ranking in rankings.items():
        row.ranks[name] = min((k for p, n in firsts if (k := rank_in(ranking, p, n))), default=None)
        row.best[name] = min((k for p, lines in targets.items() for n in lines if (k := rank_in(ranking, p, n))),
                             default=None)
        first = ranking[0] if ranking else None
        row.first[name] = bool(first) and any(first.line <= n <= first.end_line
                                              for n in targets.get(first.path, ()))
        row.top[name] = f"{first.path}:{first.line}" if first else ""
    return row, rankings


# -- saved diagnoses: re-rank without running a suite ---------------------------------------------

def save_diagnosis(path: Path, run, coverage, project: Path) -> None:
    """The run, its coverage and the text of every ``.py`` file of the project: all ``localize``
    reads, so that ``--replay`` ranks the same diagnosis again in milliseconds (to try a change
    to the ranking on the whole corpus without re-running 68 suites)."""
    texts = {}
    for file in project.rglob("*.py"):
        rel = file.relative_to(project).as_posix()
        if not rel.startswith((".venv/", ".frognano/")):
            try:
                texts[rel] = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                pass
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"run": run, "coverage": coverage.by_test, "texts": texts}))


def replay(task: Task, saved: Path) -> LocRow:
    row = LocRow(task.id, task.project, note="replayed; ")
    if not saved.exists():
        row.status, row.note = "error", f"no saved diagnosis {saved}"
        return row
    data = pickle.loads(saved.read_bytes())
    texts = data["texts"]
    coverage = CoverageMap(data["coverage"])
    start = time.monotonic()
    full = localize(data["run"], coverage, texts.get, limit=EVERYTHING)
    row.seconds = time.monotonic() - start
    row, _ = judge(task, row, data["run"], coverage, full)
    row.note = row.note.strip().rstrip(";")
    return row


def measure(task: Task, dump: Path | None = None) -> LocRow:
    with tempfile.TemporaryDirectory(prefix=f"history-loc-{task.id}-") as tmp:
        try:
            row, _ = diagnose(task, Path(tmp), dump)
        except Exception as exc:  # noqa: BLE001 - one broken task is a row, not the end
            row = LocRow(task.id, task.project, "error", note=f"benchmark error: {exc!r}"[:300])
    row.note = row.note.strip().rstrip(";")
    return row


# -- the tables -----------------------------------------------------------------------------------

def print_tasks(rows: list[LocRow]) -> None:
    body = [[r.id, r.status, f"{r.seconds:.0f}", f"{r.failing}/{r.tests}", "yes" if r.covered else "no",
             *(str(r.ranks.get(k) or "-") for k in RANKINGS), r.top.get("frognano", ""), r.note[:60]]
            for r in rows]
    _table.print_table("Localisation per task (rank of first_line)", ["task", "status", "s", "failing",
                       "covered", *RANKINGS, "frognano's first", "note"], body, left={0, 1, 4, 9, 10}, width=170)


def print_summary(rows: list[LocRow]) -> None:
    body = []
    for name, members in groups(rows):
        n = len(members)
        for i, ranking in enumerate(RANKINGS):
            ranks = [r.ranks.get(ranking) for r in members]
            found = [k for k in ranks if k is not None]
            head = ([name, str(n), str(sum(r.status == "ok" for r in members)),
                     pct(sum(r.diagnosed for r in members), n), pct(sum(r.covered for r in members), n)]
                    if i == 0 else ["", "", "", "", ""])
            body.append([*head, ranking,
                         *(pct(sum(k is not None and k <= top for k in ranks), n) for top in TOP),
                         pct(sum(bool(r.first.get(ranking)) for r in members), n),
                         pct(sum((r.best.get(ranking) or 99) <= 5 for r in members), n),
                         f"{statistics.median(found):.0f}" if found else "-"])
    _table.print_table("Localisation of the first changed line (same coverage, four rankings)",
                       ["project", "tasks", "ranked", "diagnosed", "covered", "ranking", "top-1", "top-5",
                        "top-10", "any-first", "any@5", "median rank"], body, left={0, 5}, width=140)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="the corpus (default benchmarks/history/corpus)")
    ap.add_argument("--projects", nargs="+", metavar="A,B", help="projects to measure (default: all)")
    ap.add_argument("--tasks", nargs="+", metavar="GLOB", help="task ids to measure (default: all)")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the per-task rows here")
    ap.add_argument("--table", type=Path, nargs="+", metavar="ROWS", help="print saved rows instead of running")
    ap.add_argument("--dump", type=Path, metavar="DIR",
                    help="also save each diagnosis (run, coverage, sources) as DIR/<task>.pickle")
    ap.add_argument("--replay", type=Path, metavar="DIR",
                    help="rank the diagnoses saved by --dump again instead of running the suites")
    ap.add_argument("-v", "--verbose", action="store_true", help="also a row per task")
    args = ap.parse_args(argv)
    if args.table:
        rows = [LocRow(**item) for path in args.table for item in json.loads(path.read_text())]
    else:
        corpus_or_exit(ap, args.corpus)
        tasks = load_tasks(args.corpus, split_list(args.projects), split_list(args.tasks))
        if not tasks:
            ap.error("no task matches")
        if not args.replay:
            print(f"diagnosing {len(tasks)} tasks", file=sys.stderr, flush=True)
        rows = []
        for task in tasks:
            row = replay(task, args.replay / f"{task.id}.pickle") if args.replay else measure(task, args.dump)
            if args.replay:
                rows.append(row)
                if args.json:
                    args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
                continue
            rows.append(row)
            print(f"  {row.id}: {row.status} {row.seconds:.0f} s ranks "
                  + " ".join(f"{k}={row.ranks.get(k) or '-'}" for k in RANKINGS) + f" {row.note[:100]}",
                  file=sys.stderr, flush=True)
            if args.json:  # after each task: a killed run keeps what it measured
                args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    if not rows:
        print("no rows")
        return 0
    if args.verbose:
        print_tasks(rows)
    print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
