"""One repository's validation job, and validating a candidate with it (DESIGN §5).

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
from dataclasses import dataclass

from ..operators import Mutation
from ..sandbox.results import RunResult
from ..sandbox.runner import TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
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

    def rng(self, *key: object) -> random.Random:
        """The RNG for one candidate (``key``: its position, and more for a combination)."""
        # Seeded by seed and position, so the tests sampled for a candidate do not depend on
        # which worker validates it or in what order: --workers never changes the tasks.
        return random.Random(":".join(str(k) for k in (self.seed, *key)))


def validate_one(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob, index: int,
                 m: Mutation) -> tuple[Task | Rejection, float]:
    """(``validate``'s Task or Rejection, seconds) for the candidate at position ``index``."""
    t0 = time.monotonic()
    result = validate(ws, runner, job.baseline, coverage, m, timeouts=job.timeouts, rng=job.rng(index),
                      sample_others=job.sample_others, repo=job.repo, base=job.base, hint=job.hint,
                      exclude=job.excluded)
    return result, time.monotonic() - t0


def combine_one(ws: Workspace, runner: TestRunner, coverage: CoverageMap, job: SynthJob, index: int,
                j: int, mutations: list[Mutation]) -> tuple[Task | Rejection, float]:
    """(``combine``'s Task or Rejection, seconds) for the ``j``-th combination of all of
    ``mutations``, the first being the candidate at position ``index``."""
    t0 = time.monotonic()
    result = combine(ws, runner, job.baseline, coverage, mutations, k=len(mutations),
                     timeouts=job.timeouts, rng=job.rng(index, f"c{j}"),
                     sample_others=job.sample_others, repo=job.repo, base=job.base, hint=job.hint,
                     exclude=job.excluded)
    return result, time.monotonic() - t0
