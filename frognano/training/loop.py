"""The online training loop, top to bottom: frontier -> tasks -> rollouts -> GRPO update ->
held-out eval -> checkpoint.  The update is the GRPO variant ``grpo.py`` names, rule by rule.

Per step:

1. the sampler (``synthesis.frontier``: p(1-p) at the learnability frontier, or uniform for
   the ablation) picks ``tasks_per_step`` families; a task of each is drawn from the pool
   (``pool.SynthPool``; a family promoted to a weaker hint reuses the same bugs with that
   hint's text).  ``synth`` fills the pool from the training repositories: round 0 before
   training, then up to ``synth_rounds`` more rounds in a background thread (one validation
   worker; it stops early once a round finds no new bug), never with a held-out bug; the
   rounds it has finished join the pool at the start of a step, and the families the sampler
   knows are those of round 0;
2. each task is laid out (``env.RepoEnv``: one shadow copy and warm session per repository) and
   the policy runs ``group_size`` episodes on it through the serving harness
   (``rollout.rollout_group``), each scored by the task's tests;
3. DAPO dynamic sampling: a group of equal rewards carries no gradient (``grpo.zero_variance``);
   up to ``refills`` of them per step are replaced by groups of newly drawn tasks (the fraction
   of zero-variance groups is logged);
4. one GRPO step by the learner (``learner.Learner``: ``torch_grpo.grpo_step`` or
   ``mlx_grpo.grpo_step``);
5. every outcome goes back to the sampler; every ``eval_every`` steps the held-out tasks (made
   with another synthesis seed, never trained on) are evaluated: one greedy episode per task,
   or the mean of ``eval_samples`` sampled ones (``heldout.evaluate_heldout``);
6. a checkpoint (``rundir.RunDir``): LoRA adapter, optimiser, sampler state, RNG states, step
   and the pool's state (the rounds taken and the draw cursors), published atomically, so a
   kill at any moment leaves the last complete checkpoint; ``--resume`` continues from it
   exactly (``rundir.restore``).

The weights are the learner's (``config.backend``: ``torch_learner`` on transformers + peft,
``mlx_learner`` on mlx-lm); this file imports neither framework.  At the end the adapter is
merged into the base weights (``RUN/final``, a model folder of the backend that ``frognano fix
--model BACKEND:RUN/final`` and the editor load) and exported (``mlx-4bit``).

Rollouts run in this process on the learner's own weights by default, or on worker processes
or Ray actors with ``workers`` > 1 (or ``ray``), which load the adapter of the latest checkpoint
before they roll out, so the step's rollouts stay on-policy (``workers.py``).

Under ``accelerate launch`` (or ``torchrun``) the loop runs data-parallel on every process
(``distributed.py`` names the variant): the same draws everywhere, each rank rolls out its
share of a step's groups and evaluates its share of the held-out tasks, the gathered results
are the single process's, the GRPO update sums the ranks' gradients, and rank 0 alone writes
the run directory and synthesises tasks (the pool's background rounds run there; the other
ranks take exactly the rounds rank 0 took, ``_refresh``).  ``RUN/distributed.json`` records
the number of processes and each rank's final adapter digest.  Not with ``workers`` or ``ray``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..progress import Progress, Silent
from . import distributed
from .config import TrainConfig
from .heldout import HELDOUT_SEED, evaluate_heldout
from .pool import SynthPool, TaskPool
from .rollout import Environments
from .rundir import RunDir, restore, rng_state, write_atomic
from .tasks import EvalTask
from .workers import Rollouts

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)

PATHS_KEPT = 6  # a step's commonest call sequences in its metrics


@dataclass
class TrainResult:
    run: Path
    steps: int
    final: Path | None
    export: Path | None
    metrics: list[dict] = field(default_factory=list)
    backend: str = "torch"  # the final model is a folder of this backend: frognano fix --model BACKEND:FINAL


# -- the loop ----------------------------------------------------------------------------------------
def train(config: TrainConfig, run: Path, *, resume: bool = False, progress: Progress | None = None) -> TrainResult:
    """Train per ``config`` into the run directory ``run`` (module docstring)."""
    progress = _launch(config, progress)  # this process alone, or one rank of a launch
    rundir = RunDir(run)
    state = rundir.start(config, resume)  # the last checkpoint's state when resuming, else None
    clock = _Clock()  # where the time before step 1 goes (step 0's row)
    random.seed(config.seed)
    repos = _repositories(config, rundir, progress)
    clock.lap("repositories")
    progress.phase("synthesising tasks")
    pool, heldout = _task_sets(repos, rundir.path, config)
    clock.lap("synthesis")
    sampler = _sampler(config, pool.families)  # round 0's, also when resuming: restore takes the saved rounds
    grpo = config.grpo_config()
    rng = random.Random(config.seed)
    first = restore(state, sampler, pool, rng)  # the last step done (0: a fresh run), before the model loads
    learner = _learner(config, rundir.path, state)
    clock.lap("model")
    envs = Environments(config, learner.policy)
    rollouts = None
    metrics: list[dict] = []
    try:
        if distributed.is_main():  # one writer of the pool's rounds; the others follow in _refresh
            pool.start()  # the next rounds of tasks, synthesised while the loop trains
        if state is None:
            if config.eval_every:  # the untrained model's held-out rate: the curve's start
                progress.phase("held-out tasks, before training", len(heldout))
                evaluation = evaluate_heldout(envs, heldout, config, progress)
                clock.lap("evaluation")
                metrics.append({"step": 0, "eval": evaluation, "frontier": _estimates(sampler),
                                "seconds": clock.seconds(), "phases": clock.phases})
                rundir.log(metrics[-1])
            rundir.save(0, learner, sampler, pool, rng)  # the weights step 1's rollouts use
        rollouts = Rollouts(config, rundir.path, envs)
        progress.phase("training", config.steps)
        progress.update(first, config.steps)
        for step in range(first + 1, config.steps + 1):
            _refresh(pool)  # the rounds finished so far: new tasks only at a step boundary
            folder = rundir.current()
            within = _Within(progress, step, config.steps)
            rollouts.progress = within
            row = _step(step, config, grpo, rollouts, folder, pool, sampler, rng, learner)
            if step == config.steps or (config.eval_every and step % config.eval_every == 0):
                within.what = "held-out"
                row["eval"] = evaluate_heldout(envs, heldout, config, within)
            row["frontier"] = _estimates(sampler)
            row["pool_tasks"] = len(pool)
            row["seconds"] = clock.seconds()
            rundir.log(row)
            metrics.append(row)
            rundir.save(step, learner, sampler, pool, rng)
            progress.update(step, config.steps, _note(row))
        pool.close()  # training is over: no more rounds
        progress.phase("merging and exporting")
        final, export = _finish(config, rundir.path, learner, sampler, pool, rng)
    finally:
        pool.close()
        if rollouts is not None:
            rollouts.close()
        envs.close()
        rundir.close()
        distributed.close()
    return TrainResult(rundir.path, config.steps, final, export, metrics, backend=config.backend)


# -- the loop's steps, in the order train takes them -------------------------------------------------
def _launch(config: TrainConfig, progress: Progress | None) -> Progress:
    """Join a launch's process group (nothing in a single process) and refuse what it cannot be
    combined with (one error line: rank 0's).  Rank 0 shows the progress; the others are silent
    and wait where it writes the run directory (``RunDir``)."""
    distributed.init()
    distributed.on_main(lambda: _check_distributed(config))
    return progress if progress is not None and distributed.is_main() else Silent()


class _Clock:
    """Seconds since the run started, and where the time before step 1 went, by phase (step 0's
    row: on a busy laptop it is most of a short run)."""

    def __init__(self) -> None:
        self.started = self.last = time.monotonic()
        self.phases: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.last, 2)
        self.last = now

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 2)


def _repositories(config: TrainConfig, rundir: RunDir, progress: Progress) -> list[Path]:
    """The training repositories: the config's, or green copies of the bundled examples (made by
    rank 0, in the run directory)."""
    repos = [Path(r) for r in config.repos]
    if not repos:
        from .presets import example_repos

        repos = distributed.on_main(lambda: example_repos(rundir.path / "repos", progress))
    return repos


def _sampler(config: TrainConfig, families) -> Any:
    from ..synthesis.frontier import FrontierConfig, FrontierSampler, UniformSampler

    if config.sampler == "frontier":
        return FrontierSampler(families, FrontierConfig.from_dict({"seed": config.seed, **config.frontier}))
    return UniformSampler(families, seed=config.seed)


def _learner(config: TrainConfig, run: Path, state: dict | None):
    """The learner, restored from the checkpoint when resuming.  On several processes rank 0
    builds the base model first (the tiny one, if it is the one trained) and every rank starts
    from rank 0's initial adapters."""
    from .backends import make_learner
    from .learner import base_model_path

    with distributed.main_first():
        if distributed.active() and distributed.is_main():
            base_model_path(config, run)
    return make_learner(config, run, state)


