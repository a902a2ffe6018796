"""The online training loop: frontier -> tasks -> rollouts -> GRPO update -> held-out eval -> checkpoint.

Per step, top to bottom:

1. the sampler (``synthesis.frontier``: p(1-p) at the learnability frontier, or uniform for
   the ablation) picks ``tasks_per_step`` families; a task of each is drawn from the pool
   ``synth`` made from the training repositories (a family promoted to a weaker hint reuses
   the same bugs with that hint's text);
2. each task is laid out (``env.RepoEnv``: one shadow copy and warm session per repository) and
   the policy runs ``group_size`` episodes on it through the serving harness
   (``rollout.rollout``), each scored by the task's tests;
3. DAPO dynamic sampling: a group whose rewards are all equal carries no gradient; up to
   ``refills`` of them per step are replaced by groups of newly drawn tasks (the fraction of
   zero-variance groups is logged);
4. one GRPO step (``torch_grpo.grpo_step``: the exact variant is in its docstring);
5. every outcome goes back to the sampler; every ``eval_every`` steps the held-out tasks (made
   with another synthesis seed, never trained on) are evaluated greedily;
6. a checkpoint: LoRA adapter, optimiser, sampler state, RNG states, step and pool cursor,
   written to a new folder and published by renaming a pointer file, so a kill at any moment
   leaves the last complete checkpoint; ``--resume`` continues from it exactly (metrics rows
   of steps after it are dropped, so no step is counted twice).

At the end the adapter is merged into the base weights (``RUN/final``, a transformers folder
that ``frognano fix --model torch:RUN/final`` and the editor load) and exported (``mlx-4bit``).

Rollouts run in this process on the learner's own weights by default; with ``workers`` > 1
(or ``ray``) each group runs on a worker process or Ray actor (``RolloutWorker``, through the
pools ``synth`` validates on), which loads the adapter of the latest checkpoint, the learner's
weights after the previous step, before it rolls out: the step's rollouts stay on-policy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FrogNanoError, UsageError
from ..progress import Progress, Silent
from .config import TrainConfig
from .env import RepoEnv, TaskError
from .tasks import EvalTask

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)

HELDOUT_SEED = 1000  # the synthesis seed of held-out tasks; training tasks use config.seed


@dataclass
class TrainResult:
    run: Path
    steps: int
    final: Path | None
    export: Path | None
    metrics: list[dict] = field(default_factory=list)


# -- the task pool ---------------------------------------------------------------------------------
class TaskPool:
    """Training tasks by family, drawn in a seeded order; the cursor is part of a checkpoint."""

    def __init__(self, tasks: list[EvalTask], seed: int) -> None:
        self.by_family: dict[str, list[EvalTask]] = defaultdict(list)
        for t in tasks:
            self.by_family[t.family].append(t)
        rng = random.Random(seed)
        for family in sorted(self.by_family):
            rng.shuffle(self.by_family[family])
        self.cursor: dict[str, int] = defaultdict(int)

    @property
    def families(self) -> list[str]:
        return sorted(self.by_family)

    def draw(self, family: str) -> EvalTask:
        """The next task of ``family``; a family the pool lacks (a promoted, weaker hint) takes a
        task of the same bug kind and distance and shows that hint's text instead."""
        from dataclasses import replace

        from ..synthesis.frontier import Family
        from ..synthesis.validate import hint_text

        hint = None
        key = family
        if family not in self.by_family:
            hint = Family.from_key(family).hint
            # The same bugs at another hint level: the pool's families that differ only in the hint.
            same = [k for k in self.families if replace(Family.from_key(k), hint=hint).key == family]
            key = same[0] if same else self.families[0]
        tasks = self.by_family[key]
        task = tasks[self.cursor[family] % len(tasks)]
        self.cursor[family] += 1
        if hint is not None:
            task = replace(task, hint=hint_text({**task.extra, "FAIL_TO_PASS": list(task.FAIL_TO_PASS)}, hint),
                           family=family)
        return task


