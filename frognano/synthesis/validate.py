"""Validate one injected bug in the shadow copy and turn it into a Task (docs/ARCHITECTURE.md §5, §6).

The mutant is written into the shadow (``Workspace.edited``; the project is never touched) and
the tests covering the mutated *function* run, plus a small random sample of the other
baseline-passing tests.  A bug is kept when

* at least one covering test fails, and a second run of the failing tests fails the same ones
  (else "flaky");
* no test times out ("timeout": per-test limits come from baseline durations, so a mutant that
  loops forever costs seconds) and collection still works ("breaks collection");
* no sampled test outside the coverage set fails ("breaks other tests": a side effect the
  coverage map does not explain, e.g. at import time);
* no test runs out of memory or kills its process ("exhausts memory", "crashes the test
  process": outcomes that depend on the machine's limits);
* the failing tests pass on the clean code when run on their own in reverse order (else
  "order-dependent test": it passed at baseline only thanks to the tests before it);
* every test the task would name has passed ``flaky.runs_needed()`` runs of the clean code
  (``flaky.Stability``: enough to catch a 40%-flaky test with 99% probability); a flaky
  FAIL_TO_PASS test refuses the task ("flaky"), a flaky passing test is left out of
  PASS_TO_PASS (and named in the task's ``flaky_dropped``).

``PASS_TO_PASS`` lists the tests that were run and passed (verified, not assumed), flaky ones left out.

Difficulty features:

* ``distance``: calls between the failing test and the buggy function, from the traceback
  frames: 0 when the buggy function's frame is directly below the test's frame, k when k
  frames lie between them.  When the bug function is not in the traceback (it returned a wrong
  value that the test later checked) the estimate is 0 when the test file names the function
  directly, else 1.  The minimum over the failing tests.
* ``traceback_through_bug``: some failing test's traceback has a frame on a mutated line.
* ``file_lines``: lines of the mutated file (of all mutated files, for bugs in several files).
"""

from __future__ import annotations

import difflib
import hashlib
import posixpath
import random
import re
import subprocess
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..operators import CATALOGUE, Mutation
from ..project_paths import nodeid_file
from ..sandbox.results import RunResult, TestResult
from ..sandbox.runner import TestRunner
from ..sandbox.specification import Specification
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from ..errors import UsageError
from .flaky import Stability
from .frontier import HINTS, Family
from .inject import function_spans
from .store import Task

__all__ = ["Checks", "Rejection", "base_commit", "baseline_timeouts", "combine", "content_hash", "family_key", "hint_text",
           "module_of", "unified_diff", "validate"]


@dataclass(frozen=True)
class Rejection:
    reason: str  # "no test fails", "flaky", "breaks other tests", "timeout", "breaks collection", ...
    detail: str = ""
    flaky: tuple[str, ...] = ()  # tests this validation found flaky (for the run's statistics)

    def __bool__(self) -> bool:  # a Rejection is falsy, a Task truthy
        return False


def baseline_timeouts(baseline: RunResult, timeout: float = 30.0, factor: float = 5.0,
                      floor: float = 2.0) -> dict[str, float]:
    """Per-test limits: a few times the baseline duration, at least ``floor``, at most ``timeout``."""
    return {n: min(timeout, max(floor, factor * t.duration + 1.0)) for n, t in baseline.tests.items()}


