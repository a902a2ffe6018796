"""``frognano eval``'s engine: run a solver on every task, score it, append one row per episode.

A solver is the operator search alone (``search``), a model alone (``model``) or both in the
order ``frognano fix`` uses (``both``: the search, and model episodes when it finds nothing).
Per task the environment is reset once (``env.RepoEnv``); the search, being deterministic, runs
once per task; each model episode samples with its own seed.  Every episode's final patch is
scored by the task's tests (``RepoEnv.reward``), whatever the solver thought of it.

Rows go to ``--out`` as they finish (one JSON line each, flushed and synced), so an
interrupted run resumes: episodes already scored are not run again, errored ones are retried,
and ``metrics.latest`` keeps the last row of each (task, episode).  A results file written by
another solver, model or seed is refused rather than mixed.

``workers`` > 1 evaluates tasks in that many spawned processes, each with its own environments
(shadow copies and warm runners), and ``ray`` on that many Ray actors: the pools of
``synthesis.executor`` that ``synth`` validates on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import Settings, coerce
from ..errors import FrogNanoError, UsageError
from ..progress import Progress, Silent
from .env import (
    InfraError,
    RepoEnv,
    RewardConfig,
    TaskError,
    TaskState,
    find_repo,
    python_for,
    tree_for,
)
from .tasks import EvalTask

__all__ = ["EvalPlan", "Evaluator", "ResultsFile", "evaluate"]

log = logging.getLogger(__name__)

SOLVERS = ("search", "model", "both")
#: The most lanes ``Settings`` accepts (its bound in ``config._BOUNDS``): a many-core machine's
#: share per worker is capped there rather than refused.
MAX_LANES = 8


@dataclass(frozen=True)
class EvalPlan:
    """One evaluation's settings; picklable (it travels to worker processes and Ray actors)."""

    solver: str = "search"  # search | model | both
    model: str | None = None  # model SPEC for model episodes
    episodes: int = 1  # attempts per task
    seed: int = 0  # episode i samples with seed + i
    repos: tuple[str, ...] = ()  # folders holding (or being) the tasks' repositories
    settings: dict[str, Any] = field(default_factory=dict)  # Settings fields (timeout, max_turns, ...)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trees: str = ""  # where git bases are exported (default: the cache's trees/)

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise UsageError(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        if self.solver != "search" and not self.model:
            raise UsageError(f"the {self.solver} solver needs a model (give --model SPEC)")
        if self.episodes < 1:
            raise UsageError(f"--episodes must be at least 1, got {self.episodes}")
        if self.solver == "search" and self.episodes > 1:
            raise UsageError("the operator search is deterministic: with --search-only, --episodes "
                             "must be 1 (several episodes measure a sampling model)")
        for name, value in self.settings.items():
            coerce(name, value)  # a bad value is named now, not in a worker

    @property
    def signature(self) -> dict[str, Any]:
        """What makes two runs' rows comparable (a results file holds one run's rows)."""
        return {"solver": self.solver, "model": self.model, "seed": self.seed}

    def make_settings(self, workers: int = 1) -> Settings:
        values = {"model": self.model, **{k: coerce(k, v) for k, v in self.settings.items()}}
        if "lanes" not in self.settings:  # the cores are shared between the workers
            values["lanes"] = min(MAX_LANES, max(1, (os.cpu_count() or 1) // max(1, workers)))
        return Settings(**values)


class ResultsFile:
    """The ``--out`` file: one JSON row per episode, appended; read back to resume."""

    def __init__(self, path: Path, plan: EvalPlan) -> None:
        self.path = Path(path)
        self.rows: list[dict] = []
        if self.path.exists():
            self.rows = self._read(plan)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def _read(self, plan: EvalPlan) -> list[dict]:
        rows = []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        if lines[-1].strip():  # unterminated: a write cut off by an interruption, or whole
            try:
                json.loads(lines[-1])
                tail = b"\n"  # whole: finish its line
            except ValueError:
                log.warning("%s: removing a half-written last line (that episode runs again)", self.path)
                data, tail = data[: len(data) - len(lines[-1])], b""
                self.path.write_bytes(data)
                lines = lines[:-1]
            if tail:
                with open(self.path, "ab") as fh:
                    fh.write(tail)
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UsageError(f"{self.path}:{n}: not a results row (not JSON)") from None
            if not isinstance(row, dict) or "instance_id" not in row or "episode" not in row:
                raise UsageError(f"{self.path}:{n}: not a results row of frognano eval")
            if row.get("run") != plan.signature:
                raise UsageError(f"{self.path} holds rows of another run ({row.get('run')}), not "
                                 f"{plan.signature}; give another --out")
            rows.append(row)
        return rows

    def done(self) -> set[tuple[str, int]]:
        """(instance_id, episode) of every episode scored (errors excepted: they run again)."""
        latest: dict[tuple[str, int], str] = {}
        for row in self.rows:
            latest[(row["instance_id"], row["episode"])] = row.get("status", "error")
        return {key for key, status in latest.items() if status != "error"}

    def append(self, row: dict) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.rows.append(row)

    def close(self) -> None:
        self._fh.close()


class Evaluator:
    """One process's environments (one per repository tree) and the solver run in them."""

    def __init__(self, plan: EvalPlan, workers: int = 1, progress: Progress | None = None) -> None:
        self.plan = plan
        self.settings = plan.make_settings(workers)
        self.workers = workers
        self.progress = progress or Silent()
        self._envs: dict[Path, RepoEnv] = {}
        self._model = None

    def close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs = {}
        if self._model is not None:
            self._model.close()
            self._model = None

    def _env(self, repo: Path, tree: Path) -> RepoEnv:
        if tree not in self._envs:
            if self.plan.model and self._model is None:
                from ..runtime.lazy import LazyModel

                # One model for every env.  Its torch threads are the cores that the test lanes of
                # every worker leave (as ``fix`` sizes them): torch's default, a thread per core,
                # waits on the tests at every kernel (SmolLM2, 2 loaded cores: an episode of 2
                # turns took 55 s on 2 threads, 12 s on 1).
                self._model = LazyModel(self.plan.model, self.progress, lanes=self.settings.lanes * self.workers)
            self._envs[tree] = RepoEnv(tree, python_for(repo, tree, self.settings), model=self._model,
                                       progress=self.progress)
        return self._envs[tree]

    def run_task(self, task: EvalTask, episodes: Iterable[int],
                 cancel: threading.Event | None = None) -> list[dict]:
        """One row per episode of ``task`` (errors included, as rows)."""
        episodes = list(episodes)
        from ..paths import cache_root

        try:
            repo = find_repo(task, [Path(r) for r in self.plan.repos])
            tree = tree_for(task, repo, Path(self.plan.trees) if self.plan.trees else cache_root() / "trees")
            env = self._env(repo, tree)
            state = env.reset(task, cancel)
        except FrogNanoError as exc:
            return [self._error(task, i, exc) for i in episodes]
        except Exception as exc:
            log.exception("setting up %s failed", task.instance_id)
            return [self._error(task, i, InfraError(f"{type(exc).__name__}: {exc}")) for i in episodes]
        verifier = env.engine.verifier(state.diagnosis)
        search, search_seconds = None, 0.0
        rows = []
        if self.plan.solver in ("search", "both"):
            started = time.monotonic()
            try:
                search = env.engine.search(state.diagnosis, verifier, cancel)
            except Exception as exc:
                log.exception("the search failed on %s", task.instance_id)
                return [self._error(task, i, InfraError(f"the search failed: {exc}")) for i in episodes]
            search_seconds = time.monotonic() - started
        for i in episodes:
            try:
                rows.append(self._episode(env, state, verifier, search, search_seconds, i, cancel))
            except FrogNanoError as exc:
                rows.append(self._error(task, i, exc))
            except Exception as exc:
                log.exception("episode %d of %s failed", i, task.instance_id)
                rows.append(self._error(task, i, InfraError(f"{type(exc).__name__}: {exc}")))
        return rows

    def _episode(self, env: RepoEnv, state: TaskState, verifier, search, search_seconds: float, index: int,
                 cancel: threading.Event | None) -> dict:
        from ..repair.search import SearchResult

        task = state.task
        info: dict[str, Any] = {"turns": 0, "tokens_in": 0, "tokens_out": 0, "tool_calls": 0,
                                "invalid_calls": 0, "identical_retries": 0, "met_error": False,
                                "ever_passed": False, "seconds": search_seconds, "source": None,
                                "episode_status": None}
        patch = None
        if search is not None and search.fix is not None:
            patch = search.fix.patch
            info.update(source="search", ever_passed=True)
        elif self.plan.solver != "search":
            episode, toolbox = env.engine.model_episode(
                state.diagnosis, verifier, search or SearchResult(), index, cancel,
                seed=self.plan.seed + index, hint=task.hint,
                meta={"instance_id": task.instance_id, "episode": index})
            if episode.status == "model_error":
                raise InfraError(episode.error or "the model failed")
            if episode.status == "cancelled":
                raise InfraError("cancelled")
            seen: set[str] = set()
            retries = 0
            for turn in episode.turns:
                if turn.call is None:
                    continue
                key = json.dumps(turn.call, sort_keys=True)
                retries += key in seen
                seen.add(key)
            patch = episode.patch
            info.update(turns=len(episode.turns), tokens_in=episode.tokens_in, tokens_out=episode.tokens_out,
                        tool_calls=len(episode.turns), invalid_calls=episode.malformed,
                        identical_retries=retries, met_error=bool(toolbox.errors or toolbox.failed_runs),
                        ever_passed=toolbox.all_passed, seconds=search_seconds + episode.seconds,
                        source="model" if patch is not None else None, episode_status=str(episode.status),
                        record=str(episode.record) if episode.record else None)
        reward = env.reward(state, patch, config=self.plan.reward, malformed=info["invalid_calls"])
        return {
            **self._head(task, index), "status": "resolved" if reward.resolved else "unresolved",
            "reward": reward.value, **info, "has_patch": patch is not None,
            "fixed": reward.fixed, "still_failing": reward.still_failing, "regressions": reward.regressions,
            "refused": reward.refused, "patch": patch.diff() if patch is not None else None,
        }

    def _head(self, task: EvalTask, index: int) -> dict:
        return {"instance_id": task.instance_id, "episode": index, "family": task.family,
                "repo": task.repo, "run": self.plan.signature}

    def _error(self, task: EvalTask, index: int, exc: BaseException) -> dict:
        kind = "task" if isinstance(exc, TaskError) else "infrastructure"
        return {**self._head(task, index), "status": "error", "error": str(exc), "error_kind": kind,
                "reward": None, "turns": 0, "tokens_in": 0, "tokens_out": 0, "seconds": 0.0,
                "tool_calls": 0, "invalid_calls": 0, "identical_retries": 0, "met_error": False,
                "ever_passed": False, "has_patch": False, "regressions": []}


# -- where tasks run: this process, or the pools synthesis validates on --------------------------
class _TaskWorker:
    """A pool worker (``synthesis.executor.Worker``): one Evaluator, an item is (task, episodes)."""

    def __init__(self, plan: EvalPlan, workers: int) -> None:
        self.evaluator = Evaluator(plan, workers)

    def run(self, item: tuple[EvalTask, list[int]]) -> list[dict]:
        return self.evaluator.run_task(*item)

    def close(self) -> None:
        self.evaluator.close()


def _here(plan: EvalPlan, todo, cancel) -> Iterator[list[dict]]:
    evaluator = Evaluator(plan, 1)
    try:
        for task, episodes in todo:
            if cancel is not None and cancel.is_set():
                return
            yield evaluator.run_task(task, episodes, cancel)
    finally:
        evaluator.close()


def _pooled(plan: EvalPlan, todo, workers: int, ray: str | None) -> Iterator[list[dict]]:
    from contextlib import nullcontext

    from ..synthesis.executor import LocalPool, RayPool, ray_cluster

    cluster = ray_cluster(ray, num_cpus=max(2, workers)) if ray is not None else nullcontext()
    with cluster:
        pool = (RayPool if ray is not None else LocalPool)(_TaskWorker, (plan, workers), workers)
        results = pool.map(todo)
        try:
            for _, rows in results:
                yield rows
        finally:
            results.close()
            pool.close()


@dataclass
class EvalRun:
    rows: list[dict]  # every row of the results (earlier runs' included), latest per episode
    ran: int = 0  # episodes run now
    skipped: int = 0  # episodes found done in the results file
    seconds: float = 0.0


def evaluate(tasks: list[EvalTask], plan: EvalPlan, *, out: Path | None = None, workers: int = 1,
             ray: str | None = None, progress: Progress | None = None,
             cancel: threading.Event | None = None) -> EvalRun:
    """Run ``plan`` on ``tasks``; rows are appended to ``out`` (resumed when it exists)."""
    from .metrics import latest

    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    progress = progress or Silent()
    started = time.monotonic()
    results = ResultsFile(out, plan) if out is not None else None
    done = results.done() if results is not None else set()
    todo = []
    skipped = 0
    for task in tasks:
        wanted = [i for i in range(plan.episodes) if (task.instance_id, i) not in done]
        skipped += plan.episodes - len(wanted)
        if wanted:
            todo.append((task, wanted))
    rows: list[dict] = list(results.rows) if results is not None else []
    ran = 0
    total = sum(len(e) for _, e in todo)
    progress.phase("evaluating", total)
    progress.update(0, total, _note(rows))
    source = _pooled(plan, todo, workers, ray) if ray is not None or workers > 1 else _here(plan, todo, cancel)
    try:
        for task_rows in source:
            for row in task_rows:
                if results is not None:
                    results.append(row)
                rows.append(row)
                ran += 1
            progress.update(ran, total, _note(rows))
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
        if results is not None:
            results.close()
    return EvalRun(latest(rows), ran, skipped, time.monotonic() - started)


def _note(rows: list[dict]) -> str:
    """The running resolve rate, for the progress bar."""
    from .metrics import latest

    current = latest(rows)
    scored = [r for r in current if r.get("status") in ("resolved", "unresolved")]
    if not scored:
        return ""
    resolved = sum(r["status"] == "resolved" for r in scored)
    errors = sum(r.get("status") == "error" for r in current)
    return f"resolved {resolved}/{len(scored)} ({resolved / len(scored):.0%})" + (f", {errors} errors" if errors else "")
