"""Mine a benchmark of real historical bugs from the git history of small pure-Python libraries.

What it does
    For each project in ``projects.toml`` the script walks ``git log --no-merges --since`` of
    the default branch of a bare mirror, newest first, and keeps commits shaped like a bug fix:

    * 1 or 2 non-test ``.py`` files under the project's ``package`` change, by at most
      ``MAX_SOURCE_LINES`` code lines in all (blank, comment and docstring lines don't count);
    * at least one file under its ``tests`` changes;
    * the message contains one of ``FIX_WORDS`` (or an ``#NNN`` reference).

    Each such candidate is then checked by running its tests.  The *fixed* tree is the commit;
    the *buggy* tree is the same tree with the changed source files taken from the parent, so it
    carries the fixing commit's tests.

    1. quick run: the changed test modules, in both trees.  FAIL_TO_PASS = tests that fail
       (or error) in the buggy tree and pass in the fixed one; none -> rejected;
    2. the whole suite in the fixed tree: at most ``MAX_DESELECTED`` tests may fail; they
       become ``deselect`` (old trees on a new Python/pytest have a few such tests);
    3. the whole suite in the buggy tree, with those deselected: every failure must be in
       FAIL_TO_PASS (otherwise the fix does more than the tests say, or a test is flaky).
       PASS_TO_PASS = tests passing in both.

    Every rejected candidate is recorded with its reason in ``OUT/<project>/mined.json``, so a
    later run skips it (``--retry`` re-examines them).  Walking stops once a project has
    ``--max`` accepted tasks.

Layout written (all under ``--out``, default ``benchmarks/history/corpus``)
    OUT/<project>/.venv/           python3.11 venv: pytest, the project's ``requires``, and its
                                   newest PyPI release installed --no-deps (for its metadata)
    OUT/<project>/mined.json       walk statistics, accepted commits, rejections and reasons
    OUT/<project>/<sha7>/project/  the buggy tree (no .git)
    OUT/<project>/<sha7>/fixed/    the fixed tree
    OUT/<project>/<sha7>/task.json id, project, repo, commit, parent, subject, date,
                                   FAIL_TO_PASS, PASS_TO_PASS, reference (source diff
                                   parent->fix), test_patch, changed ({path: [buggy code lines the
                                   fix removes or replaces, or the line before a pure
                                   insertion]}), first_line, suite, deselect, python
    OUT/tasks.jsonl                one SWE-bench-style row per task (see ``write_index``)

How tests are run (the same way FrogNano runs a project)
    ``python -m pytest`` with cwd = the tree, ``PYTHONPATH=tree/src`` when the tree has
    ``src/``, else ``PYTHONPATH=tree``, and ``--rootdir=tree``, so node ids are relative to the
    tree root, plus ``-p no:cacheprovider --continue-on-collection-errors``.  Outcomes come
    from the ``_outcomes`` plugin in this folder.  The trees are tested in the system's temp
    folder and moved to OUT afterwards.  Caution for consumers: a tree without its own pytest
    configuration (sqlparse, more-itertools, old toolz) that is run in place under OUT inherits
    the configuration of the repository around OUT; copy it out first (FrogNano does), or pass
    ``-c`` explicitly.

Concurrency
    Everything a project run writes is under ``OUT/<project>/``, so one process per project may
    run at the same time (never two for the same project).  ``OUT/tasks.jsonl`` is rebuilt
    from all ``task.json`` files at the end of every run, under an exclusive ``flock`` on
    ``OUT/.index.lock`` and via an atomic rename, so concurrent runs never leave it partial or
    with duplicates; ``--index`` rebuilds only that file.

Usage
    python3.11 benchmarks/history/mine.py                     # every project, 15 tasks each
    python3.11 benchmarks/history/mine.py --projects click,toolz --max 5
    python3.11 benchmarks/history/mine.py --projects toolz --dry-run   # list shape candidates
    python3.11 benchmarks/history/mine.py --index             # only rebuild OUT/tasks.jsonl
    (--mirrors DIR: the folder of bare mirrors, default /work/.mirror)

Other scripts read the corpus with ``from mine import load_corpus`` (this folder on sys.path).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tokenize
import tomllib
from collections import Counter
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECTS_TOML = HERE / "projects.toml"
DEFAULT_OUT = HERE / "corpus"
DEFAULT_MIRRORS = Path("/work/.mirror")

# Words that mark a commit message as a bug fix (matched as whole words, case-insensitively,
# with common inflections); an issue reference "#123" counts as well.
FIX_WORDS = (
    "fix", "bug", "correct", "wrong", "broken", "crash", "regression", "handle", "error",
    "issue",
)
FIX_RE = re.compile(
    r"\b(?:" + "|".join(FIX_WORDS) + r")(?:e?s|ed|ing|ion)?\b|#\d+", re.IGNORECASE
)
# pytest 9 turns long-deprecated usages (e.g. generators given to parametrize) into warnings
# that the projects' "filterwarnings = error" make collection errors in older trees; FrogNano
# itself needs pytest >= 7.4.
DEFAULT_PYTEST = "pytest>=7.4,<9"
MAX_SOURCE_FILES = 2
MAX_SOURCE_LINES = 10
MAX_DESELECTED = 10
QUICK_TIMEOUT = 120
SUITE_TIMEOUT = 300
# Files that tests or tools may leave in a tree; removed before a tree is laid out.
ARTIFACTS = ("__pycache__", ".pytest_cache", ".hypothesis")


# ---------------------------------------------------------------------------------------------
# projects and mirrors


@dataclass(frozen=True)
class Project:
    name: str
    repo: str
    package: tuple[str, ...]
    tests: tuple[str, ...]
    requires: tuple[str, ...]
    dist: str
    since: str
    kind: str
    pytest: str = DEFAULT_PYTEST


def _as_tuple(value: str | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def load_projects(path: Path = PROJECTS_TOML) -> dict[str, Project]:
    with path.open("rb") as handle:
        tables = tomllib.load(handle)
    return {
        name: Project(
            name=name,
            repo=t["repo"],
            package=_as_tuple(t["package"]),
            tests=_as_tuple(t["tests"]),
            requires=tuple(t.get("requires", ())),
            dist=t["dist"],
            since=t["since"],
            kind=t["kind"],
            pytest=t.get("pytest", DEFAULT_PYTEST),
        )
        for name, t in tables.items()
    }


def mirror_path(root: Path, project: Project) -> Path:
    path = root / project.repo.replace("/", "+") / "repo"
    if not (path / "HEAD").exists():
        raise SystemExit(
            f"no bare mirror of {project.repo} at {path}.  Get one with the `fetch` tool "
            f"(source github:{project.repo}) or with "
            f"`git clone --mirror https://github.com/{project.repo} {path}`, "
            f"or point --mirrors at the folder that holds owner+name/repo."
        )
    return path


def git(mirror: Path, *args: str, binary: bool = False) -> str | bytes:
    result = subprocess.run(
        ["git", "--git-dir", str(mirror), *args], capture_output=True, check=True
    )
    return result.stdout if binary else result.stdout.decode("utf-8", "replace")


def git_diff(mirror: Path, parent: str, commit: str, paths: list[str], *extra: str) -> str:
    # Explicit prefixes and no renames: the diff must apply with `git apply`/`patch -p1` to a
    # tree whatever the user's git configuration says.
    return git(
        mirror, "diff", "--no-color", "--no-ext-diff", "--no-renames", "--src-prefix=a/",
        "--dst-prefix=b/", *extra, parent, commit, "--", *paths,
    )


# ---------------------------------------------------------------------------------------------
# walking the history and the shape filter


@dataclass
class Commit:
    sha: str
    parents: list[str]
    date: str
    subject: str
    body: str
    files: list[str]  # paths changed relative to the first parent


def iter_commits(mirror: Path, since: str):
    """Yield the commits of the default branch (HEAD of the mirror), newest first."""
    # Records start with NUL; the header ends with 0x1e and the --name-only list follows.
    fmt = "%x00%H%x1f%P%x1f%aI%x1f%s%x1f%b%x1e"
    out = git(
        mirror, "log", "--no-merges", f"--since={since}", f"--format={fmt}", "--name-only",
        "--no-renames", "HEAD",
    )
    for record in out.split("\x00")[1:]:
        header, _, names = record.partition("\x1e")
        sha, parents, date, subject, body = header.split("\x1f")
        yield Commit(
            sha=sha,
            parents=parents.split(),
            date=date,
            subject=subject,
            body=body.strip(),
            files=[line for line in names.splitlines() if line.strip()],
        )


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def classify(path: str, project: Project) -> str:
    """'test', 'source' (.py under package), 'package-data' or 'other'."""
    if _under(path, project.tests):
        return "test"
    if not _under(path, project.package):
        return "other"
    parts = path.split("/")
    # Tests kept inside the package but outside the listed suites are neither bug nor test.
    if {"test", "tests"} & set(parts[:-1]) or parts[-1].startswith("test_"):
        return "other"
    if path.endswith((".pyi", "py.typed")):
        return "other"  # type stubs do not change what the tests see
    return "source" if path.endswith(".py") else "package-data"


def is_test_module(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def docstring_lines(source: str) -> set[int]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> set[int]:
    """Line numbers holding code: not blank, not comment-only, not inside a docstring."""
    lines: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.ENCODING}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type not in skip:
                lines.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Not Python 3 enough to tokenize: fall back to a textual guess.
        lines = {
            n for n, text in enumerate(source.splitlines(), 1)
            if text.strip() and not text.lstrip().startswith("#")
        }
    return lines - docstring_lines(source)


HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def parse_hunks(diff_u0: str) -> dict[str, list[tuple[int, int, int, int]]]:
    """{path: [(old_start, old_count, new_start, new_count)]} from a -U0 git diff."""
    hunks: dict[str, list[tuple[int, int, int, int]]] = {}
    for chunk in re.split(r"^diff --git ", diff_u0, flags=re.MULTILINE)[1:]:
        old = re.search(r"^--- (?:a/(.*)|/dev/null)$", chunk, re.MULTILINE)
        new = re.search(r"^\+\+\+ (?:b/(.*)|/dev/null)$", chunk, re.MULTILINE)
        path = (old and old.group(1)) or (new and new.group(1))
        if not path:
            continue
        hunks[path] = [
            (int(a), int(b or 1), int(c), int(d or 1))
            for a, b, c, d in HUNK_RE.findall(chunk)
        ]
    return hunks


@dataclass
class SourceChange:
    path: str
    old: str | None  # the parent's text; None when the fix adds the file
    new: str | None  # the fix's text; None when the fix deletes the file
    hunks: list[tuple[int, int, int, int]]

    def code_line_count(self) -> int:
        old_code = code_lines(self.old or "")
        new_code = code_lines(self.new or "")
        removed = sum(
            1 for a, b, _, _ in self.hunks for n in range(a, a + b) if n in old_code
        )
        added = sum(1 for _, _, c, d in self.hunks for n in range(c, c + d) if n in new_code)
        return removed + added

    def buggy_lines(self) -> list[int]:
        """Code lines of the buggy file the fix removes or replaces; for an insertion of code,
        the last code line before the insertion point."""
        if self.old is None:
            return []
        old_code = code_lines(self.old)
        new_code = code_lines(self.new or "")
        lines: set[int] = set()
        for a, b, c, d in self.hunks:
            replaced = [n for n in range(a, a + b) if n in old_code]
            if replaced:
                lines.update(replaced)
                continue
            if not any(n in new_code for n in range(c, c + d)):
                continue  # only comments, blank lines or docstrings changed here
            # -a,0 inserts after line a; -a,b with no code in it sits just after line a+b-1.
            anchor = a + b - 1 if b else a
            before = [n for n in old_code if n <= anchor]
            lines.add(max(before) if before else min(old_code, default=1))
        return sorted(lines)


@dataclass
class Candidate:
    project: Project
    commit: Commit
    sources: list[SourceChange]
    tests: list[str]  # every changed file under the tests roots

    @property
    def parent(self) -> str:
        return self.commit.parents[0]

    @property
    def sha7(self) -> str:
        return self.commit.sha[:7]


def read_blob(mirror: Path, sha: str, path: str) -> str | None:
    try:
        return git(mirror, "show", f"{sha}:{path}")
    except subprocess.CalledProcessError:
        return None


def shape_check(mirror: Path, project: Project, commit: Commit) -> tuple[str | None, Candidate | None]:
    """(rejection reason, None) or (None, candidate), cheapest tests first."""
    if not commit.parents:
        return "no-parent", None
    kinds = {path: classify(path, project) for path in commit.files}
    sources = [p for p, k in kinds.items() if k == "source"]
    tests = [p for p, k in kinds.items() if k == "test"]
    if not sources:
        return "no-source-change", None
    if len(sources) > MAX_SOURCE_FILES:
        return "too-many-source-files", None
    if "package-data" in kinds.values():
        return "package-data-change", None
    if not tests:
        return "no-test-change", None
    if not FIX_RE.search(f"{commit.subject}\n{commit.body}"):
        return "no-fix-word", None
    parent = commit.parents[0]
    hunks = parse_hunks(git_diff(mirror, parent, commit.sha, sources, "-U0"))
    changes = [
        SourceChange(
            path=path,
            old=read_blob(mirror, parent, path),
            new=read_blob(mirror, commit.sha, path),
            hunks=hunks.get(path, []),
        )
        for path in sorted(sources)
    ]
    count = sum(change.code_line_count() for change in changes)
    if count == 0:
        return "no-code-change", None
    if count > MAX_SOURCE_LINES:
        return "too-many-lines", None
    if not any(change.buggy_lines() for change in changes):
        return "no-buggy-line", None  # e.g. only new files
    return None, Candidate(project, commit, changes, sorted(tests))


# ---------------------------------------------------------------------------------------------
# trees, venvs and test runs


def export_tree(mirror: Path, sha: str, dest: Path) -> None:
    data = git(mirror, "archive", "--format=tar", sha, binary=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(dest, filter="data")


def make_buggy(candidate: Candidate, fixed: Path, buggy: Path) -> None:
    """The fixed tree with the changed source files as they were in the parent."""
    shutil.copytree(fixed, buggy, symlinks=True)
    for change in candidate.sources:
        target = buggy / change.path
        if change.old is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(change.old, encoding="utf-8")


def clean_tree(tree: Path) -> None:
    for name in ARTIFACTS:
        for path in sorted(tree.rglob(name), reverse=True):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)


def ensure_venv(project: Project, pdir: Path, base_python: str) -> Path:
    """OUT/<project>/.venv with pytest, the project's requires and its newest release."""
    venv = pdir / ".venv"
    python = venv / "bin" / "python"
    wanted = "\n".join([project.pytest, *project.requires, f"--no-deps {project.dist}"]) + "\n"
    stamp = venv / "mined-requirements.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python.absolute()
    log(project.name, f"creating {venv}")
    subprocess.run([base_python, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, project.pytest, *project.requires], check=True)
    # --no-deps: only the metadata matters (importlib.metadata.version); the tree under test
    # shadows the installed code because it comes first on PYTHONPATH.
    subprocess.run([*pip, "--no-deps", project.dist], check=True)
    stamp.write_text(wanted)
    return python.absolute()


