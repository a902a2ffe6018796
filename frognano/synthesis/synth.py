"""Synthesise validated bug tasks from green repositories (docs/ARCHITECTURE.md §5).

Per repository: sync the shadow, run the whole suite once with function-level coverage (the
baseline; a repo whose suite is not green before any mutation is refused: recorded in the
summary, and a UsageError when every repo is refused), run it again in reverse order (tests that
then fail depend on their order and are never used), stream the candidate bugs in covered code
(``CandidateStream``, ordered by ``seed``, listed lazily), and validate them one by one until
the repo holds ``n`` tasks in the output store or the candidates run out.  Each process keeps a
``flaky.Stability`` across its candidates: a task's tests must pass enough runs of the clean
code to rule out a 40%-flaky test with 99% probability, and the tests found flaky are listed
per repo in ``SynthSummary.flaky`` (and per task in its ``flaky_dropped``).  Tasks already in the store for that repo count toward
``n``, so re-running the same command resumes; a candidate whose patch is already stored is
skipped without running tests.  Statistics are kept per operator family
(``CATALOGUE[op].family``): the full family key (hint, distance) is only known once a bug is valid.

``workers`` > 1 validates candidates in a local process pool (spawn): each worker opens its own
Workspace shadow slot and TestRunner and receives the baseline and coverage from the parent,
which still makes every decision in candidate order and is the only writer of the store.  Each
candidate's RNG is derived from (seed, position), so the tasks do not depend on ``workers``;
workers may validate a few candidates past the n-th task (wasted, never written).

``ray`` (``"local"``, ``"auto"`` or a cluster address) validates on ``workers`` Ray actors instead,
through the same executor interface as the local pool (``executor.py``): same tasks for a seed.

``cancel`` (an event, e.g. set by training's background pool when the run ends) stops a
synthesis between candidates and kills the test run in flight; ``synthesize`` then raises
``Cancelled``.  The tasks written before stay in the store (re-running resumes), and nothing
measured by a killed run is recorded: no task, no baseline picture.

Progress goes through the shared protocol (``frognano.progress``): one phase per repository
(``tasks from NAME``, its total ``n``), updated with the tasks it holds and the latest family.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import FrogNanoError, UsageError
from ..operators import CATALOGUE
from ..progress import Progress, Silent
from ..sandbox.results import RunResult
from ..sandbox.runner import RunnerConfig, TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .executor import ray_cluster, validation_pool
from .flaky import SETUP_RUNS, Stability, rerun_while, runs_needed
from .inject import CandidateStream, pre_parse
from .store import Task, TaskStore, patch_hash, read_tasks
from .frontier import HINTS
from .job import SynthJob, combine_one, validate_one
from .validate import Rejection, base_commit, baseline_timeouts, module_of, unified_diff

__all__ = ["Cancelled", "FamilyStats", "SynthSummary", "synthesize"]

log = logging.getLogger(__name__)


@dataclass
class FamilyStats:
    tried: int = 0
    valid: int = 0
    seconds: float = 0.0
    skips: Counter = field(default_factory=Counter)

    @property
    def yield_(self) -> float:
        return self.valid / self.tried if self.tried else 0.0


@dataclass
class SynthSummary:
    families: dict[str, FamilyStats] = field(default_factory=lambda: defaultdict(FamilyStats))
    written: int = 0  # new tasks appended
    existing: int = 0  # tasks already in the store for these repos
    per_repo: dict[str, int] = field(default_factory=dict)  # tasks held per repo after the run
    refused: dict[str, str] = field(default_factory=dict)  # repo -> why it was not used
    passed_over: dict[str, Counter] = field(default_factory=dict)  # repo -> skipped files/functions
    order_dependent: dict[str, list[str]] = field(default_factory=dict)  # repo -> tests not used
    # repo -> tests found flaky on the clean code (``flaky.py``): dropped from PASS_TO_PASS, a
    # task whose FAIL_TO_PASS held one refused, never used after
    flaky: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def skips(self) -> Counter:
        total: Counter = Counter()
        for s in self.families.values():
            total.update(s.skips)
        return total


class _Refused(Exception):
    """A repository that cannot be used (its suite is not green before any mutation)."""


class Cancelled(FrogNanoError):
    """``synthesize`` stopped because its ``cancel`` event was set."""


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled("synthesis cancelled")


def _baseline(ws: Workspace, runner: TestRunner, repo: Path):
    # Line coverage, not the function-level kind that is all synthesis itself needs: on
    # more-itertools the two cost the same (16 s for 664 tests, measured), and the line-level
    # run is stored for the clean tree (``sandbox/pictures.py``), where evaluating these tasks
    # later starts from it instead of running the suite again.
    run = runner.run(None, coverage=True)
    if run.cancelled:  # a partial run is no baseline (and must not be saved as the clean tree's)
        raise Cancelled("synthesis cancelled")
    if run.collect_errors:
        raise _Refused(f"the test suite does not collect ({run.collect_errors[0].summary})")
    timed = [n for n, t in run.tests.items() if t.outcome == "timeout"]
    if timed:
        raise _Refused(f"{len(timed)} test(s) hang before any mutation (e.g. {timed[0]})")
    if run.failing:
        raise _Refused(f"{len(run.failing)} test(s) fail before any mutation (e.g. {run.failing[0]})")
    if not run.passing:
        raise _Refused("no passing tests")
    from ..sandbox.pictures import Pictures, state_key

    Pictures(ws).save(state_key(ws, runner.config), run)
    return run


def _order_dependent(runner: TestRunner, baseline: RunResult) -> set[str]:
    """Tests that passed in the baseline's order but not in reverse order.

    Validation runs subsets of the suite, and a task's tests are replayed in whatever order the
    harness likes: a test that passes only after some other test (shared state, a cache, a
    fixture's side effect) would give tasks that fail for reasons unrelated to the bug."""
    reverse = runner.run(None, reverse=True)
    return {n for n in baseline.passing if n not in reverse.tests or not reverse.tests[n].passed}


def _spare_cores() -> int:
    # The reruns are free only on a core of their own: the coverage baseline has one, and on
    # a shared two-core machine reruns beside it doubled its time (more-itertools, 19 -> 39 s).
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _setup_runs(repo_path: Path, ws: Workspace, runner: TestRunner, config: RunnerConfig):
    """(baseline, order-dependent tests, pre-parsed sources, reruns) for one repository.

    The coverage baseline (``runner``) and the reversed run (a second shadow slot and runner)
    go on at the same time, and the second thread then parses source files with libcst for
    the candidate stream, then runs the suite again (``flaky.rerun_while``: passes toward
    ruling out flaky tests; only with a third core), until the baseline is done: on two cores
    the whole set-up takes about as long as the coverage run alone.  Without a free second
    slot the runs go one after the other, and there are no reruns."""
    from concurrent.futures import ThreadPoolExecutor

    done, refused = threading.Event(), threading.Event()
    parsed: dict = {}
    # The reruns' passes only (the baseline's and the reversed run's come on top).
    reruns = Stability(needed=runs_needed() - SETUP_RUNS)

    def reverse_then_parse() -> set[str] | None:
        try:
            with Workspace(repo_path) as other:
                other.sync()
                with TestRunner(other, config) as second:
                    reverse = second.run(None, reverse=True, cancel=refused)
                    passed = sorted(n for n, t in reverse.tests.items() if t.passed)
                    pre_parse(ws, parsed, done)
                    if not refused.is_set() and _spare_cores() > 2:
                        rerun_while(second, passed, done, reruns)
        except UsageError:  # no free shadow slot
            pre_parse(ws, parsed, done)
            return None
        return set(passed)

    with ThreadPoolExecutor(1, thread_name_prefix="frognano-reverse") as pool:
        future = pool.submit(reverse_then_parse)
        try:
            baseline = _baseline(ws, runner, repo_path)
        except (_Refused, Cancelled):
            refused.set()  # stop the reversed run: its result is not needed
            raise
        finally:
            done.set()
        passed_reversed = future.result()
    if passed_reversed is None:
        return baseline, _order_dependent(runner, baseline), parsed, reruns
    return baseline, set(baseline.passing) - passed_reversed, parsed, reruns


def _fam(m) -> str:
    return CATALOGUE[m.operator].family if m.operator in CATALOGUE else m.operator


def _combos(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob, todo: list,
            bugs: int, n: int, have: int, store: TaskStore, summary: SynthSummary,
            progress: Progress) -> int:
    """Validate singles in candidate order (in this process); combine each new valid one with
    ``bugs - 1`` earlier valid ones of the same module (file or package directory,
    ``validate.module_of``) until the repo holds ``n`` combinations.
    Combination statistics are kept under ``b{bugs}:{family}``. Returns the count held."""
    from itertools import combinations

    valid: dict[str, list] = defaultdict(list)  # module -> validated single mutations
    stability = job.stability()
    for i, m in todo:
        stats = summary.families[_fam(m)]
        stats.tried += 1
        result, seconds = validate_one(ws, runner, coverage, job, i, m, stability)
        _check(runner.cancel)  # a verdict from a killed run is no verdict
        _note_flaky(summary, job.repo, result)
        stats.seconds += seconds
        if isinstance(result, Rejection):
            stats.skips[result.reason] += 1
            continue
        stats.valid += 1
        earlier = list(valid[module_of(m.path)])
        valid[module_of(m.path)].append(m)
        for j, group in enumerate(combinations(earlier, bugs - 1)):
            cstats = summary.families[f"b{bugs}:{_fam(m)}"]
            cstats.tried += 1
            combo, seconds = combine_one(ws, runner, coverage, job, i, j, [m, *group], stability)
            _check(runner.cancel)
            _note_flaky(summary, job.repo, combo)
            cstats.seconds += seconds
            have = _record(cstats, combo, store, summary, progress, have, n)
            if have >= n:
                return have
    return have


@dataclass(frozen=True)
class _Plan:
    """``synthesize``'s settings, checked (see its docstring and the CLI's help)."""

    n: int  # tasks wanted per repository
    seed: int = 0  # orders the candidates and seeds each candidate's RNG
    workers: int = 1  # validation processes (or Ray actors)
    config: RunnerConfig = field(default_factory=RunnerConfig)  # with --assert=plain added
    operators: list[str] | None = None  # operators to inject with; None: all
    sample_others: int = 10  # other baseline-passing tests run with each candidate
    hint: str = "function"  # hint level written into the tasks
    bugs: int = 1  # bugs per task
    ray: str | None = None  # "local", "auto" or an address: validate on Ray actors
    cancel: threading.Event | None = None  # set: stop (module docstring)

    def __post_init__(self) -> None:
        if self.hint not in HINTS:
            raise UsageError(f"--hint must be one of {', '.join(HINTS)}, got {self.hint!r}")
        if self.bugs < 1:
            raise UsageError(f"--bugs must be at least 1, got {self.bugs}")
        if self.n < 1:
            raise UsageError(f"-n must be at least 1, got {self.n}")
        if self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")


def synthesize(repos: list[Path], out: Path, *, n: int, seed: int = 0, workers: int = 1,
               progress: Progress | None = None, config: RunnerConfig | None = None,
               operators: list[str] | None = None, sample_others: int = 10,
               hint: str = "function", bugs: int = 1, ray: str | None = None,
               cancel: threading.Event | None = None) -> SynthSummary:
    """``hint`` is the hint level written into the tasks (and their family key); ``bugs`` > 1
    makes tasks of that many bugs at once: single bugs are validated as usual (not written) and
    each new valid one is combined with earlier valid ones in the same file (``combine``); only
    the combinations count toward ``n`` (then validation runs in this process, ``workers`` is
    not used).  ``ray`` ("local", "auto" or an address) validates on ``workers`` Ray actors.
    ``cancel``: once set, raises ``Cancelled`` soon (module docstring)."""
    config = config or RunnerConfig()
    # Validation needs outcomes, not pytest's rewritten assertion messages: without rewriting,
    # each run skips re-parsing and rewriting the test modules it imports (the shadow keeps no
    # bytecode), ~0.2 s a run on a 5,000-line test module.
    plan = _Plan(n, seed, workers, replace(config, test_args=[*config.test_args, "--assert=plain"]),
                 operators, sample_others, hint, bugs, ray, cancel)
    started = time.monotonic()
    summary = SynthSummary()
    cluster = ray_cluster(ray, num_cpus=max(2, workers)) if ray is not None else nullcontext()
    with cluster, TaskStore(out) as store:
        for repo_path in repos:
            _check(cancel)
            repo_path = Path(repo_path)
            if not repo_path.is_dir():
                raise UsageError(f"{repo_path}: not a directory")
            repo = str(repo_path.resolve())
            summary.per_repo[repo] = _synth_repo(plan, repo_path, repo, store, summary,
                                                 progress or Silent())
    _check(cancel)  # after a cancel nothing counts as finished
    summary.families = dict(summary.families)
    summary.seconds = time.monotonic() - started
    if summary.refused and len(summary.refused) == len(repos):
        raise UsageError("; ".join(f"{r}: {why}" for r, why in summary.refused.items()))
    return summary


def _synth_repo(plan: _Plan, repo_path: Path, repo: str, store: TaskStore, summary: SynthSummary,
                progress: Progress) -> int:
    """Bring one repository up to ``plan.n`` tasks in ``store``; returns the tasks it holds."""
    held = [t for t in read_tasks(store.path) if t.repo == repo and t.n_bugs == plan.bugs]
    have = len(held)
    summary.existing += have
    stored = {patch_hash(t.patch) for t in held}
    progress.phase(f"tasks from {Path(repo).name}", plan.n)
    progress.update(min(have, plan.n), plan.n)
    if have >= plan.n:
        return have
    with Workspace(repo_path) as ws:
        ws.sync()
        with TestRunner(ws, plan.config) as runner:
            runner.cancel = plan.cancel  # kills the run in flight when set
            try:
                job, coverage, todo = _prepare(plan, repo_path, repo, ws, runner, stored, summary)
            except _Refused as exc:
                summary.refused[repo] = f"{exc}; synthesis needs a green suite"
                log.info("%s: refused: %s", repo, summary.refused[repo])
                return have
            if plan.bugs > 1:
                return _combos(ws, runner, coverage, job, todo, plan.bugs, plan.n, have, store,
                               summary, progress)
            return _singles(plan, ws, runner, coverage, job, todo, have, store, summary, progress)


def _prepare(plan: _Plan, repo_path: Path, repo: str, ws: Workspace, runner: TestRunner,
             stored: set[str], summary: SynthSummary):
    """(job, coverage, candidates not stored yet) for one repository; raises ``_Refused``."""
    baseline, excluded, parsed, reruns = _setup_runs(repo_path, ws, runner, plan.config)
    flaky = frozenset(reruns.flaky & set(baseline.passing)) - excluded
    if flaky:
        summary.flaky[repo] = sorted(flaky)
        log.info("%s: %d test(s) fail now and then on the clean code, not used: %s", repo,
                 len(flaky), ", ".join(sorted(flaky)[:5]))
    if excluded:
        summary.order_dependent[repo] = sorted(excluded)
        log.info("%s: %d test(s) depend on their order, not used: %s", repo,
                 len(excluded), ", ".join(sorted(excluded)[:5]))
    coverage = CoverageMap.from_run(baseline)
    timeouts = baseline_timeouts(baseline, plan.config.timeout)
    base = base_commit(ws.root, ws.python_files())
    stream = CandidateStream(ws, coverage, operators=plan.operators, seed=plan.seed, parsed=parsed)
    summary.passed_over[repo] = stream.skips
    todo = _unstored(ws, stream, stored if plan.bugs == 1 else set(), summary, plan.cancel)
    job = SynthJob(repo, base, baseline, coverage.by_test, timeouts, plan.seed, plan.sample_others,
                   plan.hint, frozenset(excluded),
                   {n: SETUP_RUNS + k for n, k in reruns.passes.items()}, flaky)
    return job, coverage, todo


def _singles(plan: _Plan, ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob,
             todo, have: int, store: TaskStore, summary: SynthSummary,
             progress: Progress) -> int:
    """Validate single bugs (here, in a local pool or on Ray) and record them in candidate
    order until the repo holds ``plan.n`` tasks; returns the count held."""
    pool = None
    if plan.ray is not None or plan.workers > 1:
        pool = validation_pool(job.repo, plan.config, job, plan.workers, plan.ray)
    if pool is not None:
        results = pool.map(todo)
    else:
        stability = job.stability()
        results = (((i, m), validate_one(ws, runner, coverage, job, i, m, stability)) for i, m in todo)
    try:
        for (_, m), (result, seconds) in results:
            _check(plan.cancel)  # before recording: a verdict from a killed run is no verdict
            stats = summary.families[_fam(m)]
            stats.tried += 1
            stats.seconds += seconds
            _note_flaky(summary, job.repo, result)
            have = _record(stats, result, store, summary, progress, have, plan.n)
            if have >= plan.n:
                break
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()
        if pool is not None:
            pool.close()
    return have


def _note_flaky(summary: SynthSummary, repo: str, result: Task | Rejection) -> None:
    """Add the tests a validation found flaky (wherever it ran) to the run's statistics."""
    found = result.flaky if isinstance(result, Rejection) else result.extra.get("flaky_dropped", [])
    if found:
        summary.flaky[repo] = sorted(set(summary.flaky.get(repo, [])) | set(found))
        log.info("%s: %s fail(s) now and then on the clean code: never in a task", repo, ", ".join(found))


def _record(stats: FamilyStats, result: Task | Rejection, store: TaskStore, summary: SynthSummary,
            progress: Progress, have: int, n: int) -> int:
    """Count one validated candidate under ``stats``; a new Task goes to the store.  Returns
    the tasks the repo now holds."""
    if isinstance(result, Rejection):
        stats.skips[result.reason] += 1
    elif store.append(result):
        stats.valid += 1
        have += 1
        summary.written += 1
        progress.update(min(have, n), n, result.family)
    else:
        stats.skips["duplicate"] += 1
    return have


def _unstored(ws: Workspace, stream: CandidateStream, stored: set[str], summary: SynthSummary,
              cancel: threading.Event | None = None):
    """``(position, mutation)`` for each candidate of ``stream`` whose patch is not stored yet.

    The position counts every candidate (stable when resuming); the diff is computed only when
    there are stored tasks to recognise, and only for candidates actually drawn."""
    for i, m in enumerate(stream):
        _check(cancel)
        if stored and patch_hash(unified_diff(m.path, ws.read(m.path), m.apply(ws.read(m.path)))) in stored:
            summary.families[_fam(m)].skips["already stored"] += 1
            continue
        yield i, m
