"""The training task pool: synthesised in rounds, round 0 before training, the rest by ``synth``
in the background while the loop trains.

On disk (``RUN/pool/``): one task file per round, ``round-NNN.jsonl``, written under a temporary
name and renamed, so a kill never leaves part of a round visible.  Round r asks ``synthesize``
for ``n`` new tasks per repository with seed ``seed + r`` (rounds are reproducible).  Its scratch
store (``.round-NNN.synth.jsonl``, where a killed round resumes) starts with the held-out tasks
and those of every earlier round: ``synthesize`` skips their bugs without running any test and
counts only new bugs toward ``n``, and whatever is in the scratch store at the end but was in it
before (same patch hash) is dropped, so the held-out tasks never enter the pool and no bug enters
it twice.  The background thread validates with one worker, so that on a two-core laptop it
takes a core at most and the rollouts keep the other.  It stops after ``rounds`` rounds, after a
round that adds nothing (the repositories are exhausted), at ``close()`` (the test run in flight
is killed), or at a failure, which is logged as a warning and never reaches the loop.

In memory (``TaskPool``): the tasks of the rounds taken so far, by family.  Each round's tasks of
a family are shuffled with ``random.Random(seed + r)`` and appended, and a draw takes the next one
by a per-family cursor, so the same rounds and cursors give the same draws.  The loop takes the
finished rounds only at step boundaries (``refresh``), and a checkpoint holds ``state_dict()``
(how many rounds were taken, the cursors): a resumed pool takes exactly those rounds again, and
the background thread goes on from the first round not on disk.  The sampler's families are
round 0's (fixed when training starts): a later round's tasks join the draws of those families,
and a task of a family round 0 lacks is drawn only where the sampler names that family.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import UsageError
from .tasks import EvalTask, load_tasks

__all__ = ["SynthPool", "TaskPool"]

log = logging.getLogger(__name__)


class TaskPool:
    """Training tasks by family, drawn in a seeded order; the cursor is part of a checkpoint."""

    def __init__(self, tasks: Iterable[EvalTask] = (), seed: int = 0) -> None:
        self.by_family: dict[str, list[EvalTask]] = defaultdict(list)
        self.cursor: dict[str, int] = defaultdict(int)
        self.add(tasks, seed)

    def add(self, tasks: Iterable[EvalTask], seed: int) -> None:
        """Append a round of tasks: each family's share in their order, shuffled with ``seed``."""
        new: dict[str, list[EvalTask]] = defaultdict(list)
        for t in tasks:
            new[t.family].append(t)
        rng = random.Random(seed)
        for family in sorted(new):
            rng.shuffle(new[family])
            self.by_family[family].extend(new[family])

    @property
    def families(self) -> list[str]:
        return sorted(self.by_family)

    def __len__(self) -> int:
        return sum(len(tasks) for tasks in self.by_family.values())

    def state_dict(self) -> dict[str, Any]:
        return {"cursor": dict(self.cursor)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cursor = defaultdict(int, {k: int(v) for k, v in state["cursor"].items()})

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


def round_path(folder: Path, r: int) -> Path:
    return Path(folder) / f"round-{r:03d}.jsonl"


class SynthPool(TaskPool):
    """The pool of a run directory (module docstring).  Creating it synthesises round 0 unless it
    is on disk (UsageError when it holds no task); ``start`` starts the background rounds."""

    def __init__(self, folder: Path, repos: list[Path], heldout: Path, *, n: int, seed: int,
                 rounds: int) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.repos = [Path(r) for r in repos]
        self.heldout = Path(heldout)  # the held-out task file: its bugs never enter the pool
        self.n = n
        self.seed = seed
        self.rounds = rounds  # background rounds (1..rounds); 0: none
        self.taken = 0  # rounds whose tasks are in the pool (0..taken-1)
        self.error: BaseException | None = None  # what ended the background synthesis, if it failed
        self._refused: dict[str, str] = {}  # repo -> why synthesis cannot use it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        if not round_path(self.folder, 0).exists():
            if not self._synth_round(0):
                why = "; ".join(f"{r}: {why}" for r, why in self._refused.items())
                raise UsageError("no training tasks could be synthesised from the repositories"
                                 + (f" ({why})" if why else ""))
        self._take(0)

    # -- what the loop sees ----------------------------------------------------------------------
    def refresh(self) -> int:
        """Take the rounds finished since the last call, in order; the number of tasks added."""
        before = len(self)
        while round_path(self.folder, self.taken).exists():
            self._take(self.taken)
        if len(self) > before:
            log.info("task pool: %d new task(s) from the background synthesis, %d in all", len(self) - before,
                     len(self))
        return len(self) - before

    def state_dict(self) -> dict[str, Any]:
        return {"rounds": self.taken, **super().state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Exactly the rounds and cursors of ``state`` (a checkpoint's): the same draws follow."""
        self.by_family.clear()
        self.taken = 0
        for r in range(int(state["rounds"])):
            if not round_path(self.folder, r).exists():
                raise UsageError(f"{round_path(self.folder, r)} is missing: the checkpoint's task pool "
                                 "cannot be restored")
            self._take(r)
        super().load_state_dict(state)

    def _take(self, r: int) -> None:
        tasks, problems = load_tasks(round_path(self.folder, r))
        if problems:  # written by this module: a bad row is a bug or a damaged file
            raise UsageError(f"the task pool's round {r} is damaged: {problems[0]}")
        self.add(tasks, self.seed + r)
        self.taken = r + 1

    # -- the background synthesis -----------------------------------------------------------------
    def start(self) -> None:
        """Start synthesising the next rounds in a background thread (when ``rounds`` > 0)."""
        if self.rounds and self._thread is None:
            self._thread = threading.Thread(target=self._background, name="frognano-pool", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 60.0) -> None:
        """Stop the background synthesis (the test run in flight is killed) and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("task pool: the background synthesis did not stop within %g s", timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _background(self) -> None:
        from ..synthesis.synth import Cancelled

        r = 0
        while round_path(self.folder, r).exists():
            r += 1
        if r > 1 and not round_path(self.folder, r - 1).read_text(encoding="utf-8").strip():
            return  # a resumed run whose repositories were already exhausted
        while r <= self.rounds and not self._stop.is_set():
            try:
                added = self._synth_round(r)
            except Cancelled:
                return
            except Exception as exc:  # noqa: BLE001 - a background failure must never end the run
                if self._stop.is_set():
                    return  # what a cancelled synthesis left behind is no failure
                self.error = exc
                log.warning("task pool: background synthesis stopped, round %d failed: %s", r, exc)
                log.debug("round %d", r, exc_info=True)
                return
            if not added:
                log.info("task pool: round %d found no new bug; the repositories are exhausted", r)
                return
            r += 1

    def _synth_round(self, r: int) -> int:
        """Synthesise round ``r`` and publish its file; the number of new tasks."""
        from ..synthesis.store import TaskStore, patch_hash, read_tasks
        from ..synthesis.synth import synthesize

        started = time.monotonic()
        earlier = list(read_tasks(self.heldout)) if self.heldout.exists() else []
        for k in range(r):
            earlier.extend(read_tasks(round_path(self.folder, k)))
        known = {patch_hash(t.patch) for t in earlier}
        scratch = self.folder / f".round-{r:03d}.synth.jsonl"
        with TaskStore(scratch) as store:  # again after a kill: those already there are skipped
            store.extend(earlier)
        for repo in self.repos:
            name = str(repo.resolve())
            if name in self._refused:
                continue
            held = sum(1 for t in earlier if t.repo == name and t.n_bugs == 1)
            try:
                synthesize([repo], scratch, n=held + self.n, seed=self.seed + r, workers=1,
                           cancel=self._stop)
            except UsageError as exc:  # this repository cannot be used (its suite is not green, ...)
                self._refused[name] = str(exc)
                log.warning("task pool: round %d: %s is not used: %s", r, repo, exc)
        new = [t for t in read_tasks(scratch) if patch_hash(t.patch) not in known]
        if r == 0 and not new:
            return 0  # nothing published: round 0 must hold tasks
        path = round_path(self.folder, r)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("".join(t.to_json() + "\n" for t in new))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)  # the round exists only from here on
        scratch.unlink()
        log.info("task pool: round %d adds %d task(s) (%.0f s)", r, len(new), time.monotonic() - started)
        return len(new)