# -- the run directory ------------------------------------------------------------------------------
class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.config = self.path / "config.json"
        self.metrics = self.path / "metrics.jsonl"
        self.checkpoints = self.path / "checkpoints"
        self.latest = self.path / "latest"

    def start(self, config: TrainConfig, resume: bool) -> dict | None:
        """The checkpoint state to resume from (None: a fresh run); refuses to mix runs."""
        if self.config.exists():
            saved = TrainConfig.from_dict(json.loads(self.config.read_text()))
            if not resume:
                raise UsageError(f"{self.path} already holds a run; add --resume to continue it, or give another -o")
            diff = saved.differences(config)
            if diff:
                raise UsageError(f"{self.path} was started with another config (differs in: {', '.join(diff)}); "
                                 "resume with the same settings, or give another -o")
            state = self.load_state()
            # Rows after the checkpoint are done again (none at all before the first one).
            self._trim_metrics(state["step"] if state is not None else -1)
            return state
        if resume:
            raise UsageError(f"{self.path}: no run to resume (no config.json)")
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.config, json.dumps(config.to_dict(), indent=1))
        return None

    def load_state(self) -> dict | None:
        if not self.latest.exists():
            return None
        folder = self.checkpoints / self.latest.read_text().strip()
        return {**json.loads((folder / "state.json").read_text()), "folder": folder}

    def _trim_metrics(self, step: int) -> None:
        """Drop metric rows of steps after the checkpoint: they are done again."""
        if not self.metrics.exists():
            return
        rows = [line for line in self.metrics.read_text().splitlines() if line.strip()]
        keep = []
        for line in rows:
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except ValueError:
                continue  # a row cut off by the kill
        _write_atomic(self.metrics, "".join(line + "\n" for line in keep))

    def log(self, row: dict) -> None:
        with open(self.metrics, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def save(self, step: int, policy, optimizer, sampler, pool: TaskPool, rng: random.Random) -> None:
        import torch

        folder = self.checkpoints / f"step-{step:06d}"
        tmp = self.checkpoints / f".step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        policy.model.save_pretrained(tmp / "adapter")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        sampler.save(tmp / "sampler.json")
        state = {"step": step, "cursor": dict(pool.cursor), "rng": _rng_state(rng),
                 "torch_rng": torch.get_rng_state().tolist()}
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
    import torch

    from ..synthesis.frontier import FrontierConfig, FrontierSampler, UniformSampler
    from .torch_grpo import grpo_step, make_optimizer

    progress = progress or Silent()
    rundir = RunDir(run)
    state = rundir.start(config, resume)
    started = time.monotonic()
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    repos = [Path(r) for r in config.repos]
    if not repos:
        from .presets import example_repos

        repos = example_repos(rundir.path / "repos", progress)
    progress.phase("synthesising tasks")
    train_tasks, heldout = _task_sets(repos, rundir.path, config)
    pool = TaskPool(train_tasks, config.seed)
    families = pool.families
    if config.sampler == "frontier":
        sampler: Any = FrontierSampler(families, FrontierConfig.from_dict({"seed": config.seed, **config.frontier}))
    else:
        sampler = UniformSampler(families, seed=config.seed)
    grpo = config.grpo_config()
    policy = _policy(config, rundir.path, grpo, state)
    optimizer = make_optimizer(policy.model, grpo)
    rng = random.Random(config.seed)
    first = 0
    if state is not None:
        optimizer.load_state_dict(torch.load(state["folder"] / "optimizer.pt"))
        sampler.load_state_dict(json.loads((state["folder"] / "sampler.json").read_text()))
        pool.cursor.update(state["cursor"])
        _set_rng_state(rng, state["rng"])
        torch.set_rng_state(torch.tensor(state["torch_rng"], dtype=torch.uint8))
        first = state["step"]
        log.info("resuming %s after step %d", rundir.path, first)
    envs = _Envs(config, policy)
    rollouts = None
    metrics: list[dict] = []
    try:
        if state is None:
            if config.eval_every:  # the untrained model's held-out rate: the curve's start
                start = {"step": 0, "eval": _evaluate(envs, heldout, config),
                         "frontier": {f.key: round(sampler.estimate(f), 4) for f in sampler.families},
                         "seconds": round(time.monotonic() - started, 2)}
                rundir.log(start)
                metrics.append(start)
            rundir.save(0, policy, optimizer, sampler, pool, rng)  # the weights step 1's rollouts use
        rollouts = _Rollouts(config, rundir.path, envs)
        progress.phase("training", config.steps)
        progress.update(first, config.steps)
        for step in range(first + 1, config.steps + 1):
            folder = rundir.checkpoints / rundir.latest.read_text().strip()
            row = _step(step, config, grpo, rollouts, folder, pool, sampler, rng, policy, optimizer, grpo_step)
            if step == config.steps or (config.eval_every and step % config.eval_every == 0):
                row["eval"] = _evaluate(envs, heldout, config)
            row["frontier"] = {f.key: round(sampler.estimate(f), 4) for f in sampler.families}
            row["seconds"] = round(time.monotonic() - started, 2)
            rundir.log(row)
            metrics.append(row)
            rundir.save(step, policy, optimizer, sampler, pool, rng)
            note = f"reward {row['reward_mean']:.2f}, zero-var {row['zero_variance_fraction']:.0%}"
            if "eval" in row:
                note += f", held-out {row['eval']['resolve_rate']:.0%}"
            progress.update(step, config.steps, note)
        final, export = _finish(config, rundir.path, policy, progress)
    finally:
        if rollouts is not None:
            rollouts.close()
        envs.close()
    return TrainResult(rundir.path, config.steps, final, export, metrics)


def _task_sets(repos: list[Path], run: Path, config: TrainConfig) -> tuple[list[EvalTask], list[EvalTask]]:
    """(training tasks, held-out tasks): synthesised once into the run directory (resumable)."""
    from ..synthesis.store import patch_hash
    from ..synthesis.synth import synthesize
    from .tasks import load_tasks

    train_file, heldout_file = run / "tasks.jsonl", run / "heldout.jsonl"
    synthesize(repos, train_file, n=config.tasks_per_repo, seed=config.seed)
    synthesize(repos, heldout_file, n=config.heldout_per_repo, seed=HELDOUT_SEED)
    train_tasks, _ = load_tasks(train_file)
    heldout, _ = load_tasks(heldout_file)
    seen = {patch_hash(t.patch) for t in train_tasks}
    heldout = [t for t in heldout if patch_hash(t.patch) not in seen]  # never trained on
    if not train_tasks:
        raise UsageError("no training tasks could be synthesised from the repositories")
    return train_tasks, heldout


def _policy(config: TrainConfig, run: Path, grpo, state: dict | None):
    """The policy: the base model with LoRA adapters (restored from a checkpoint when resuming),
    wrapped as FrogNano's torch backend so episodes use the serving decode loop."""
    from ..runtime.torch import TorchModel
    from .torch_grpo import lora_model

    if config.base_model == "tiny":
        base = run / "base"
        if not (base / "config.json").exists():
            from ..runtime.tiny import build_tiny

            build_tiny(base, "torch", seed=config.seed, **config.tiny)
        path = str(base)
    else:
        path = config.base_model.split(":", 1)[1]
    try:
        loaded = TorchModel.load(path, cache_prompt=True)
    except FrogNanoError as exc:
        raise UsageError(f"cannot load the base model {config.base_model}: {exc}") from None
    if state is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(loaded.model, str(state["folder"] / "adapter"), is_trainable=True)
    else:
        model = lora_model(loaded.model, grpo)
    return TorchModel(f"policy:{Path(path).name}", model, loaded.tokenizer, path=path)


class _Envs:
    """One environment per repository tree, all with the policy as their model."""

    def __init__(self, config: TrainConfig, policy) -> None:
        from ..config import Settings

        self.settings = Settings(lanes=1, temperature=config.temperature, max_turns=config.max_turns,
                                 max_new_tokens=config.max_new_tokens, constrain=True, max_candidates=15)
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
    return [rollout(env, state, group=index, seed=seed, tools=tuple(config.tools), search=search) for seed in seeds]


class RolloutWorker:
    """A rollout worker in another process or on a Ray actor (``synthesis.executor.Worker``): its
    own copy of the policy and its own environments.  Each request names the checkpoint whose
    adapter the rollouts must use (the learner's weights after the previous step); the worker
    loads it when it has another one, so every rollout of a step is on-policy."""

    def __init__(self, config: dict, run: str) -> None:
        self.config = TrainConfig.from_dict(config)
        self.run_dir = Path(run)
        self.policy = _policy(self.config, self.run_dir, self.config.grpo_config(), None)
        self.policy.model.eval()
        self.envs = _Envs(self.config, self.policy)
        self.loaded = ""

    def run(self, item: tuple[str, EvalTask, int, list[int]]):
        folder, task, index, seeds = item
        if folder != self.loaded:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.policy.model, load_file(str(Path(folder) / "adapter" / "adapter_model.safetensors")))
            self.loaded = folder
        return _group(self.envs, task, index, self.config, seeds)

    def close(self) -> None:
        self.envs.close()


