"""The online training loop: frontier -> tasks -> rollouts -> GRPO update -> held-out eval -> checkpoint.

Per step, top to bottom:

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
   (``rollout.rollout``), each scored by the task's tests;
3. DAPO dynamic sampling: a group whose rewards are all equal carries no gradient; up to
   ``refills`` of them per step are replaced by groups of newly drawn tasks (the fraction of
   zero-variance groups is logged);
4. one GRPO step by the learner (``learner.Learner``: ``torch_grpo.grpo_step`` or
   ``mlx_grpo.grpo_step``, one variant, named exactly in their docstrings);
5. every outcome goes back to the sampler; every ``eval_every`` steps the held-out tasks (made
   with another synthesis seed, never trained on) are evaluated: one greedy episode per task,
   or the mean of ``eval_samples`` sampled ones (``_evaluate``);
6. a checkpoint: LoRA adapter, optimiser, sampler state, RNG states, step and the pool's state
   (the rounds taken and the draw cursors),
   written to a new folder and published by renaming a pointer file, so a kill at any moment
   leaves the last complete checkpoint; ``--resume`` continues from it exactly (metrics rows
   of steps after it are dropped, so no step is counted twice).

The weights are the learner's (``config.backend``: ``torch_learner`` on transformers + peft,
``mlx_learner`` on mlx-lm); this file imports neither framework.  At the end the adapter is
merged into the base weights (``RUN/final``, a model folder of the backend that ``frognano fix
--model BACKEND:RUN/final`` and the editor load) and exported (``mlx-4bit``).

Rollouts run in this process on the learner's own weights by default; with ``workers`` > 1
(or ``ray``) each group runs on a worker process or Ray actor (``RolloutWorker``, through the
pools ``synth`` validates on), which loads the adapter of the latest checkpoint, the learner's
weights after the previous step, before it rolls out: the step's rollouts stay on-policy.

Under ``accelerate launch`` (or ``torchrun``) the loop runs data-parallel on every process
(``distributed.py`` names the variant): the same draws everywhere, each rank rolls out its
share of a step's groups and evaluates its share of the held-out tasks, the gathered results
are the single process's, the GRPO update sums the ranks' gradients, and rank 0 alone writes
the run directory and synthesises tasks (the pool's background rounds run there; the other
ranks take exactly the rounds rank 0 took, ``_refresh``).  ``RUN/distributed.json`` records
the number of processes and each rank's final adapter digest.  Not with ``workers`` or ``ray``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..progress import Progress, Silent
from .config import TrainConfig
from .env import RepoEnv, TaskError
from .pool import SynthPool, TaskPool
from .resume import checkpoint_folder, read_json_object, read_state
from .tasks import EvalTask

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)

HELDOUT_SEED = 1000  # the synthesis seed of held-out tasks; training tasks use config.seed
PATHS_KEPT = 6  # a step's commonest call sequences in its metrics


@dataclass
class TrainResult:
    run: Path
    steps: int
    final: Path | None
    export: Path | None
    metrics: list[dict] = field(default_factory=list)
    backend: str = "torch"  # the final model is a folder of this backend: frognano fix --model BACKEND:FINAL


# -- the run directory ------------------------------------------------------------------------------
class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.config = self.path / "config.json"
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"
        self.latest = self.path / "latest"
        self.board = None  # TensorBoard's mirror of the metric rows (board.py), made by start()

    def start(self, config: TrainConfig, resume: bool) -> dict | None:
        """The checkpoint state to resume from (None: a fresh run); refuses to mix runs."""
        if self.config.exists() or self.config.is_symlink():
            if not resume:
                raise UsageError(f"{self.path} already holds a run; add --resume to continue it, or give another -o")
            try:
                saved = TrainConfig.from_dict(read_json_object(self.config, "the run's config"))
            except UsageError as exc:
                message = str(exc)
                raise UsageError(message if message.startswith(str(self.config)) else f"{self.config}: {message}") \
                    from None
            diff = saved.differences(config)
            if diff:
                raise UsageError(f"{self.path} was started with another config (differs in: {', '.join(diff)}); "
                                 "resume with the same settings, or give another -o")
            state = self.load_state(config.backend)
            # Rows after the checkpoint are done again (none at all before the first one).
            self._trim_metrics(state["step"] if state is not None else -1)
            self._open_board(state["step"] if state is not None else -1)
            return state
        if resume:
            raise UsageError(f"{self.path}: no run to resume (no config.json)")
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.config, json.dumps(config.to_dict(), indent=1))
        self._open_board(None)
        return None

    def _open_board(self, resume_after: int | None) -> None:
        from .board import Board

        self.board = Board(self.path, resume_after=resume_after)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()

    def load_state(self, backend: str = "torch") -> dict | None:
        """The last checkpoint's state, every file it needs checked first (``resume.py``)."""
        return read_state(self.path, backend)

    def current(self) -> Path:
        """The folder of the last checkpoint (``latest``, checked as a resume checks it)."""
        folder = checkpoint_folder(self.path)
        if folder is None:
            raise UsageError(f"{self.latest}: missing; the run has no checkpoint")
        return folder

    def _trim_metrics(self, step: int) -> None:
        """Drop metric rows of steps after the checkpoint: they are done again."""
        if not self.metrics.exists():
            return
        rows = [line for line in self.metrics.read_text().splitlines() if line.strip()]
        keep = []
        for line in rows:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a row cut off by the kill
            # A row that is not a step's object is no metric: dropped, as a cut-off one is.
            done = row.get("step", 0) if isinstance(row, dict) else None
            if isinstance(done, (int, float)) and not isinstance(done, bool) and done <= step:
                keep.append(line)
        _write_atomic(self.metrics, "".join(line + "\n" for line in keep))

    def log(self, row: dict) -> None:
        with open(self.metrics, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.board is not None:
            self.board.add(row)

    def save(self, step: int, learner, sampler, pool: TaskPool, rng: random.Random) -> None:
        folder = self.checkpoints / f"step-{step:06d}"
        tmp = self.checkpoints / f".step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        learner.save(tmp)  # adapter, optimiser, the framework's RNG
        sampler.save(tmp / "sampler.json")
        state = {"step": step, "pool": pool.state_dict(), "rng": _rng_state(rng)}
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        _write_atomic(self.latest, folder.name)  # the checkpoint exists only from here on
        for old in sorted(self.checkpoints.glob("step-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _rng_state(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: list) -> None:
    rng.setstate((state[0], tuple(state[1]), state[2]))


# -- the loop ----------------------------------------------------------------------------------------
def train(config: TrainConfig, run: Path, *, resume: bool = False, progress: Progress | None = None) -> TrainResult:
    """Train per ``config`` into the run directory ``run`` (module docstring)."""
    from ..synthesis.frontier import FrontierConfig, FrontierSampler, UniformSampler
    from . import distributed
    from .learner import base_model_path, make_learner

    distributed.init()  # nothing in a single process
    distributed.on_main(lambda: _check_distributed(config))  # one error line, rank 0's
    # Rank 0 shows the progress and writes the run directory; the others wait where it writes.
    progress = progress if progress is not None and distributed.is_main() else Silent()
    rundir = RunDir(run)
    state = distributed.on_main(lambda: rundir.start(config, resume))
    started = time.monotonic()
    # Where the time before step 1 goes (step 0's row): on a busy laptop it is most of a short run.
    phases: dict[str, float] = {}
    clock = [started]

    def lap(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(phases.get(name, 0.0) + now - clock[0], 2)
        clock[0] = now

    random.seed(config.seed)
    repos = [Path(r) for r in config.repos]
    if not repos:
        from .presets import example_repos

        repos = distributed.on_main(lambda: example_repos(rundir.path / "repos", progress))
    lap("repositories")
    progress.phase("synthesising tasks")
    with distributed.main_first():  # rank 0 synthesises; the others then read its task files
        pool, heldout = _task_sets(repos, rundir.path, config)
    lap("synthesis")
    families = pool.families  # round 0's, also when resuming: the pool takes the saved rounds below
    if config.sampler == "frontier":
        sampler: Any = FrontierSampler(families, FrontierConfig.from_dict({"seed": config.seed, **config.frontier}))
    else:
        sampler = UniformSampler(families, seed=config.seed)
    grpo = config.grpo_config()
    with distributed.main_first():  # rank 0 builds the tiny base model (if it is the one trained) for all
        if distributed.active() and distributed.is_main():
            base_model_path(config, rundir.path)
    rng = random.Random(config.seed)
    first = 0
    if state is not None:  # before the model loads: a state that does not fit fails in a second
        _restore_sampler(sampler, state)
        pool.load_state_dict(state["pool"])
        _set_rng_state(rng, state["rng"])
        first = state["step"]
        log.info("resuming %s after step %d", rundir.path, first)
    # Restored from the checkpoint when resuming; on several processes, rank 0's initial adapters.
    learner = make_learner(config, rundir.path, state)
    policy = learner.policy
    lap("model")
    envs = _Envs(config, policy)
    rollouts = None
    metrics: list[dict] = []
    try:
        if distributed.is_main():  # one writer of the pool's rounds; the others follow in _refresh
            pool.start()  # the next rounds of tasks, synthesised while the loop trains
        if state is None:
            if config.eval_every:  # the untrained model's held-out rate: the curve's start
                progress.phase("held-out tasks, before training", len(heldout))
                evaluation = _evaluate(envs, heldout, config, progress)
                lap("evaluation")
                start = {"step": 0, "eval": evaluation,
                         "frontier": {f.key: round(sampler.estimate(f), 4) for f in sampler.families},
                         "seconds": round(time.monotonic() - started, 2), "phases": phases}
                distributed.on_main(lambda: rundir.log(start))
                metrics.append(start)
            # The weights step 1's rollouts use.
            distributed.on_main(lambda: rundir.save(0, learner, sampler, pool, rng))
        rollouts = _Rollouts(config, rundir.path, envs)
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
                row["eval"] = _evaluate(envs, heldout, config, within)
            row["frontier"] = {f.key: round(sampler.estimate(f), 4) for f in sampler.families}
            row["pool_tasks"] = len(pool)
            row["seconds"] = round(time.monotonic() - started, 2)
            distributed.on_main(lambda: rundir.log(row))
            metrics.append(row)
            distributed.on_main(lambda: rundir.save(step, learner, sampler, pool, rng))
            note = f"reward {row['reward_mean']:.2f}, zero-var {row['zero_variance_fraction']:.0%}"
            if "eval" in row:
                note += f", held-out {row['eval']['resolve_rate']:.0%}"
            if row["paths"]:  # what the policy does, at a glance
                path, count = next(iter(row["paths"].items()))
                note += f", mostly {path} ({count / sum(row['ends'].values()):.0%})"
            progress.update(step, config.steps, note)
        pool.close()  # training is over: no more rounds
        progress.phase("merging and exporting")
        if distributed.active():
            _record_ranks(rundir.path, learner, sampler, pool, rng)
        final, export = distributed.on_main(lambda: learner.finish(rundir.path, config.export))
    finally:
        pool.close()
        if rollouts is not None:
            rollouts.close()
        envs.close()
        rundir.close()
        distributed.close()
    return TrainResult(rundir.path, config.steps, final, export, metrics, backend=config.backend)


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


def _restore_sampler(sampler, state: dict) -> None:
    """The checkpoint's sampler state (``sampler.json``, a JSON object by ``resume.read_state``);
    one that does not fit the sampler is a UsageError naming the file."""
    path = state["folder"] / "sampler.json"
    try:
        sampler.load_state_dict(state["sampler"])
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise UsageError(f"{path}: not a task sampler state of this run ({type(exc).__name__}: {exc})") from None


def _check_distributed(config: TrainConfig) -> None:
    """What a data-parallel launch (``distributed.py``) cannot combine with."""
    from . import distributed

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
    from . import distributed

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

    from . import distributed

    loop_state = json.dumps([sampler.state_dict(), pool.state_dict(), _rng_state(rng)], sort_keys=True, default=str)
    mine = (learner.digest(), hashlib.sha256(loop_state.encode()).hexdigest())
    ranks = distributed.gather_objects(mine)
    identical = len(set(ranks)) == 1
    if distributed.is_main():
        _write_atomic(run / "distributed.json", json.dumps({
            "world": distributed.world(), "adapter_sha256": [r[0] for r in ranks],
            "loop_state_sha256": [r[1] for r in ranks], "identical": identical}, indent=1))
    if not identical:
        log.warning("distributed: the ranks' adapters or loop states differ at the end: %s", ranks)


def _task_sets(repos: list[Path], run: Path, config: TrainConfig) -> tuple[SynthPool, list[EvalTask]]:
    """(the training pool, held-out tasks), in the run directory (resumable): the held-out tasks
    first (another seed), then the pool's round 0, which never holds a held-out bug (pool.py)."""
    from ..synthesis.synth import synthesize
    from .tasks import load_tasks

    from . import distributed

    heldout_file = run / "heldout.jsonl"
    if distributed.is_main():  # the other ranks read rank 0's files (train's main_first)
        held_repos = repos
        if config.heldout_repos:  # other repositories than the training ones (presets.resolve_heldout)
            from .presets import resolve_heldout

            held_repos = resolve_heldout(config.heldout_repos, run / "heldout-repos")
        synthesize(held_repos, heldout_file, n=config.heldout_per_repo, seed=HELDOUT_SEED)
    heldout, _ = load_tasks(heldout_file)
    pool = SynthPool(run / "pool", repos, heldout_file, n=config.tasks_per_repo, seed=config.seed,
                     rounds=config.synth_rounds)
    return pool, heldout


class _Envs:
    """One environment per repository tree, all with the policy as their model."""

    def __init__(self, config: TrainConfig, policy) -> None:
        from ..config import Settings

        self.settings = Settings(lanes=1, temperature=config.temperature, max_turns=config.max_turns,
                                 max_new_tokens=config.max_new_tokens, constrain=True,
                                 max_candidates=config.max_candidates)
        self.policy = policy
        self.config = config
        self._envs: dict[str, RepoEnv] = {}

    def get(self, task: EvalTask) -> RepoEnv:
        from .env import find_repo, python_for, tree_for
        from ..paths import cache_root

        repo = find_repo(task, [])
        tree = tree_for(task, repo, cache_root() / "trees")
        key = str(tree)
        if key not in self._envs:
            self._envs[key] = RepoEnv(tree, python_for(repo, tree, self.settings), model=self.policy)
        return self._envs[key]

    def sampling(self) -> None:
        """Every environment back to the rollouts' sampling settings (after a greedy evaluation)."""
        for env in self._envs.values():
            env.engine.settings = self.settings

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs = {}


def _group(envs: _Envs, task: EvalTask, index: int, config: TrainConfig, seeds: list[int]):
    """One rollout of ``task`` per seed, group ``index`` (None when the task cannot be laid out)."""
    from .rollout import candidates_for, rollout

    try:
        env = envs.get(task)
        env.engine.settings = envs.settings
        state = env.reset(task)
    except TaskError as exc:
        log.warning("task %s skipped: %s", task.instance_id, exc)
        return None
    search = candidates_for(env, state)
    return [rollout(env, state, group=index, seed=seed, tools=tuple(config.tools), search=search,
                    listed=config.max_candidates) for seed in seeds]


class RolloutWorker:
    """A rollout worker in another process or on a Ray actor (``synthesis.executor.Worker``): its
    own copy of the policy and its own environments.  Each request names the checkpoint whose
    adapter the rollouts must use (the learner's weights after the previous step); the worker
    loads it when it has another one, so every rollout of a step is on-policy."""

    def __init__(self, config: dict, run: str) -> None:
        from .learner import make_learner

        self.config = TrainConfig.from_dict(config)
        self.run_dir = Path(run)
        self.learner = make_learner(self.config, self.run_dir)
        self.policy = self.learner.policy
        self.envs = _Envs(self.config, self.policy)
        self.loaded = ""

    def run(self, item: tuple[str, EvalTask, int, list[int]]):
        folder, task, index, seeds = item
        if folder != self.loaded:
            self.learner.load_adapter(Path(folder))
            self.loaded = folder
        return _group(self.envs, task, index, self.config, seeds)

    def close(self) -> None:
        self.envs.close()


class _Rollouts:
    """Where a step's groups run: here, or on ``workers`` processes / Ray actors."""

    def __init__(self, config: TrainConfig, run: Path, envs: _Envs) -> None:
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
        from . import distributed

        if self.pool is None and distributed.active():
            # Request i on rank i % world; gathered, every rank has every group in request order.
            world, rank = distributed.world(), distributed.rank()
            mine = {i: _group(self.envs, task, index, self.config, seeds)
                    for i, (task, index, seeds) in enumerate(requests) if i % world == rank}
            done: dict[int, Any] = {}
            for part in distributed.gather_objects(mine):
                done.update(part)
            return [done[i] for i in range(len(requests))]
        if self.pool is None:
            done = []
            for task, index, seeds in requests:
                done.append(_group(self.envs, task, index, self.config, seeds))
                if self.progress is not None:
                    self.progress.update(len(done), len(requests))
            return done
        return [result for _, result in self.pool.map([(str(folder), *r) for r in requests])]

    def close(self) -> None:
        try:
            if self.pool is not None:
                self.pool.close()
        finally:
            self._stack.close()


def _step(step, config, grpo, rollouts, folder, pool, sampler, rng, learner) -> dict:
    """One step: rounds of groups (the sampler's families, then DAPO refills of the groups
    whose rewards were all equal), then one GRPO update."""
    from ..synthesis.frontier import Family
    from .grpo import all_equal

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
            clean = [r.sample.reward for r in result if not r.sample.error]
            if len(clean) >= 2 and all_equal(clean):
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
    # refilled ones included) take their names.
    return {**{k: v for k, v in stats.items() if isinstance(v, (int, float))},
            "step": step, "groups": groups, "zero_variance_groups": zero, "refills": refills,
            "zero_variance_fraction": zero / groups if groups else 0.0, "errors": errors,
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "resolved_rate": sum(outcomes) / len(outcomes) if outcomes else 0.0,
            "ends": dict(sorted(ends.items())), "openers": dict(sorted(openers.items())),
            "paths": dict(paths.most_common(PATHS_KEPT))}


def _evaluate(envs: _Envs, heldout: list[EvalTask], config: TrainConfig, progress: Progress | None = None) -> dict:
    """The held-out resolve rate through the serving harness: one greedy episode per task
    (``eval_samples`` 1), or the mean over ``eval_samples`` episodes sampled at the rollout
    temperature (pass@1 estimated from k samples, as DeepSeek-R1 reports it: a small policy's
    greedy episode repeats its first call every turn).  The seeds are the same at every
    evaluation, so successive rates differ by the policy, not by the draw; and they differ from
    task to task, because a policy that barely reads the task (the tiny one, early) would make
    the same choices on every task from the same seed, and k samples would be k draws, not
    k x tasks.  On several
    processes task i is evaluated on rank i % world and the counts are summed: an episode does
    not depend on where it runs, so the numbers are a single process's."""
    from dataclasses import replace

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
                                                          listed=config.max_candidates)
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