def _estimates(sampler) -> dict[str, float]:
    """The sampler's success estimate per family (a row's ``frontier``)."""
    return {f.key: round(sampler.estimate(f), 4) for f in sampler.families}


def _note(row: dict) -> str:
    """A step's row on the training bar: reward, zero-variance share, held-out rate, and what
    the policy does, at a glance."""
    note = f"reward {row['reward_mean']:.2f}, zero-var {row['zero_variance_fraction']:.0%}"
    if "eval" in row:
        note += f", held-out {row['eval']['resolve_rate']:.0%}"
    if row["paths"]:
        path, count = next(iter(row["paths"].items()))
        note += f", mostly {path} ({count / sum(row['ends'].values()):.0%})"
    return note


def _finish(config: TrainConfig, run: Path, learner, sampler, pool: TaskPool, rng: random.Random):
    """(final model folder, export folder or None): the adapter merged and exported by rank 0;
    on several processes the ranks' digests first (``RUN/distributed.json``)."""
    if distributed.active():
        _record_ranks(run, learner, sampler, pool, rng)
    return distributed.on_main(lambda: learner.finish(run, config.export))


class _Within:
    """Progress inside a step, on the training bar's note (a small model's step takes minutes on
    a CPU: its groups and its held-out episodes show as they finish)."""

    def __init__(self, progress: Progress, step: int, steps: int) -> None:
        self.progress, self.step, self.steps, self.what = progress, step, steps, "group"

    def phase(self, title: str, total: int | None = None) -> None:
        pass

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        self.progress.update(self.step - 1, self.steps,
                             f"step {self.step}: {self.what} {done}/{total}" + (f", {note}" if note else ""))


