"""Repair power on realistic bugs: how many does ``frognano fix`` fix, correctly, and how fast.

What it measures
    The corpus in ``benchmarks/realbugs/`` holds one folder per bug (``NN-slug/``): ``case.toml``
    (its ``class``, a ``summary``, the buggy ``file`` and ``line``, ``hangs`` for infinite
    loops), ``project/`` (a small pytest project with the bug; some of its tests fail),
    ``correct/`` (the correct version of the buggy file) and ``heldout/test_heldout.py`` (tests
    FrogNano never sees, which judge whether a verified fix is the right one and not merely one
    that satisfies the visible tests).

    For each case the script
    1. self-checks it in a temporary copy: the visible tests fail on the buggy project, and the
       visible and held-out tests pass with the correct file.  A case that does not is reported
       as broken and left out of every figure;
    2. runs ``python -m frognano fix COPY --json`` in a subprocess, with default settings and no
       model, as a user would (the project's tests run under this interpreter), killed after
       ``--limit`` seconds; its wall-clock time is the case's ``seconds``;
    3. if a fix was verified, applies its diff to a fresh copy of the project, adds the held-out
       tests and runs them: *correct* when they pass.

    Printed: one row per case, then per class and overall: cases, verified, correct, median and
    90th-percentile seconds per bug, median candidates tried (single edits plus pairs, from the
    JSON's ``search``); and for the infinite-loop cases the longest time to a decision (the CLI
    returning any answer).  Targets: correct >= 70 %, median < 5 s, infinite loops decided in
    < 30 s.

Baselines
    ``--checkout DIR`` runs the CLI from another FrogNano source tree (``PYTHONPATH=DIR``), e.g.
    an older commit in a worktree; ``--compare DIR`` runs the cases under both that tree and
    this one, and adds before/now columns (the difference of the correct counts, the speed-up of
    the median time).

    git -C . worktree add /tmp/fn-before 44dbd49
    .venv/bin/python benchmarks/realbugs.py --checkout /tmp/fn-before
    .venv/bin/python benchmarks/realbugs.py --compare /tmp/fn-before --jobs 2 --json rows.json
    .venv/bin/python benchmarks/realbugs.py --cases '0[1-3]-*' --limit 60
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path
from _proc import Ran, run  # benchmarks/_proc.py

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "realbugs"
CLASSES = (
    "wrong-literal", "wrong-identifier", "wrong-callee", "wrong-exception", "off-by-one",
    "wrong-operator", "swapped-arguments", "missing-return", "missing-statement", "missing-guard",
    "wrong-loop-condition", "missing-wrapper", "wrong-slice", "infinite-loop",
)
TARGET_CORRECT = 0.70
TARGET_MEDIAN_S = 5.0
TARGET_LOOP_S = 30.0
# A self-check or held-out run of a 100-line project takes a second; this only bounds a hang.
CHECK_TIMEOUT = 60.0
# The buggy visible tests of a ``hangs = true`` case are expected to hang: this long is enough.
HANG_TIMEOUT = 5.0
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc")


@dataclass(frozen=True)
class Case:
    name: str  # the folder's name, "NN-slug"
    root: Path
    cls: str
    summary: str
    file: str
    line: int
    hangs: bool = False


@dataclass
class Row:
    case: str
    cls: str
    tree: str  # "now" or the --checkout/--compare folder
    status: str  # the CLI's status, "limit" when killed, "crash" without JSON, "broken" case
    seconds: float = 0.0
    candidates: int = 0  # single edits plus pairs validated
    verified: bool = False
    correct: bool = False
    hangs: bool = False
    diff: str = ""
    note: str = ""  # why a case is broken, or what went wrong


# -- the corpus -----------------------------------------------------------------------------------

def load_case(root: Path) -> Case:
    """The case in ``root``; ValueError naming what is wrong with its ``case.toml``."""
    try:
        meta = tomllib.loads((root / "case.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"case.toml: {exc}") from None
    missing = [k for k in ("class", "summary", "file", "line") if k not in meta]
    if missing:
        raise ValueError(f"case.toml lacks {', '.join(missing)}")
    if meta["class"] not in CLASSES:
        raise ValueError(f"case.toml: unknown class {meta['class']!r}")
    if not isinstance(meta["line"], int) or meta["line"] < 1:
        raise ValueError(f"case.toml: line must be a positive integer, not {meta['line']!r}")
    return Case(root.name, root, meta["class"], meta["summary"], meta["file"], meta["line"],
                bool(meta.get("hangs", False)))


def case_dirs(patterns: list[str] | None = None) -> list[Path]:
    dirs = sorted(p for p in CORPUS.iterdir() if p.is_dir() and (p / "case.toml").exists())
    if patterns:
        dirs = [d for d in dirs if any(fnmatch.fnmatch(d.name, pat) for pat in patterns)]
    return dirs


def layout_problems(case: Case) -> list[str]:
    """What the folder lacks for the format every case shares."""
    project, problems = case.root / "project", []
    buggy, correct = project / case.file, case.root / "correct" / case.file
    for path in (project / "pyproject.toml", buggy, correct, case.root / "heldout" / "test_heldout.py"):
        if not path.is_file():
            problems.append(f"missing {path.relative_to(case.root)}")
    if not list((project / "tests").glob("test_*.py")):
        problems.append("project/tests has no test_*.py")
    if problems:
        return problems
    buggy_text, correct_text = buggy.read_text(), correct.read_text()
    if buggy_text == correct_text:
        problems.append(f"correct/{case.file} is the buggy file")
    if case.line > len(buggy_text.splitlines()):
        problems.append(f"line {case.line} is past the end of {case.file}")
    return problems


# -- running pytest and the CLI -------------------------------------------------------------------

def pytest(project: Path, *args: str, timeout: float = CHECK_TIMEOUT) -> Ran:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # the project's tests import the project, not a FrogNano tree
    return run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], project, timeout, env)


def copy_project(case: Case, dest: Path) -> Path:
    shutil.copytree(case.root / "project", dest, ignore=_COPY_IGNORE)
    return dest


def self_check(case: Case, scratch: Path) -> str | None:
    """Why the case cannot be counted (its layout, or its tests do not behave), or None."""
    problems = layout_problems(case)
    if problems:
        return "; ".join(problems)
    buggy = pytest(copy_project(case, scratch / "check-buggy"),
                   timeout=HANG_TIMEOUT if case.hangs else CHECK_TIMEOUT)
    if buggy.rc is None and not case.hangs:
        return "the buggy project's visible tests hang (hangs = true is not set)"
    if buggy.rc is not None and buggy.rc != 1:
        tail = (buggy.stdout.strip().splitlines() or [""])[-1]
        return f"the buggy project's visible tests exit {buggy.rc}, not 1 (failed): {tail}"
    fixed = copy_project(case, scratch / "check-correct")
    shutil.copyfile(case.root / "correct" / case.file, fixed / case.file)
    shutil.copyfile(case.root / "heldout" / "test_heldout.py", fixed / "tests" / "test_heldout.py")
    good = pytest(fixed)
    if good.rc != 0:
        tail = "\n".join(good.stdout.strip().splitlines()[-5:])
        return f"the correct version fails its visible or held-out tests (exit {good.rc}):\n{tail}"
    return None


def frognano_fix(project: Path, cache: Path, checkout: Path | None, limit: float, case: str = "") -> Ran:
    """The real CLI, as a user runs it; ``checkout``: the FrogNano source tree to run.

    The operator prior (``frognano/repair/prior.py``) was fitted on this corpus, among other
    data, so each case runs with its own contribution left out (``FROGNANO_PRIOR_EXCLUDE``):
    leave-one-out, or the prior would have seen the answer."""
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout or REPO),
           "FROGNANO_PRIOR_EXCLUDE": case}
    return run([sys.executable, "-m", "frognano", "fix", str(project), "--json"], project.parent, limit, env)


def judge(case: Case, diff: str, scratch: Path) -> tuple[bool, str]:
    """(correct, note): the fix's diff applied to a fresh copy passes the held-out tests."""
    fresh = copy_project(case, scratch / "judge")
    patch_file = scratch / "fix.diff"
    patch_file.write_text(diff)
    applied = run(["patch", "-p1", "--batch", "--forward", "-d", str(fresh), "-i", str(patch_file)],
                  scratch, CHECK_TIMEOUT)
    if applied.rc != 0:
        return False, f"the diff does not apply: {applied.stdout.strip()} {applied.stderr.strip()}"
    shutil.copyfile(case.root / "heldout" / "test_heldout.py", fresh / "tests" / "test_heldout.py")
    held = pytest(fresh, "tests/test_heldout.py")
    if held.rc == 0:
        return True, ""
    lines = [ln for ln in held.stdout.splitlines() if ln.startswith("FAILED")]
    return False, "held-out: " + ("timed out" if held.rc is None else "; ".join(lines[:3]) or f"exit {held.rc}")


