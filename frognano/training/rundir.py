"""The run directory of ``frognano train``: its config, metric rows, checkpoints, and a resume.

``RUN/config.json`` is the configuration the run was started with (a resume with another one is
refused, naming the fields that differ); ``RUN/metrics.jsonl`` one row per step, appended and
synced as it finishes (mirrored to TensorBoard, ``board.py``); ``RUN/checkpoints/step-NNNNNN``
the last two checkpoints: the learner's part (LoRA adapter, optimiser, the framework's RNG), the
sampler's state, and ``state.json`` (step, the pool's rounds and cursors, the loop's RNG).  A
checkpoint is written to a temporary folder, renamed, and published by rewriting the pointer file
``RUN/latest``, so a kill at any moment leaves the last complete one; ``--resume`` continues from
it exactly (``restore``), and metric rows of steps after it are dropped, so no step is counted
twice.  What a resume reads is checked first (``resume.py``).

On several processes (``distributed.py``) rank 0 alone writes the directory: ``start``, ``log``
and ``save`` run there, and the other ranks wait for it and take its result.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

from ..errors import UsageError
from . import distributed
from .config import TrainConfig
from .pool import TaskPool
from .resume import checkpoint_folder, read_json_object, read_state

__all__ = ["RunDir", "restore", "rng_state", "set_rng_state", "write_atomic"]

log = logging.getLogger(__name__)


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
        return distributed.on_main(lambda: self._start(config, resume))

    def _start(self, config: TrainConfig, resume: bool) -> dict | None:
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
        write_atomic(self.config, json.dumps(config.to_dict(), indent=1))
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
        write_atomic(self.metrics, "".join(line + "\n" for line in keep))

    def log(self, row: dict) -> None:
        """Append a step's metric row (synced: a kill right after it keeps it)."""
        distributed.on_main(lambda: self._append(row))

    def _append(self, row: dict) -> None:
        with open(self.metrics, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.board is not None:
            self.board.add(row)

    def save(self, step: int, learner, sampler, pool: TaskPool, rng: random.Random) -> None:
        """Checkpoint ``step`` and publish it (``latest``); the two newest are kept."""
        distributed.on_main(lambda: self._save(step, learner, sampler, pool, rng))

    def _save(self, step: int, learner, sampler, pool: TaskPool, rng: random.Random) -> None:
        folder = self.checkpoints / f"step-{step:06d}"
        tmp = self.checkpoints / f".step-{step:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        learner.save(tmp)  # adapter, optimiser, the framework's RNG
        sampler.save(tmp / "sampler.json")
        state = {"step": step, "pool": pool.state_dict(), "rng": rng_state(rng)}
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        write_atomic(self.latest, folder.name)  # the checkpoint exists only from here on
        for old in sorted(self.checkpoints.glob("step-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)


def restore(state: dict | None, sampler, pool: TaskPool, rng: random.Random) -> int:
    """The loop's state back from a checkpoint (``RunDir.start``'s ``state``; None: a fresh run):
    the sampler, the pool's rounds and cursors and the loop's RNG.  Returns the last step done
    (0 for a fresh run).  Called before the model loads, so a state that does not fit fails in a
    second; the learner restores its own part (``backends.make_learner``)."""
    if state is None:
        return 0
    path = state["folder"] / "sampler.json"
    try:
        sampler.load_state_dict(state["sampler"])
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise UsageError(f"{path}: not a task sampler state of this run ({type(exc).__name__}: {exc})") from None
    pool.load_state_dict(state["pool"])
    set_rng_state(rng, state["rng"])
    log.info("resuming %s after step %d", state["folder"].parent.parent, state["step"])
    return state["step"]


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def rng_state(rng: random.Random) -> list:
    """``rng``'s state as JSON can hold it."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def set_rng_state(rng: random.Random, state: list) -> None:
    rng.setstate((state[0], tuple(state[1]), state[2]))