def base_commit(root: Path, files: Iterable[str]) -> tuple[str, str]:
    """(``git rev-parse HEAD``, "git") for a clean git checkout, else (sha1 of the listed files'
    paths and bytes, "content")."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=30)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == Path(root).resolve():
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain"],
                                    capture_output=True, text=True, timeout=60)
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=30)
            if status.returncode == 0 and not status.stdout.strip() and head.returncode == 0:
                return head.stdout.strip(), "git"
    except (OSError, subprocess.SubprocessError):
        pass
    return content_hash(root, files), "content"


def content_hash(root: Path, files: Iterable[str]) -> str:
    """sha1 of the listed files' paths and bytes: a tree's identity outside git."""
    h = hashlib.sha1()
    for rel in sorted(files):
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        try:
            h.update((Path(root) / rel).read_bytes())
        except OSError:
            pass
        h.update(b"\0")
    return h.hexdigest()


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style diff of one file relative to the repo root (a/ b/ prefixes)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(a, b, fromfile=f"a/{path}", tofile=f"b/{path}"):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        lines.append(line)
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def module_of(path: str) -> str:
    """The module a file belongs to for combinations: its package directory."""
    return posixpath.dirname(path)


def family_key(mutation: Mutation, distance: int, hint: str = "function", bugs: int = 1) -> str:
    """The family key; for a combination of bugs ``mutation`` is the first (primary) bug."""
    op = CATALOGUE[mutation.operator].family if mutation.operator in CATALOGUE else mutation.operator
    return Family(op, bugs, hint, Family.bucket(distance)).key


def _bug_places(info) -> list[tuple[str, str]]:
    """(path, function) of each bug in a Task, a Mutation, a list of Mutations or a mapping."""
    if isinstance(info, Mutation):
        return [(info.path, info.function)]
    if isinstance(info, (list, tuple)):
        return [p for m in info for p in _bug_places(m)]
    extra = info.extra if isinstance(info, Task) else info
    if extra.get("bugs"):
        return [(b["bug_path"], b["bug_function"]) for b in extra["bugs"]]
    return [(extra.get("bug_path", ""), extra.get("bug_function", ""))]


def hint_text(info, level: str, tests: Iterable[str] | None = None) -> str:
    """The hint shown with a task at ``level`` (a difficulty dial, easiest first):

    * ``"function"``: names the file and the function of each bug;
    * ``"file"``: names only the file(s);
    * ``"test"``: names only the failing test ids.

    ``info`` is a Task (its ``extra`` bug fields and FAIL_TO_PASS are used), a Mutation, a list
    of Mutations, or a mapping with ``bug_path``/``bug_function`` (or ``bugs``: a list of such
    mappings) and optionally ``FAIL_TO_PASS``; ``tests`` overrides the failing tests.
    """
    if level not in HINTS:
        raise UsageError(f"hint must be one of {', '.join(HINTS)}, got {level!r}")
    if level == "test":
        if tests is None:
            tests = info.FAIL_TO_PASS if isinstance(info, Task) else (
                info.get("FAIL_TO_PASS", []) if isinstance(info, dict) else [])
        tests = list(tests)
        return ("Failing test: " if len(tests) == 1 else "Failing tests: ") + ", ".join(tests)
    places = list(dict.fromkeys(_bug_places(info)))
    if level == "file":
        files = list(dict.fromkeys(p for p, _ in places))
        return f"The bug is in {files[0]}" if len(files) == 1 else "The bugs are in " + ", ".join(files)
    if len(places) == 1:
        return f"The bug is in `{places[0][1]}` ({places[0][0]})"
    return "The bugs are in " + ", ".join(f"`{f}` ({p})" for p, f in places)


def _distance(result: TestResult, mutation: Mutation, span: range, test_source: str | None) -> tuple[int, bool]:
    """(distance, traceback passes through a bug line) for one failing test."""
    frames = result.frames
    test_file = nodeid_file(result.nodeid)
    through = any(f.path == mutation.path and mutation.line <= f.line <= max(mutation.line, mutation.end_line)
                  for f in frames)
    test_idx = max((i for i, f in enumerate(frames) if f.path == test_file), default=None)
    bug_idx = next((i for i, f in enumerate(frames) if f.path == mutation.path and f.line in span
                    and (test_idx is None or i > test_idx)), None)
    if bug_idx is not None:
        # test frames may repeat (helpers in the test file): count from the last test frame above.
        above = max((i for i, f in enumerate(frames[:bug_idx]) if f.path == test_file), default=-1)
        return max(0, bug_idx - above - 1), through
    name = mutation.function.rsplit(".", 1)[-1]
    direct = test_source is not None and re.search(rf"\b{re.escape(name)}\b", test_source) is not None
    return (0 if direct else 1), through


@dataclass(frozen=True)
class Checks:
    """How one validation runs, besides the workspace, runner, baseline and coverage."""

    timeouts: dict[str, float]  # per-test limits (``baseline_timeouts``)
    rng: random.Random  # draws the sample of other tests
    sample_others: int = 10  # baseline-passing tests outside the coverage set to run as well
    repo: str | None = None  # the Task's repo; default: the workspace root
    base: tuple[str, str] | None = None  # (commit, kind); default: ``base_commit`` of the workspace
    hint: str = "function"  # hint level written into the Task and its family key
    exclude: Collection[str] = ()  # tests never used (e.g. found to depend on their order)
    # Which tests are proven stable or found flaky; shared by the validations of one process.
    # None: a fresh one that knows only the baseline's passes.
    stability: Stability | None = None


def validate(ws: Workspace, runner: TestRunner, baseline: RunResult, coverage: CoverageMap,
             mutation: Mutation, *, timeouts: dict[str, float], rng: random.Random,
             sample_others: int = 10, repo: str | None = None,
             base: tuple[str, str] | None = None, hint: str = "function",
             exclude: Collection[str] = (), stability: Stability | None = None) -> Task | Rejection:
    """Apply ``mutation`` in the shadow, run the tests that matter, and return a Task or why not.

    ``exclude``: tests never used (e.g. found to depend on their order at baseline).
    ``stability``: the process's record of proven and flaky tests (``flaky.Stability``)."""
    checks = Checks(timeouts, rng, sample_others, repo, base, hint, exclude, _stability(stability, baseline))
    return _check(_Trial(ws, runner, baseline, coverage, [mutation], checks))