class _Rollouts:
    """Where a step's groups run: here, or on ``workers`` processes / Ray actors."""

    def __init__(self, config: TrainConfig, run: Path, envs: _Envs) -> None:
        self.envs = envs
        self.config = config
        self.pool = None
        self._stack = contextlib.ExitStack()
        if config.workers > 1 or config.ray is not None:
            from ..synthesis.executor import LocalPool, RayPool, ray_cluster

            if config.ray is not None:
                self._stack.enter_context(ray_cluster(config.ray, num_cpus=max(2, config.workers)))
            kind = RayPool if config.ray is not None else LocalPool
            self.pool = kind(RolloutWorker, (config.to_dict(), str(run)), config.workers)

    def groups(self, folder: Path, requests: list[tuple[EvalTask, int, list[int]]]) -> list:
        if self.pool is None:
            return [_group(self.envs, task, index, self.config, seeds) for task, index, seeds in requests]
        return [result for _, result in self.pool.map([(str(folder), *r) for r in requests])]

    def close(self) -> None:
        try:
            if self.pool is not None:
                self.pool.close()
        finally:
            self._stack.close()


def _step(step, config, grpo, rollouts, folder, pool, sampler, rng, policy, optimizer, grpo_step) -> dict:
    """One step: rounds of groups (the sampler's families, then DAPO refills of the groups
    whose rewards were all equal), then one GRPO update."""
    from ..synthesis.frontier import Family
    from .grpo import all_equal

    samples, outcomes = [], []
    groups = zero = refills = errors = 0
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
                if r.status != "error":
                    sampler.update(Family.from_key(family), r.resolved)
                    outcomes.append(r.resolved)
                else:
                    errors += 1
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
    policy.model.train()
    stats = grpo_step(policy.model, optimizer, samples, grpo) if samples else {"stepped": 0.0}
    policy.model.eval()
    rewards = [s.reward for s in samples if not s.error]
    return {"step": step, "groups": groups, "zero_variance_groups": zero, "refills": refills,
            "zero_variance_fraction": zero / groups if groups else 0.0, "errors": errors,
            "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "resolved_rate": sum(outcomes) / len(outcomes) if outcomes else 0.0,
            **{k: v for k, v in stats.items() if isinstance(v, (int, float))}}