def run_case(case: Case, checkout: Path | None, limit: float) -> Row:
    tree = str(checkout) if checkout else "now"
    row = Row(case.name, case.cls, tree, "broken", hangs=case.hangs)
    with tempfile.TemporaryDirectory(prefix=f"realbugs-{case.name}-") as tmp:
        scratch = Path(tmp)
        broken = self_check(case, scratch)
        if broken:
            row.note = broken
            return row
        ran = frognano_fix(copy_project(case, scratch / case.name), scratch / "cache", checkout, limit, case.name)
        row.seconds = ran.seconds
        if ran.rc is None:
            row.status, row.note = "limit", f"killed after {limit:.0f} s"
            return row
        try:
            report = json.loads(ran.stdout)
        except json.JSONDecodeError:
            row.status = "crash"
            row.note = f"exit {ran.rc}: " + " ".join(ran.stderr.strip().splitlines()[-2:])
            return row
        row.status = report.get("status", "?")
        search = report.get("search") or {}
        row.candidates = int(search.get("candidates", 0)) + int(search.get("pairs", 0))
        fix = report.get("fix")
        if row.status == "fixed" and fix:
            row.verified, row.diff = True, fix.get("diff", "")
            row.correct, row.note = judge(case, row.diff, scratch)
        elif report.get("message"):
            row.note = report["message"]
    return row