def _check_distributed(config: TrainConfig) -> None:
    """What a data-parallel launch (``distributed.py``) cannot combine with."""
    if not distributed.active():
        return
    if config.workers > 1 or config.ray is not None:
        raise UsageError("--workers and --ray cannot be combined with a launch on several processes "
                         f"(WORLD_SIZE={distributed.world()}): each process already rolls out its share")
    if config.backend != "torch":
        raise UsageError(f"backend {config.backend} cannot train on several processes: "
                         "launch it as one process, or use --backend torch")


def _refresh(pool: SynthPool) -> None:
    """``pool.refresh()`` on every rank alike: rank 0 (the only one synthesising) takes the
    finished rounds, and the others take exactly as many, so that every rank draws the same
    tasks even when a round is published between two ranks' looks."""
    if not distributed.active():
        pool.refresh()
        return

    def main() -> int:
        pool.refresh()
        return pool.state_dict()["rounds"]

    rounds = distributed.on_main(main)
    if not distributed.is_main() and pool.state_dict()["rounds"] != rounds:
        pool.load_state_dict({**pool.state_dict(), "rounds": rounds})  # the rounds again, the same cursors


def _record_ranks(run: Path, learner, sampler, pool: TaskPool, rng: random.Random) -> None:
    """``RUN/distributed.json``: the number of processes and, per rank, a digest of its adapter
    weights and one of its loop state (sampler, pool rounds and cursors, RNG) at the end; each
    must be equal on all ranks (the same draws everywhere, the same summed gradient stepped)."""
    import hashlib

    loop_state = json.dumps([sampler.state_dict(), pool.state_dict(), rng_state(rng)], sort_keys=True, default=str)
    mine = (learner.digest(), hashlib.sha256(loop_state.encode()).hexdigest())
    ranks = distributed.gather_objects(mine)
    identical = len(set(ranks)) == 1
    if distributed.is_main():
        write_atomic(run / "distributed.json", json.dumps({
            "world": distributed.world(), "adapter_sha256": [r[0] for r in ranks],
            "loop_state_sha256": [r[1] for r in ranks], "identical": identical}, indent=1))
    if not identical:
        log.warning("distributed: the ranks' adapters or loop states differ at the end: %s", ranks)


