"""One repository's validation job, and validating a candidate with it (docs/ARCHITECTURE.md §5).

``SynthJob`` carries what validating a candidate needs besides a workspace and a runner; it is
built once per repository by ``synth`` and sent (pickled) to every worker of ``executor``, so it
holds plain data only: the coverage travels as ``CoverageMap.by_test``.  ``validate_one`` is the
one way a candidate is validated, in this process or in any worker, so a candidate's result does
not depend on where it ran.  This module imports neither ``synth`` nor ``executor``: both
import it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from ..operators import Mutation
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .flaky import SETUP_RUNS, Stability
from .store import Task
from .validate import Rejection, combine, validate

__all__ = ["SynthJob", "combine_one", "validate_one"]


@dataclass(frozen=True)
class SynthJob:
    """What a validation needs besides the workspace and runner (picklable, for workers)."""

    repo: str  # the resolved repository path written into each Task
    base: tuple[str, str]  # (commit, kind) from ``validate.base_commit``
    baseline: RunResult  # the green baseline run, with function-level coverage
    coverage: dict  # ``CoverageMap.by_test`` of the baseline
    timeouts: dict[str, float]  # per-test limits (``validate.baseline_timeouts``)
    seed: int  # with a candidate's position, seeds its RNG
    sample_others: int = 10  # other baseline-passing tests run with each candidate
    hint: str = "function"  # hint level written into the tasks
    excluded: frozenset = frozenset()  # order-dependent tests: never run, never in a task
    # Clean-code runs each test passed at set-up when more than the baseline and the reversed
    # run (``flaky.rerun_while``), and the tests found flaky there.
    setup_passes: dict = field(default_factory=dict)
    flaky: frozenset = frozenset()

    def rng(self, *key: object) -> random.Random:
        """The RNG for one candidate (``key``: its position, and more for a combination)."""
        # Seeded by seed and position, so the tests sampled for a candidate do not depend on
        # which worker validates it or in what order: --workers never changes the tasks.
        return random.Random(":".join(str(k) for k in (self.seed, *key)))

    def stability(self) -> Stability:
        """A process's record of proven and flaky tests, starting from the set-up: every test a
        candidate may use passed the baseline and the reversed run, some more runs after them."""
        usable = [n for n in self.baseline.passing if n not in self.excluded]
        return Stability(passes={n: self.setup_passes.get(n, SETUP_RUNS) for n in usable},
                         flaky=set(self.flaky))


def validate_one(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob, index: int,
                 m: Mutation, stability: Stability | None = None) -> tuple[Task | Rejection, float]:
    """(``validate``'s Task or Rejection, seconds) for the candidate at position ``index``;
    ``stability``: the calling process's (``SynthJob.stability``), kept across candidates."""
    t0 = time.monotonic()
    result = validate(ws, runner, job.baseline, coverage, m, timeouts=job.timeouts, rng=job.rng(index),
                      sample_others=job.sample_others, repo=job.repo, base=job.base, hint=job.hint,
                      exclude=job.excluded, stability=stability if stability is not None else job.stability())
    return result, time.monotonic() - t0


def combine_one(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob, index: int,
                j: int, mutations: list[Mutation],
                stability: Stability | None = None) -> tuple[Task | Rejection, float]:
    """(``combine``'s Task or Rejection, seconds) for the ``j``-th combination of all of
    ``mutations``, the first being the candidate at position ``index``."""
    t0 = time.monotonic()
    result = combine(ws, runner, job.baseline, coverage, mutations, k=len(mutations),
                     timeouts=job.timeouts, rng=job.rng(index, f"c{j}"),
                     sample_others=job.sample_others, repo=job.repo, base=job.base, hint=job.hint,
                     exclude=job.excluded, stability=stability if stability is not None else job.stability())
    return result, time.monotonic() - t0