def suite_args(project: Project, tree: Path) -> list[str]:
    return [entry for entry in project.tests if (tree / entry).exists()]


def test_env(tree: Path, outcomes: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV", "PYTHONHOME")}
    # Same import rule as FrogNano: src/ first for src layouts, the tree root otherwise.
    root = tree / "src" if (tree / "src").is_dir() else tree
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(HERE)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # keep the trees free of __pycache__
    env["HISTORY_OUTCOMES"] = str(outcomes)
    return env


@dataclass
class Run:
    outcomes: dict[str, str]
    timed_out: bool = False
    tail: str = ""

    def failing(self) -> set[str]:
        return {n for n, o in self.outcomes.items() if o in ("failed", "error")}

    def passing(self) -> set[str]:
        return {n for n, o in self.outcomes.items() if o == "passed"}


def run_pytest(python: Path, tree: Path, targets: list[str], timeout: int,
               deselect: list[str] = ()) -> Run:
    fd, name = tempfile.mkstemp(prefix="outcomes-", suffix=".json")
    os.close(fd)
    outcomes = Path(name)
    cmd = [str(python), "-m", "pytest", "-p", "_outcomes", "-p", "no:cacheprovider",
           f"--rootdir={tree}", "--continue-on-collection-errors", *targets]
    for nodeid in deselect:
        cmd += ["--deselect", nodeid]
    # A session of its own, so a timeout kills every process the tests started.
    proc = subprocess.Popen(cmd, cwd=tree, env=test_env(tree, outcomes), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    try:
        text = outcomes.read_text()
        result = json.loads(text) if text.strip() else {}
    except (OSError, json.JSONDecodeError):
        result = {}
    finally:
        outcomes.unlink(missing_ok=True)
    return Run(result, timed_out, out.decode("utf-8", "replace")[-3000:])


# ---------------------------------------------------------------------------------------------
# judging one candidate


class Rejected(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _sample(nodeids) -> str:
    nodeids = sorted(nodeids)
    more = f" (+{len(nodeids) - 5} more)" if len(nodeids) > 5 else ""
    return ", ".join(nodeids[:5]) + more


def judge(candidate: Candidate, python: Path, fixed: Path, buggy: Path) -> dict:
    """Run the tests in both trees; return FAIL_TO_PASS etc., or raise Rejected."""
    modules = [p for p in candidate.tests if is_test_module(p) and (fixed / p).exists()]
    if not modules:
        raise Rejected("no-test-module", _sample(candidate.tests))

    quick_fixed = run_pytest(python, fixed, modules, QUICK_TIMEOUT)
    quick_buggy = run_pytest(python, buggy, modules, QUICK_TIMEOUT)
    if quick_fixed.timed_out or quick_buggy.timed_out:
        raise Rejected("quick-timeout")
    if not quick_fixed.outcomes:
        raise Rejected("pytest-crash", quick_fixed.tail[-500:])
    # Module-level errors (node ids without "::") mean the tree does not even import: in the
    # fixed tree usually an old tree on a new Python, in the buggy one a test of a new API.
    if broken := {n for n in quick_fixed.failing() if "::" not in n}:
        raise Rejected("fixed-collection-error", quick_fixed.tail[-500:])
    f2p = quick_buggy.failing() & quick_fixed.passing()
    if not f2p:
        broken = {n for n in quick_buggy.failing() if "::" not in n}
        raise Rejected("buggy-collection-error" if broken else "no-fail-to-pass",
                       quick_buggy.tail[-500:] if broken else "")

    suite = suite_args(candidate.project, fixed)
    full_fixed = run_pytest(python, fixed, suite, SUITE_TIMEOUT)
    if full_fixed.timed_out:
        raise Rejected("suite-timeout", "fixed tree")
    failing = full_fixed.failing()
    # A module that cannot even be collected cannot be deselected by node id.
    broken = {n for n in failing if "::" not in n}
    if broken:
        raise Rejected("fixed-collection-error", _sample(broken))
    if len(failing) > MAX_DESELECTED:
        raise Rejected("fixed-suite-failures", f"{len(failing)}: {_sample(failing)}")
    if failing & f2p or not f2p <= full_fixed.passing():
        raise Rejected("flaky", "FAIL_TO_PASS not passing in the fixed suite")
    deselect = sorted(failing)

    full_buggy = run_pytest(python, buggy, suite, SUITE_TIMEOUT, deselect)
    if full_buggy.timed_out:
        raise Rejected("suite-timeout", "buggy tree")
    unexpected = full_buggy.failing() - f2p
    if unexpected:
        raise Rejected("buggy-suite-extra-failures", _sample(unexpected))
    if not f2p <= full_buggy.failing():
        raise Rejected("flaky", "FAIL_TO_PASS passing in the buggy suite")
    p2p = (full_fixed.passing() & full_buggy.passing()) - set(deselect)
    return {
        "FAIL_TO_PASS": sorted(f2p),
        "PASS_TO_PASS": sorted(p2p),
        "suite": suite,
        "deselect": deselect,
    }


def task_record(candidate: Candidate, mirror: Path, results: dict, python: Path) -> dict:
    commit, parent = candidate.commit, candidate.parent
    changed = {}
    for change in candidate.sources:  # sorted by path: git's diff order
        lines = change.buggy_lines()
        if lines:
            changed[change.path] = lines
    first_path = next(iter(changed))
    return {
        "id": f"{candidate.project.name}-{candidate.sha7}",
        "project": candidate.project.name,
        "repo": candidate.project.repo,
        "commit": commit.sha,
        "parent": parent,
        "subject": commit.subject,
        "date": commit.date,
        "FAIL_TO_PASS": results["FAIL_TO_PASS"],
        "PASS_TO_PASS": results["PASS_TO_PASS"],
        "reference": git_diff(mirror, parent, commit.sha, [c.path for c in candidate.sources]),
        "test_patch": git_diff(mirror, parent, commit.sha, candidate.tests, "--binary"),
        "changed": changed,
        "first_line": [first_path, changed[first_path][0]],
        "suite": results["suite"],
        "deselect": results["deselect"],
        "python": str(python),
    }


def examine(candidate: Candidate, mirror: Path, python: Path, pdir: Path) -> dict:
    """Build both trees in a scratch folder, judge, and lay out an accepted task in pdir."""
    # The scratch folder is in the system's temp dir, not under OUT: pytest looks for its
    # configuration upwards from the tree, and a tree without its own (sqlparse, old toolz)
    # must not pick up that of a repository OUT happens to sit in (this one's pyproject.toml).
    with tempfile.TemporaryDirectory(prefix=f"mine-{candidate.project.name}-") as scratch:
        fixed, buggy = Path(scratch) / "fixed", Path(scratch) / "project"
        export_tree(mirror, candidate.commit.sha, fixed)
        make_buggy(candidate, fixed, buggy)
        results = judge(candidate, python, fixed, buggy)
        task = task_record(candidate, mirror, results, python)
        for tree in (fixed, buggy):
            clean_tree(tree)
        final = pdir / candidate.sha7
        shutil.rmtree(final, ignore_errors=True)
        final.mkdir()
        shutil.move(fixed, final / "fixed")  # a rename when /tmp and OUT share a disk
        shutil.move(buggy, final / "project")
        (final / "task.json").write_text(json.dumps(task, indent=1) + "\n")
        return task


# ---------------------------------------------------------------------------------------------
# per-project state and the mining loop


def log(project: str, message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {project}: {message}", file=sys.stderr, flush=True)


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


@dataclass
class Summary:
    project: Project
    walked: int = 0
    candidates: int = 0
    tested: int = 0
    accepted: int = 0
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0


def load_state(pdir: Path) -> dict:
    path = pdir / "mined.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"rejected": {}, "accepted": []}


def mine_project(project: Project, mirror: Path, out: Path, args) -> Summary:
    start = time.monotonic()
    pdir = out / project.name
    pdir.mkdir(parents=True, exist_ok=True)
    summary = Summary(project)
    state = load_state(pdir)
    state_lock = threading.Lock()
    python = None if args.dry_run else ensure_venv(project, pdir, args.python)
    accepted: list[str] = []

    def save() -> None:
        state["project"] = project.name
        state["accepted"] = sorted(set(state["accepted"]) | set(accepted))
        state["walk"] = {"walked": summary.walked, "candidates": summary.candidates,
                         "reasons": dict(summary.reasons), "since": project.since}
        write_json(pdir / "mined.json", state)

    def finish(candidate: Candidate, future: Future, began: float) -> None:
        sha = candidate.commit.sha
        try:
            future.result()
            verdict = "ACCEPTED"
        except Exception as exc:  # Rejected, or a surprise that should not stop the walk
            rejection = exc if isinstance(exc, Rejected) else Rejected("internal-error", repr(exc))
            verdict = f"rejected {rejection.reason}"
        with state_lock:
            if verdict == "ACCEPTED":
                accepted.append(sha)
                state["rejected"].pop(sha, None)
                summary.accepted += 1
            else:
                state["rejected"][sha] = {"reason": rejection.reason, "detail": rejection.detail,
                                          "subject": candidate.commit.subject}
                summary.reasons[rejection.reason] += 1
                shutil.rmtree(pdir / candidate.sha7, ignore_errors=True)  # stale, if --refresh
            save()
        log(project.name, f"{candidate.sha7} {verdict} ({time.monotonic() - began:.0f}s) "
                          f"{candidate.commit.subject[:60]}")

    inflight: dict[Future, tuple[Candidate, float]] = {}

    def drain(everything: bool = False) -> None:
        done, _ = wait(inflight, return_when=ALL_COMPLETED if everything else FIRST_COMPLETED)
        for future in done:
            candidate, began = inflight.pop(future)
            finish(candidate, future, began)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for commit in iter_commits(mirror, project.since):
            # At most --jobs runs at once, and no more than the quota can still use.
            while inflight and (len(inflight) >= args.jobs
                                or summary.accepted + len(inflight) >= args.max):
                drain()
            if summary.accepted >= args.max:
                break
            summary.walked += 1
            reason, candidate = shape_check(mirror, project, commit)
            if reason:
                summary.reasons[f"shape:{reason}"] += 1
                continue
            summary.candidates += 1
            sha = commit.sha
            if args.dry_run:
                log(project.name, f"{sha[:7]} candidate {commit.date[:10]} {commit.subject[:60]}")
                continue
            if (pdir / sha[:7] / "task.json").exists() and not args.refresh:
                summary.accepted += 1  # laid out by an earlier run: kept as it is
                accepted.append(sha)
                continue
            if sha in state["rejected"] and not args.retry:
                summary.reasons[state["rejected"][sha]["reason"]] += 1
                continue
            summary.tested += 1
            future = pool.submit(examine, candidate, mirror, python, pdir)
            inflight[future] = (candidate, time.monotonic())
        if inflight:
            drain(everything=True)
    if not args.dry_run:
        save()
    summary.seconds = time.monotonic() - start
    return summary


# ---------------------------------------------------------------------------------------------
# the corpus and its SWE-bench-style index


def load_corpus(corpus: Path, projects: list[str] | None = None) -> list[dict]:
    """Every task.json under corpus (OUT/<project>/<sha7>/task.json), sorted by path."""
    tasks = []
    for path in sorted(Path(corpus).glob("*/*/task.json")):
        if projects is None or path.parent.parent.name in projects:
            tasks.append(json.loads(path.read_text()))
    return tasks


def swe_row(task: dict) -> dict:
    # SWE-bench ships FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings.
    return {
        "instance_id": task["id"],
        "repo": task["repo"],
        "base_commit": task["parent"],
        "patch": task["reference"],
        "test_patch": task["test_patch"],
        "problem_statement": task["subject"],
        "created_at": task["date"],
        "FAIL_TO_PASS": json.dumps(task["FAIL_TO_PASS"]),
        "PASS_TO_PASS": json.dumps(task["PASS_TO_PASS"]),
    }


def write_index(out: Path) -> int:
    """Rewrite OUT/tasks.jsonl from all task.json files; safe against concurrent runs."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".index.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tasks = load_corpus(out)
        tmp = out / "tasks.jsonl.tmp"
        with tmp.open("w") as handle:
            for task in tasks:
                handle.write(json.dumps(swe_row(task)) + "\n")
        os.replace(tmp, out / "tasks.jsonl")
    return len(tasks)


# ---------------------------------------------------------------------------------------------
# command line


def print_table(summaries: list[Summary]) -> None:
    header = ("project", "kind", "walked", "candidates", "tested", "accepted", "seconds")
    rows = [
        (s.project.name, s.project.kind, str(s.walked), str(s.candidates), str(s.tested),
         str(s.accepted), f"{s.seconds:.0f}")
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    print()
    for s in summaries:
        tests = sorted((r, n) for r, n in s.reasons.items() if not r.startswith("shape:"))
        shape = sorted((r[6:], n) for r, n in s.reasons.items() if r.startswith("shape:"))
        print(f"{s.project.name}: rejected after running tests: "
              + (", ".join(f"{r} {n}" for r, n in tests) or "none"))
        print(f"{' ' * len(s.project.name)}  filtered by shape: "
              + (", ".join(f"{r} {n}" for r, n in shape) or "none"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Mine real historical bug fixes into a benchmark corpus.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--projects", help="comma-separated names (default: all in projects.toml)")
    parser.add_argument("--max", type=int, default=15, help="tasks per project (default 15)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="corpus folder")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS,
                        help="folder of bare mirrors owner+name/repo (default /work/.mirror)")
    parser.add_argument("--config", type=Path, default=PROJECTS_TOML, help="projects.toml")
    parser.add_argument("--python", default="python3.11", help="interpreter for the venvs")
    parser.add_argument("--jobs", type=int, default=1, help="candidates examined at once")
    parser.add_argument("--refresh", action="store_true",
                        help="re-examine commits that already have a task folder")
    parser.add_argument("--retry", action="store_true",
                        help="re-examine commits rejected by an earlier run")
    parser.add_argument("--dry-run", action="store_true",
                        help="only list the commits that pass the shape filter")
    parser.add_argument("--index", action="store_true", help="only rebuild OUT/tasks.jsonl")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (kill PID) unwinds like Ctrl-C, so scratch folders in /tmp are removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    out = args.out.absolute()
    if args.index:
        print(f"{write_index(out)} tasks in {out / 'tasks.jsonl'}")
        return 0
    projects = load_projects(args.config)
    names = args.projects.split(",") if args.projects else list(projects)
    unknown = [n for n in names if n not in projects]
    if unknown:
        raise SystemExit(f"unknown project(s) {', '.join(unknown)}; known: {', '.join(projects)}")
    mirrors = {n: mirror_path(args.mirrors, projects[n]) for n in names}  # fail early
    summaries = [mine_project(projects[n], mirrors[n], out, args) for n in names]
    print_table(summaries)
    if not args.dry_run:
        print(f"\n{write_index(out)} tasks in {out / 'tasks.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