def combine(ws: Workspace, runner: TestRunner, baseline: RunResult, coverage: CoverageMap,
            mutations: list[Mutation], *, k: int = 2, timeouts: dict[str, float], rng: random.Random,
            sample_others: int = 10, repo: str | None = None,
            base: tuple[str, str] | None = None, hint: str = "function",
            exclude: Collection[str] = (), stability: Stability | None = None) -> Task | Rejection:
    """A task with ``k`` bugs at once: the first ``k`` of ``mutations`` (bugs already validated
    one by one, all in one module: the same file or files of the same package directory, edits
    not overlapping) applied together in one patch and validated like a single bug
    (FAIL_TO_PASS: the tests failing with all of them; a second run agrees; the sampled other
    tests pass).  The family's operator is the first bug's."""
    if k < 2:
        raise UsageError(f"a combination needs k >= 2 bugs, got {k}")
    ms = list(mutations)[:k]
    if len(ms) < k:
        return Rejection("too few bugs", f"{len(ms)} < {k}")
    if len({module_of(m.path) for m in ms}) != 1:
        return Rejection("different modules")
    for path in {m.path for m in ms}:
        ordered = sorted((m for m in ms if m.path == path), key=lambda m: m.start)
        for a, b in zip(ordered, ordered[1:]):
            if a.end > b.start or a.line == b.line or max(a.line, a.end_line) >= b.line:
                return Rejection("overlapping edits", f"{a.description} / {b.description}")
    checks = Checks(timeouts, rng, sample_others, repo, base, hint, exclude, _stability(stability, baseline))
    return _check(_Trial(ws, runner, baseline, coverage, ms, checks))


def _stability(given: Stability | None, baseline: RunResult) -> Stability:
    # Without the set-up's record only the baseline's own pass is known.
    return given if given is not None else Stability.after_setup(baseline.passing, runs=1)


# -- the checks, in order ----------------------------------------------------------------------------
# Each step reads and fills a ``_Trial`` and returns a Rejection or None; the first Rejection ends
# the validation.  The steps of ``_ON_MUTANT`` run with the mutant written into the shadow.

@dataclass
class _Trial:
    """One validation in progress: its inputs, then what each step found."""

    ws: Workspace
    runner: TestRunner
    baseline: RunResult
    coverage: CoverageMap
    mutations: list[Mutation]
    checks: Checks
    paths: list[str] = field(default_factory=list)  # mutated files, the primary bug's first
    sources: dict[str, str] = field(default_factory=dict)  # path -> clean text
    mutated: dict[str, str] = field(default_factory=dict)  # path -> text with the bugs
    spans: list[range] = field(default_factory=list)  # per mutation: its function's lines
    sample: list[str] = field(default_factory=list)  # sampled tests outside the coverage set
    wanted: list[str] = field(default_factory=list)  # covering tests, then the sample
    first: RunResult | None = None  # the run of ``wanted`` on the mutant
    failing: list[str] = field(default_factory=list)  # sorted tests failing in ``first``
    flaky: list[str] = field(default_factory=list)  # passing tests left out as flaky


