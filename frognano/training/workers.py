"""Where a training step's groups of rollouts run: in this process, shared out over the ranks of
a launch on several processes, or on rollout workers (processes or Ray actors).

Whichever it is, ``Rollouts.groups`` returns the groups in the order they were requested, each
exactly what this process would have rolled out (an episode depends on its task, seed and the
policy's weights, not on where it runs), so the loop's numbers do not depend on the choice.

* here (the default): ``rollout.rollout_group`` on the learner's own policy;
* a launch on several processes (``distributed.py``): request i runs on rank i % world, and the
  groups are gathered, so every rank has all of them;
* ``workers`` > 1 or ``ray``: each request runs on a ``RolloutWorker``, through the pools
  ``synth`` validates on (``synthesis.executor``).  A worker has its own copy of the policy and
  its own environments; each request names the checkpoint whose adapter the rollouts must use
  (the learner's weights after the previous step), and the worker loads it when it has another
  one, so every rollout of a step is on-policy.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ..progress import Progress
from .config import TrainConfig
from .rollout import Environments, rollout_group
from .tasks import EvalTask

__all__ = ["RolloutWorker", "Rollouts"]


class RolloutWorker:
    """A rollout worker in another process or on a Ray actor (``synthesis.executor.Worker``)."""

    def __init__(self, config: dict, run: str) -> None:
        from .backends import make_learner

        self.config = TrainConfig.from_dict(config)
        self.run_dir = Path(run)
        self.learner = make_learner(self.config, self.run_dir)
        self.policy = self.learner.policy
        self.envs = Environments(self.config, self.policy)
        self.loaded = ""

    def run(self, item: tuple[str, EvalTask, int, list[int]]):
        folder, task, index, seeds = item
        if folder != self.loaded:
            self.learner.load_adapter(Path(folder))
            self.loaded = folder
        return rollout_group(self.envs, task, index, self.config, seeds)

    def close(self) -> None:
        self.envs.close()


class Rollouts:
    """Where a step's groups run: here, on the ranks of a launch, or on ``workers`` processes /
    Ray actors (module docstring)."""

    def __init__(self, config: TrainConfig, run: Path, envs: Environments) -> None:
        self.envs = envs
        self.config = config
        self.progress: Progress | None = None  # the groups of a step as they finish (in this process)
        self.pool = None
        self._stack = contextlib.ExitStack()
        if config.workers > 1 or config.ray is not None:
            from ..synthesis.executor import LocalPool, RayPool, ray_cluster

            if config.ray is not None:
                self._stack.enter_context(ray_cluster(config.ray, num_cpus=max(2, config.workers)))
            if config.ray is not None:
                self.pool = RayPool(RolloutWorker, (config.to_dict(), str(run)), config.workers,
                                    gpus=config.rollout_gpus)
            else:
                self.pool = LocalPool(RolloutWorker, (config.to_dict(), str(run)), config.workers)

    def groups(self, folder: Path, requests: list[tuple[EvalTask, int, list[int]]]) -> list:
        """One group per request (task, group index, seeds), in order; None for a task that
        could not be laid out.  ``folder``: the checkpoint whose adapter the workers use."""
        from . import distributed

        if self.pool is None and distributed.active():
            # Request i on rank i % world; gathered, every rank has every group in request order.
            world, rank = distributed.world(), distributed.rank()
            mine = {i: rollout_group(self.envs, task, index, self.config, seeds)
                    for i, (task, index, seeds) in enumerate(requests) if i % world == rank}
            done: dict[int, Any] = {}
            for part in distributed.gather_objects(mine):
                done.update(part)
            return [done[i] for i in range(len(requests))]
        if self.pool is None:
            results = []
            for task, index, seeds in requests:
                results.append(rollout_group(self.envs, task, index, self.config, seeds))
                if self.progress is not None:
                    self.progress.update(len(results), len(requests))
            return results
        return [result for _, result in self.pool.map([(str(folder), *r) for r in requests])]

    def close(self) -> None:
        try:
            if self.pool is not None:
                self.pool.close()
        finally:
            self._stack.close()