# -- the tables -----------------------------------------------------------------------------------

def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


@dataclass
class Summary:
    cases: int
    verified: int
    correct: int
    median_s: float
    p90_s: float
    candidates: float

    @property
    def rate(self) -> float:
        return self.correct / self.cases if self.cases else 0.0


def summarise(rows: list[Row]) -> Summary | None:
    counted = [r for r in rows if r.status != "broken"]
    if not counted:
        return None
    seconds = [r.seconds for r in counted]
    return Summary(len(counted), sum(r.verified for r in counted), sum(r.correct for r in counted),
                   statistics.median(seconds), p90(seconds), statistics.median(r.candidates for r in counted))


def groups(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    present = [c for c in CLASSES if any(r.cls == c for r in rows)]
    return [(c, [r for r in rows if r.cls == c]) for c in present] + [("all", rows)]


def print_cases(rows: list[Row]) -> None:
    body = [[r.case, r.cls, r.status, "yes" if r.correct else ("no" if r.verified else "-"),
             f"{r.seconds:.1f}", str(r.candidates), r.note[:70].replace("\n", " ")] for r in rows]
    _table.print_table(f"Per case ({rows[0].tree})", ["case", "class", "status", "correct", "seconds",
                       "tried", "note"], body, left={0, 1, 2, 3, 6}, width=160)


def print_summary(rows: list[Row]) -> None:
    body = []
    for name, members in groups(rows):
        s = summarise(members)
        if s is None:
            continue
        body.append([name, str(s.cases), str(s.verified), str(s.correct), f"{100 * s.rate:.0f}%",
                     f"{s.median_s:.1f}", f"{s.p90_s:.1f}", f"{s.candidates:.0f}"])
    _table.print_table(f"Real bugs, FrogNano {rows[0].tree} (no model, default settings)",
                       ["class", "cases", "verified", "correct", "correct %", "median s", "p90 s",
                        "tried (median)"], body, left={0})


def print_compare(before: list[Row], now: list[Row]) -> None:
    body = []
    now_groups = dict(groups(now))
    for name, b_rows in groups(before):
        b, n = summarise(b_rows), summarise(now_groups.get(name, []))
        if b is None or n is None:
            continue
        speedup = b.median_s / n.median_s if n.median_s > 0 else float("inf")
        body.append([name, str(n.cases), str(b.correct), str(n.correct), f"{n.correct - b.correct:+d}",
                     f"{b.median_s:.1f}", f"{n.median_s:.1f}", f"{speedup:.2f}x",
                     f"{b.candidates:.0f}", f"{n.candidates:.0f}"])
    _table.print_table(f"Before ({before[0].tree}) vs now", ["class", "cases", "correct before", "correct now",
                       "diff", "median s before", "median s now", "speed-up", "tried before", "tried now"],
                       body, left={0}, width=140)


def loop_line(rows: list[Row], limit: float) -> str:
    loops = [r for r in rows if r.hangs and r.status != "broken"]
    if not loops:
        return "infinite loops: no such case"
    worst = max(loops, key=lambda r: r.seconds)
    shown = f"> {limit:.0f} s (killed at the limit)" if worst.status == "limit" else f"{worst.seconds:.1f} s"
    met = "met" if worst.status != "limit" and worst.seconds < TARGET_LOOP_S else "NOT met"
    return (f"infinite loops ({len(loops)} cases): longest time to a decision {shown} ({worst.case}); "
            f"target < {TARGET_LOOP_S:.0f} s: {met}")


def print_targets(rows: list[Row], limit: float) -> None:
    s = summarise(rows)
    if s is None:
        print("no case could be counted")
        return
    print(f"correct {s.correct}/{s.cases} = {100 * s.rate:.0f}% (target >= {100 * TARGET_CORRECT:.0f}%: "
          f"{'met' if s.rate >= TARGET_CORRECT else 'NOT met'}); median {s.median_s:.1f} s per bug "
          f"(target < {TARGET_MEDIAN_S:.0f} s: {'met' if s.median_s < TARGET_MEDIAN_S else 'NOT met'})")
    print(loop_line(rows, limit))


def run_all(cases: list[Case], checkout: Path | None, limit: float, jobs: int) -> list[Row]:
    def one(case: Case) -> Row:
        row = run_case(case, checkout, limit)
        print(f"  {row.case}: {row.status}{' correct' if row.correct else ''} {row.seconds:.1f} s "
              f"{row.note[:100]}", file=sys.stderr, flush=True)
        return row

    print(f"FrogNano {checkout or 'now'}: {len(cases)} cases", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, cases))


