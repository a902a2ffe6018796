"""The held-out evaluation of a training run: its resolve rate through the serving harness.

The held-out tasks are synthesised with another seed than the training tasks (``HELDOUT_SEED``;
``loop._task_sets``), or from other repositories (``heldout_repos``), and never trained on.
``frognano eval`` (``evaluate.py``) measures a finished model on any task set; this is the
training loop's own curve, at step 0 and every ``eval_every`` steps.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..progress import Progress
from .config import TrainConfig
from .env import TaskError
from .rollout import Environments
from .tasks import EvalTask

__all__ = ["HELDOUT_SEED", "evaluate_heldout"]

log = logging.getLogger(__name__)

HELDOUT_SEED = 1000  # the synthesis seed of held-out tasks; training tasks use config.seed


def evaluate_heldout(envs: Environments, heldout: list[EvalTask], config: TrainConfig,
                     progress: Progress | None = None) -> dict:
    """The held-out resolve rate through the serving harness: one greedy episode per task
    (``eval_samples`` 1), or the mean over ``eval_samples`` episodes sampled at the rollout
    temperature (pass@1 estimated from k samples, as DeepSeek-R1 reports it: a small policy's
    greedy episode repeats its first call every turn).  The seeds are the same at every
    evaluation, so successive rates differ by the policy, not by the draw; and they differ from
    task to task, because a policy that barely reads the task (the tiny one, early) would make
    the same choices on every task from the same seed, and k samples would be k draws, not
    k x tasks.  On several processes task i is evaluated on rank i % world and the counts are
    summed: an episode does not depend on where it runs, so the numbers are a single process's."""
    from ..repair.agent import EpisodeStatus
    from . import distributed
    from .metrics import episode_facts, episode_metrics, wilson
    from .rollout import candidates_for

    greedy = config.eval_samples == 1
    resolved = total = tasks = 0
    episodes: list[dict] = []  # per scored episode: what the seed's metrics are computed from
    try:
        for index, task in enumerate(heldout):
            if index % distributed.world() != distributed.rank():
                continue
            try:
                env = envs.get(task)
                env.engine.settings = replace(envs.settings, temperature=0.0) if greedy else envs.settings
                state = env.reset(task)
                search = candidates_for(env, state)
                counted = 0
                for k in range(config.eval_samples):
                    episode, toolbox = env.engine.model_episode(state.diagnosis, env.engine.verifier(state.diagnosis),
                                                          search, 0, record=False, seed=HELDOUT_SEED + 1000 * index + k,
                                                          hint=task.hint, tools=tuple(config.tools),
                                                          listed=config.candidates_listed)
                    if episode.status == EpisodeStatus.MODEL_ERROR:
                        continue
                    counted += 1
                    won = env.reward(state, episode.patch).resolved
                    resolved += won
                    episodes.append(episode_facts(episode, toolbox, won))
                total += counted
                tasks += counted > 0
            except TaskError as exc:
                log.warning("held-out task %s skipped: %s", task.instance_id, exc)
            if progress is not None:
                progress.update(index + 1, len(heldout), f"resolved {resolved} of {total}")
    finally:
        envs.sampling()
    if distributed.active():
        counts = distributed.gather_objects((resolved, total, tasks, episodes))
        resolved, total, tasks = (sum(c[i] for c in counts) for i in range(3))
        episodes = [e for c in counts for e in c[3]]
    low, high = wilson(resolved, total)
    return {"tasks": tasks, "episodes": total, "resolved": resolved,
            "resolve_rate": resolved / total if total else 0.0,
            "ci": [round(low, 4), round(high, 4)], **episode_metrics(episodes)}