def _task_sets(repos: list[Path], run: Path, config: TrainConfig) -> tuple[SynthPool, list[EvalTask]]:
    """(the training pool, held-out tasks), in the run directory (resumable): the held-out tasks
    first (another seed), then the pool's round 0, which never holds a held-out bug (pool.py).
    Rank 0 synthesises them; the other ranks then read its task files."""
    from ..synthesis.synth import synthesize
    from .tasks import load_tasks

    heldout_file = run / "heldout.jsonl"
    with distributed.main_first():
        if distributed.is_main():
            held_repos = repos
            if config.heldout_repos:  # other repositories than the training ones (presets.resolve_heldout)
                from .presets import resolve_heldout

                held_repos = resolve_heldout(config.heldout_repos, run / "heldout-repos")
            synthesize(held_repos, heldout_file, n=config.heldout_per_repo, seed=HELDOUT_SEED)
        heldout, _ = load_tasks(heldout_file)
        pool = SynthPool(run / "pool", repos, heldout_file, n=config.tasks_per_repo, seed=config.seed,
                         rounds=config.synth_rounds)
    return pool, heldout


def _step(step, config, grpo, rollouts, folder, pool, sampler, rng, learner) -> dict:
    """One step: rounds of groups (the sampler's families, then DAPO refills of the groups
    whose rewards were all equal), then one GRPO update."""
    from ..synthesis.frontier import Family
    from .grpo import zero_variance

    samples, outcomes = [], []
    groups = zero = refills = errors = 0
    ends: dict[str, int] = {}  # how the step's episodes ended (submitted, turns, ...)
    openers: dict[str, int] = {}  # their first tool calls: what a policy learns first shows here
    paths: Counter[str] = Counter()  # their call sequences ("apply 1 > submit"), the commonest kept
    batch = [(f.key, pool.draw(f.key)) for f in sampler.sample(config.tasks_per_step)]
    while batch:
        requests = [(task, groups + i, [rng.randrange(1 << 30) for _ in range(config.group_size)])
                    for i, (_, task) in enumerate(batch)]
        again = []
        for (family, task), result in zip(batch, rollouts.groups(folder, requests)):
            if result is None:
                continue
            groups += 1
            for r in result:
                ends[r.status] = ends.get(r.status, 0) + 1
                if r.calls:
                    openers[r.calls[0]] = openers.get(r.calls[0], 0) + 1
                    paths[" > ".join(r.calls)] += 1
                if r.status != "error":
                    sampler.update(Family.from_key(family), r.resolved)
                    outcomes.append(r.resolved)
                # Infrastructure failures, and episodes whose tokens the loss cannot use.
                errors += r.status == "error" or r.sample.error
            if zero_variance([r.sample for r in result]):  # no gradient for lack of a difference
                zero += 1
                if refills < config.refills:  # DAPO: replace it with a new task's group
                    refills += 1
                    refill = sampler.sample(1)[0].key
                    again.append((refill, pool.draw(refill)))
                    continue
            samples.extend(r.sample for r in result)
        batch = again
    stats = learner.step(samples, grpo) if samples else {"stepped": 0.0}
    rewards = [s.reward for s in samples if not s.error]
    # The update's statistics cover the groups it kept; the step's own counts (all groups,
    # refilled ones included) take their names: errors, reward_mean, and the one zero-variance
    # count (the update has none).
    return {**{k: v for k, v in stats.items() if isinstance(v, (int, float))},
            "step": step, "groups": groups, "zero_variance_groups": zero, "refills": refills,
            "zero_variance_fraction": zero / groups if groups else 0.0, "errors": errors,
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "resolved_rate": sum(outcomes) / len(outcomes) if outcomes else 0.0,
            "ends": dict(sorted(ends.items())), "openers": dict(sorted(openers.items())),
            "paths": dict(paths.most_common(PATHS_KEPT))}