def print_saved(paths: list[Path], limit: float) -> int:
    """The tables of earlier runs, e.g. a run of the whole corpus and one of cases added since."""
    rows: dict[tuple[str, str], Row] = {}
    for path in paths:
        for item in json.loads(path.read_text()):
            row = Row(**item)
            rows[row.tree, row.case] = row
    trees = list(dict.fromkeys(tree for tree, _ in rows))
    results = [sorted((r for (t, _), r in rows.items() if t == tree), key=lambda r: r.case) for tree in trees]
    for tree_rows in results:
        print_report(tree_rows, limit)
    if len(results) == 2:
        print_compare(*(results if results[1][0].tree == "now" else results[::-1]))
    return 0


def print_report(rows: list[Row], limit: float) -> None:
    print_cases(rows)
    for r in rows:
        if r.status == "broken":
            print(f"broken case {r.case} (not counted): {r.note}")
    print_summary(rows)
    print_targets(rows, limit)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", metavar="GLOB", help="case folder names to run (default: all)")
    ap.add_argument("--limit", type=float, default=120.0, help="wall-clock seconds per case (default 120)")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at the same time (default 1)")
    tree = ap.add_mutually_exclusive_group()
    tree.add_argument("--checkout", type=Path, help="run the CLI from this FrogNano source tree instead")
    tree.add_argument("--compare", type=Path, metavar="DIR", help="run this tree and DIR, print both")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the per-case rows here")
    ap.add_argument("--from-json", type=Path, nargs="+", metavar="ROWS",
                    help="print the tables of rows saved by --json (merged, the last row of a case "
                    "and tree winning) instead of running anything")
    args = ap.parse_args(argv)
    if args.from_json:
        return print_saved(args.from_json, args.limit)
    for given in (args.checkout, args.compare):
        if given is not None and not (given / "frognano" / "__init__.py").is_file():
            ap.error(f"{given} is not a FrogNano source tree (no frognano/__init__.py)")
    if shutil.which("patch") is None:
        ap.error("the 'patch' program is needed to apply verified fixes to a fresh copy")

    cases: list[Case] = []
    for root in case_dirs(args.cases):
        try:
            cases.append(load_case(root))
        except ValueError as exc:
            print(f"broken case {root.name}: {exc}", file=sys.stderr)
    if not cases:
        ap.error("no case matches")

    trees = [args.compare.resolve(), None] if args.compare else [args.checkout.resolve() if args.checkout else None]
    results = [run_all(cases, t, args.limit, args.jobs) for t in trees]
    for rows in results:
        print_report(rows, args.limit)
    if args.compare:
        print_compare(*results)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for rows in results for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