def _evaluate(envs: _Envs, heldout: list[EvalTask], config: TrainConfig) -> dict:
    """The held-out resolve rate: one greedy episode per task through the serving harness."""
    from dataclasses import replace

    from ..repair.agent import EpisodeStatus
    from .metrics import wilson
    from .rollout import candidates_for

    resolved = total = 0
    try:
        for task in heldout:
            try:
                env = envs.get(task)
                env.engine.settings = replace(envs.settings, temperature=0.0)
                state = env.reset(task)
                search = candidates_for(env, state)
                episode, _ = env.engine.model_episode(state.diagnosis, env.engine.verifier(state.diagnosis), search,
                                                      0, record=False, seed=0, hint=task.hint,
                                                      tools=tuple(config.tools))
                if episode.status == EpisodeStatus.MODEL_ERROR:
                    continue
                total += 1
                resolved += env.reward(state, episode.patch).resolved
            except TaskError as exc:
                log.warning("held-out task %s skipped: %s", task.instance_id, exc)
    finally:
        envs.sampling()
    low, high = wilson(resolved, total)
    return {"tasks": total, "resolved": resolved, "resolve_rate": resolved / total if total else 0.0,
            "ci": [round(low, 4), round(high, 4)]}


def _finish(config: TrainConfig, run: Path, policy, progress: Progress) -> tuple[Path, Path | None]:
    """Merge the adapter into the base weights (``RUN/final``) and export it."""
    progress.phase("merging and exporting")
    final = run / "final"
    tmp = run / ".final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    merged = policy.model.merge_and_unload()
    merged.save_pretrained(tmp, safe_serialization=True)
    policy.tokenizer.save_pretrained(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    export = None
    if config.export == "mlx-4bit":
        try:
            import mlx_lm  # noqa: F401
        except ImportError:
            log.warning("mlx is not installed: the mlx-4bit export is skipped")
        else:
            from ..runtime.export import export as do_export

            out = run / "final-mlx-4bit"
            shutil.rmtree(out, ignore_errors=True)
            export = do_export(final, "mlx-4bit", out).path
    return final, export
