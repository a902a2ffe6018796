"""What ``train --resume`` reads from a run directory, checked before anything trusts it.

A run directory is input like any other (docs/ARCHITECTURE.md, invariant 5): a user may have edited, copied or
half-deleted it, and anyone who can write it can point it elsewhere.  So before a model loads,
every file the resume reads is checked, and the first problem ends the command with one line
naming the file and what is wrong (``UsageError``, exit 2); nothing in the run is changed by a
refused resume.

* ``latest`` is a regular file (not a symlink) naming ``step-NNNNNN``; that checkpoint is a real
  folder (not a symlink) inside ``RUN/checkpoints`` once resolved.  So the pointer can never
  make a resume read state, weights or pickles from outside the run.
* ``state.json`` is an object: ``step`` (the folder's own number), ``pool`` (``rounds`` >= 1,
  ``cursor``: family -> count) and ``rng`` (a state ``random.Random`` accepts).
* ``sampler.json`` is a JSON object (the sampler checks its kind and fields when it loads it).
* the learner's files (``LEARNER_FILES``): present, the safetensors files whole (their header
  read and checked against the file's size, without loading a framework), ``rng.json`` an
  object with the backend's generator state.  What only the framework can tell (an optimiser
  pickle cut short, an adapter whose shapes do not fit the base model) is the learner's
  ``restore``, with the same kind of message.
"""

from __future__ import annotations

import json
import random
import re
import struct
from pathlib import Path
from typing import Any

from ..errors import UsageError

__all__ = ["CHECKPOINT_NAME", "LEARNER_FILES", "check_safetensors", "checkpoint_folder", "read_json_object",
           "read_state"]

CHECKPOINT_NAME = re.compile(r"step-(\d{6})")

#: Per backend: (adapter weights, optimiser state) as the learner's ``save`` writes them.
LEARNER_FILES = {
    "torch": ("adapter/adapter_model.safetensors", "optimizer.pt"),
    "mlx": ("adapter/adapters.safetensors", "optimizer.safetensors"),
}

_MAX_HEADER = 100 * 2**20  # a safetensors header longer than this is not one (the format caps it too)


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """``path``'s JSON object; UsageError naming the file when it is missing, unreadable, not
    JSON, or not an object."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: missing ({what}); the run cannot be resumed from it") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read {what} ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path}: {what} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: {what} must be a JSON object, not {type(data).__name__}")
    return data


def checkpoint_folder(run: Path) -> Path | None:
    """The checkpoint ``RUN/latest`` names (None: no checkpoint yet), only ever inside the run."""
    latest, checkpoints = run / "latest", run / "checkpoints"
    if latest.is_symlink():
        raise UsageError(f"{latest} is a symlink; the pointer to the last checkpoint must be a file of the run")
    if not latest.exists():
        return None
    try:
        name = latest.read_bytes().decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{latest}: cannot read the pointer to the last checkpoint "
                         f"({getattr(exc, 'strerror', None) or 'not ASCII text'})") from None
    if not CHECKPOINT_NAME.fullmatch(name):
        raise UsageError(f"{latest} must name a checkpoint folder step-NNNNNN of {checkpoints}, "
                         f"not {name[:80]!r}")
    folder = checkpoints / name
    if folder.is_symlink():
        raise UsageError(f"{folder} is a symlink; a checkpoint must be a folder inside the run")
    if not folder.is_dir():
        raise UsageError(f"{latest} names {name}, but {folder} does not exist")
    # No symlink in the name itself; one in RUN/checkpoints would still lead out.
    if folder.resolve().parent != checkpoints.resolve() or checkpoints.is_symlink():
        raise UsageError(f"{folder} resolves outside {checkpoints}; a checkpoint must be inside the run")
    return folder


def read_state(run: Path, backend: str) -> dict[str, Any] | None:
    """The checked state of the checkpoint ``latest`` names (None: a run with no checkpoint):
    ``state.json``'s fields, ``folder`` and ``sampler`` (``sampler.json``'s object)."""
    folder = checkpoint_folder(run)
    if folder is None:
        return None
    path = folder / "state.json"
    state = read_json_object(path, "the checkpoint's state")
    _check_state(path, state, int(folder.name[len("step-"):]))
    sampler = read_json_object(folder / "sampler.json", "the task sampler's state")
    _check_learner_files(folder, backend, state)
    return {**state, "folder": folder, "sampler": sampler}


def _check_state(path: Path, state: dict[str, Any], step: int) -> None:
    def wrong(what: str) -> UsageError:
        return UsageError(f"{path}: {what}; the file is damaged or not this checkpoint's")

    missing = [k for k in ("step", "pool", "rng") if k not in state]
    if missing:
        raise wrong(f"missing {', '.join(missing)}")
    if not _is_int(state["step"]) or state["step"] != step:
        raise wrong(f"step is {state['step']!r}, but the folder is step {step}")
    pool = state["pool"]
    if not isinstance(pool, dict) or not _is_int(pool.get("rounds")) or pool["rounds"] < 1:
        raise wrong("pool must be an object with rounds >= 1")
    cursor = pool.get("cursor")
    if not isinstance(cursor, dict) or not all(isinstance(k, str) and _is_int(v) and v >= 0
                                               for k, v in cursor.items()):
        raise wrong("pool.cursor must map task families to counts")
    try:
        rng = state["rng"]
        random.Random().setstate((rng[0], tuple(rng[1]), rng[2]))
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        raise wrong("rng is not a random generator state") from None


def _check_learner_files(folder: Path, backend: str, state: dict[str, Any]) -> None:
    weights, optimizer = LEARNER_FILES.get(backend, LEARNER_FILES["torch"])
    check_safetensors(folder / weights, "the checkpoint's adapter")
    if not (folder / optimizer).is_file():
        raise UsageError(f"{folder / optimizer}: missing (the optimiser state); the run cannot be resumed from it")
    if backend == "mlx":
        check_safetensors(folder / optimizer, "the optimiser state")
    rng_path = folder / "rng.json"
    if not rng_path.exists() and backend == "torch" and "torch_rng" in state:
        return  # a checkpoint from before rng.json: torch's state is in state.json
    rng = read_json_object(rng_path, "the framework's random state").get(backend)
    width = 255 if backend == "torch" else 2**32 - 1
    if not isinstance(rng, list) or not rng or not all(_is_int(x) and 0 <= x <= width for x in rng):
        raise UsageError(f"{rng_path}: {backend!r} must be a list of the generator's state "
                         f"(integers 0..{width}); the file is damaged")


def check_safetensors(path: Path, what: str) -> None:
    """A whole safetensors file: the 8-byte header length, a JSON header whose tensors' byte
    ranges end exactly at the end of the file.  Cheap: only the header is read."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            header = fh.read(length) if length is not None and length <= min(_MAX_HEADER, size - 8) else None
    except FileNotFoundError:
        raise UsageError(f"{path}: missing ({what}); the run cannot be resumed from it") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    damaged = UsageError(f"{path}: {what} is damaged (cut short or not a safetensors file)")
    if header is None:
        raise damaged
    try:
        tensors = json.loads(header.decode("utf-8"))
        ends = [int(t["data_offsets"][1]) for k, t in tensors.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise damaged from None
    if 8 + len(header) + max(ends, default=0) != size:
        raise damaged


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