def _apply(t: _Trial) -> Rejection | None:
    t.paths = list(dict.fromkeys(m.path for m in t.mutations))  # the primary bug's file first
    t.sources = {path: t.ws.read(path) for path in t.paths}
    t.mutated = dict(t.sources)
    try:
        for m in sorted(t.mutations, key=lambda m: m.start, reverse=True):  # from the end backwards
            t.mutated[m.path] = m.apply(t.mutated[m.path])
    except Exception as exc:  # OperatorError: stale mutation
        return Rejection("does not apply", str(exc))
    if t.mutated == t.sources:
        return Rejection("no-op")
    return None


def _spares_specification(t: _Trial) -> Rejection | None:
    # The tests are the specification (docs/ARCHITECTURE.md, invariant 6): a bug lives in code, never in them.
    spec = Specification.of_workspace(t.ws, [*t.baseline.tests, *t.baseline.collected])
    for path in t.paths:
        why = spec.reason(path, t.sources[path], t.mutated[path])
        if why:
            return Rejection("touches the specification", why)
    return None


def _select_tests(t: _Trial) -> Rejection | None:
    spans_in = {path: function_spans(t.sources[path]) for path in t.paths}
    for m in t.mutations:
        span_info = spans_in[m.path].get(m.function)
        if span_info is not None:
            t.spans.append(range(span_info.def_line, span_info.body.stop))
        else:
            t.spans.append(range(m.line, max(m.line, m.end_line) + 1))
    passing = set(t.baseline.passing)
    covering_set: set[str] = set()
    for m, span in zip(t.mutations, t.spans):
        covering_set |= t.coverage.tests_covering(m.path, span) & passing
    exclude = set(t.checks.exclude) | t.checks.stability.flaky
    if covering_set and covering_set <= exclude:
        return Rejection("only order-dependent tests cover it", sorted(covering_set)[0])
    passing -= exclude
    covering = sorted(covering_set & passing)
    if not covering:
        return Rejection("not covered")
    others = sorted(passing - set(covering))
    t.sample = t.checks.rng.sample(others, min(t.checks.sample_others, len(others)))
    t.wanted = covering + t.sample
    return None


def _run_mutant(t: _Trial) -> Rejection | None:
    # One timeout rejects the mutant: do not wait for every other covering test to hang too.
    t.first = t.runner.run(t.wanted, timeouts=t.checks.timeouts, stop_on_timeout=True)
    if not t.first.cancelled:
        # A pass is a pass, with a bug elsewhere or not: each counts toward ruling out flakiness
        # (a failure here is the bug's, so it marks nothing).
        t.checks.stability.count_passes(t.first)
    if t.first.collect_errors:
        return Rejection("breaks collection", t.first.collect_errors[0].summary)
    return None


def _no_timeout(t: _Trial) -> Rejection | None:
    timed = [n for n, r in t.first.tests.items() if r.outcome == "timeout"]
    return Rejection("timeout", timed[0]) if timed else None


# Memory exhaustion and dead processes depend on the machine's limits, not on the code alone: a
# task must fail the same way wherever it is replayed.
def _no_memory_error(t: _Trial) -> Rejection | None:
    oom = [n for n, r in t.first.tests.items() if "MemoryError" in r.message.split("\n", 1)[0]]
    return Rejection("exhausts memory", oom[0]) if oom else None


def _no_crash(t: _Trial) -> Rejection | None:
    crashed = [n for n, r in t.first.tests.items() if r.outcome == "crashed"]
    return Rejection("crashes the test process", crashed[0]) if crashed else None


def _some_test_fails(t: _Trial) -> Rejection | None:
    t.failing = sorted(n for n in t.first.failing)
    return None if t.failing else Rejection("no test fails")


def _others_pass(t: _Trial) -> Rejection | None:
    broken = set(t.failing) & set(t.sample)
    return Rejection("breaks other tests", sorted(broken)[0]) if broken else None


def _none_missing(t: _Trial) -> Rejection | None:
    missing = [n for n in t.wanted if n not in t.first.tests]
    return Rejection("tests missing", missing[0]) if missing else None


def _fails_again(t: _Trial) -> Rejection | None:
    second = t.runner.run(t.failing, timeouts=t.checks.timeouts)
    if second.collect_errors or sorted(second.failing) != t.failing or any(
            n not in second.tests for n in t.failing):
        return Rejection("flaky", "a second run of the failing tests disagreed")
    return None


