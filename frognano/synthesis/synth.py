"""Synthesise validated bug tasks from green repositories (DESIGN §5).

Per repository: sync the shadow, run the whole suite once with coverage (the baseline; a repo
whose suite is not green is refused with a UsageError), list candidate bugs in covered code,
shuffle them by ``seed``, and validate them one by one until the repo holds ``n`` tasks in the
output store or the candidates run out.  Tasks already in the store for that repo count toward
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
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..operators import CATALOGUE
from ..sandbox.results import RunResult
from ..sandbox.runner import RunnerConfig, TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .executor import LocalPool, RayPool, ray_cluster
from .inject import candidate_bugs
from .store import Task, TaskStore, patch_hash, read_tasks
from .frontier import HINTS
from .validate import Rejection, base_commit, baseline_timeouts, combine, unified_diff, validate

__all__ = ["FamilyStats", "SynthSummary", "synthesize"]


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
    seconds: float = 0.0

    @property
    def skips(self) -> Counter:
        total: Counter = Counter()
        for s in self.families.values():
            total.update(s.skips)
        return total


Progress = Callable[[str, int, int], None]  # (repo, tasks held, n)


def _baseline(ws: Workspace, runner: TestRunner, repo: Path):
    run = runner.run(None, coverage=True)
    if run.collect_errors:
        raise UsageError(f"{repo}: the test suite does not collect at baseline "
                         f"({run.collect_errors[0].summary}); synthesis needs a green suite")
    if run.failing:
        raise UsageError(f"{repo}: {len(run.failing)} test(s) fail at baseline (e.g. {run.failing[0]}); "
                         f"synthesis needs a green suite")
    if not run.passing:
        raise UsageError(f"{repo}: no passing tests at baseline; synthesis needs a green suite")
    return run


def _fam(m) -> str:
    return CATALOGUE[m.operator].family if m.operator in CATALOGUE else m.operator


@dataclass
class _Job:
    """What a validation needs besides the workspace and runner (picklable, for workers)."""

    repo: str
    base: tuple[str, str]
    baseline: RunResult
    coverage: dict
    timeouts: dict[str, float]
    seed: int
    sample_others: int
    hint: str = "function"


def _validate_one(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: _Job, index: int,
                  m) -> tuple[Task | Rejection, float]:
    # One RNG per candidate (seeded by seed and position), so the tests sampled for a candidate
    # do not depend on which worker validates it or in what order: --workers never changes tasks.
    rng = random.Random(f"{job.seed}:{index}")
    t0 = time.monotonic()
    result = validate(ws, runner, job.baseline, coverage, m, timeouts=job.timeouts, rng=rng,
                      sample_others=job.sample_others, repo=job.repo, base=job.base, hint=job.hint)
    return result, time.monotonic() - t0


def _combos(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: _Job, todo: list,
            bugs: int, n: int, have: int, store: TaskStore, summary: SynthSummary,
            progress: Progress | None) -> int:
    """Validate singles in candidate order (in this process); combine each new valid one with
    ``bugs - 1`` earlier valid ones of the same file until the repo holds ``n`` combinations.
    Combination statistics are kept under ``b{bugs}:{family}``. Returns the count held."""
    from itertools import combinations

    valid: dict[str, list] = defaultdict(list)  # path -> validated single mutations
    for i, m in todo:
        stats = summary.families[_fam(m)]
        stats.tried += 1
        result, seconds = _validate_one(ws, runner, coverage, job, i, m)
        stats.seconds += seconds
        if isinstance(result, Rejection):
            stats.skips[result.reason] += 1
            continue
        stats.valid += 1
        earlier = list(valid[m.path])
        valid[m.path].append(m)
        for j, group in enumerate(combinations(earlier, bugs - 1)):
            cstats = summary.families[f"b{bugs}:{_fam(m)}"]
            cstats.tried += 1
            t0 = time.monotonic()
            combo = combine(ws, runner, job.baseline, coverage, [m, *group], k=bugs,
                            timeouts=job.timeouts, rng=random.Random(f"{job.seed}:{i}:c{j}"),
                            sample_others=job.sample_others, repo=job.repo, base=job.base,
                            hint=job.hint)
            cstats.seconds += time.monotonic() - t0
            if isinstance(combo, Rejection):
                cstats.skips[combo.reason] += 1
            elif store.append(combo):
                cstats.valid += 1
                have += 1
                summary.written += 1
                if progress:
                    progress(job.repo, have, n)
            else:
                cstats.skips["duplicate"] += 1
            if have >= n:
                return have
    return have


def synthesize(repos: list[Path], out: Path, *, n: int, seed: int = 0, workers: int = 1,
               progress: Progress | None = None, config: RunnerConfig | None = None,
               operators: list[str] | None = None, sample_others: int = 10,
               hint: str = "function", bugs: int = 1, ray: str | None = None) -> SynthSummary:
    """``hint`` is the hint level written into the tasks (and their family key); ``bugs`` > 1
    makes tasks of that many bugs at once: single bugs are validated as usual (not written) and
    each new valid one is combined with earlier valid ones in the same file (``combine``); only
    the combinations count toward ``n`` (then validation runs in this process, ``workers`` is
    not used).  ``ray`` ("local", "auto" or an address) validates on ``workers`` Ray actors."""
    if hint not in HINTS:
        raise UsageError(f"--hint must be one of {', '.join(HINTS)}, got {hint!r}")
    if bugs < 1:
        raise UsageError(f"--bugs must be at least 1, got {bugs}")
    if n < 1:
        raise UsageError(f"-n must be at least 1, got {n}")
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    started = time.monotonic()
    summary = SynthSummary()
    config = config or RunnerConfig()
    cluster = ray_cluster(ray, num_cpus=max(2, workers)) if ray is not None else nullcontext()
    with cluster, TaskStore(out) as store:
        for repo_path in repos:
            repo_path = Path(repo_path)
            if not repo_path.is_dir():
                raise UsageError(f"{repo_path}: not a directory")
            repo = str(repo_path.resolve())
            held = [t for t in read_tasks(store.path) if t.repo == repo and t.n_bugs == bugs]
            have = len(held)
            summary.existing += have
            stored = {patch_hash(t.patch) for t in held}
            if progress:
                progress(repo, have, n)
            if have >= n:
                summary.per_repo[repo] = have
                continue
            with Workspace(repo_path) as ws:
                ws.sync()
                with TestRunner(ws, config) as runner:
                    baseline = _baseline(ws, runner, repo_path)
                    coverage = CoverageMap.from_run(baseline)
                    timeouts = baseline_timeouts(baseline, config.timeout)
                    base = base_commit(ws.root, ws.python_files())
                    todo = []
                    found = candidate_bugs(ws, coverage, operators=operators, rng=random.Random(seed))
                    # Diffing every candidate costs ~100 s on a library with 15k sites: only do it
                    # when there are stored tasks to recognise (a resumed run).
                    check = bugs == 1 and bool(stored)
                    for i, m in enumerate(found):  # i: position in the full list, stable on resume
                        if check and patch_hash(unified_diff(m.path, ws.read(m.path), m.apply(ws.read(m.path)))) in stored:
                            summary.families[_fam(m)].skips["already stored"] += 1
                        else:
                            todo.append((i, m))
                    job = _Job(repo, base, baseline, coverage.by_test, timeouts, seed, sample_others, hint)
                    if bugs > 1:
                        have = _combos(ws, runner, coverage, job, todo, bugs, n, have, store,
                                       summary, progress)
                        summary.per_repo[repo] = have
                        continue
                    pool = None
                    if ray is not None and todo:
                        pool = RayPool(repo, config, job, workers)
                    elif workers > 1 and len(todo) > 1:
                        pool = LocalPool(repo, config, job, workers)
                    if pool is not None:
                        results = pool.map(todo)
                    else:
                        results = (_validate_one(ws, runner, coverage, job, i, m) for i, m in todo)
                    try:
                        for (_, m), (result, seconds) in zip(todo, results):
                            stats = summary.families[_fam(m)]
                            stats.tried += 1
                            stats.seconds += seconds
                            if isinstance(result, Rejection):
                                stats.skips[result.reason] += 1
                            elif store.append(result):
                                stats.valid += 1
                                have += 1
                                summary.written += 1
                                if progress:
                                    progress(repo, have, n)
                            else:
                                stats.skips["duplicate"] += 1
                            if have >= n:
                                break
                    finally:
                        close = getattr(results, "close", None)
                        if close is not None:
                            close()
                        if pool is not None:
                            pool.close()
            summary.per_repo[repo] = have
    summary.families = dict(summary.families)
    summary.seconds = time.monotonic() - started
    return summary