def _clean_passes_alone(t: _Trial) -> Rejection | None:
    # The clean code must pass the failing tests on their own, in reverse order.  A test that
    # passed at baseline only because an earlier test left state behind (order-dependent) fails
    # here, and as a FAIL_TO_PASS it would fail even after the true fix.
    clean = t.runner.run(t.failing, timeouts=t.checks.timeouts, reverse=True)
    if not clean.cancelled:
        t.checks.stability.count_passes(clean)
    dependent = [n for n in t.failing if n not in clean.tests or not clean.tests[n].passed]
    if clean.collect_errors or dependent:
        return Rejection("order-dependent test", (dependent or t.failing)[0])
    return None


_ON_CLEAN = (_apply, _spares_specification, _select_tests)
_ON_MUTANT = (_run_mutant, _no_timeout, _no_memory_error, _no_crash, _some_test_fails, _others_pass,
              _none_missing, _fails_again)
def _stable(t: _Trial) -> Rejection | None:
    # The clean code runs every test the task would name until each passed enough runs to
    # rule out flakiness (``flaky``): a flaky FAIL_TO_PASS refuses the task, a flaky passing
    # test is left out of PASS_TO_PASS.
    stability = t.checks.stability
    passing = [n for n in t.wanted if n not in t.failing and t.first.tests[n].passed]
    flaky = stability.prove(t.runner, [*t.failing, *passing], t.checks.timeouts)
    if flaky is None:
        return Rejection("flaky", "a run of the clean code did not finish or collect")
    t.flaky = sorted(flaky - set(t.failing))
    bad = sorted(flaky & set(t.failing))
    if bad:
        return Rejection("flaky", f"{bad[0]} fails on the clean code now and then", tuple(sorted(flaky)))
    return None


_AFTER = (_clean_passes_alone, _stable)


def _first_rejection(t: _Trial, steps) -> Rejection | None:
    for step in steps:
        why = step(t)
        if why is not None:  # not ``if why``: a Rejection is falsy
            return why
    return None


def _check(t: _Trial) -> Task | Rejection:
    why = _first_rejection(t, _ON_CLEAN)
    if why is not None:
        return why
    with t.ws.edited(t.mutated):
        why = _first_rejection(t, _ON_MUTANT)
    if why is not None:
        return why
    why = _first_rejection(t, _AFTER)
    if why is not None:
        return why
    return _task(t)


def _features(t: _Trial) -> tuple[int, bool]:
    """(distance, traceback through a bug line) over the failing tests (module docstring)."""
    test_sources: dict[str, str | None] = {}
    distances, through = [], False
    for n in t.failing:
        tf = nodeid_file(n)
        if tf not in test_sources:
            try:
                test_sources[tf] = t.ws.read(tf)
            except OSError:
                test_sources[tf] = None
        for m, span in zip(t.mutations, t.spans):
            d, thru = _distance(t.first.tests[n], m, span, test_sources[tf])
            distances.append(d)
            through = through or thru
    return min(distances), through


def _task(t: _Trial) -> Task:
    mutations, checks, failing = t.mutations, t.checks, t.failing
    p2p = sorted(n for n in t.wanted if n not in failing and t.first.tests[n].passed and n not in t.flaky)
    distance, through = _features(t)
    base = checks.base if checks.base is not None else base_commit(t.ws.root, t.ws.python_files())
    patch = "".join(unified_diff(path, t.sources[path], t.mutated[path]) for path in sorted(t.paths))
    bugs = [{"bug_function": m.function, "bug_path": m.path, "bug_line": m.line,
             "description": m.description} for m in mutations]
    extra = dict(bugs[0])
    if len(mutations) > 1:
        extra["bugs"] = bugs
    if t.flaky:
        extra["flaky_dropped"] = t.flaky  # found flaky by this validation, left out of PASS_TO_PASS
    return Task(
        repo=checks.repo or str(t.ws.root), base_commit=base[0], base_kind=base[1], patch=patch,
        FAIL_TO_PASS=failing, PASS_TO_PASS=p2p,
        family=family_key(mutations[0], distance, checks.hint, len(mutations)),
        operators=[m.operator for m in mutations], n_bugs=len(mutations), distance=distance,
        file_lines=sum(len(t.sources[path].splitlines()) for path in t.paths), traceback_through_bug=through,
        hint=hint_text(mutations, checks.hint, tests=failing),
        extra=extra,
    )
