"""Data-parallel training on several processes: ``accelerate launch`` or ``torchrun``.

A launcher starts one process per GPU (or CPU worker) with ``WORLD_SIZE`` > 1, ``RANK`` and
``LOCAL_RANK`` in its environment; without them (``frognano train`` run directly) every helper
here is a no-op that never touches ``torch.distributed`` (nor imports torch), so a single-process
run is exactly what it was.

The variant (``loop.py`` and ``torch_grpo.py`` do it; this module only talks):

* every rank runs the same loop with the same seeds, so the sampler's draws, the task pool's
  draws, the rollout seeds and the DAPO refills agree without communication; the initial LoRA
  adapters are rank 0's (``broadcast_tensors``), whatever each device's generator drew;
* rollouts: group request i of a round runs on rank i % world; the groups are gathered
  (``gather_objects``) so every rank sees all of them, in the single-process order;
* the update: every rank assembles the same batch, computes the loss of its share of the
  episodes (episode j on rank j % world) divided by the *whole* batch's normaliser, so the sum
  over ranks is the single-process loss; the LoRA gradients are summed (``all_reduce``), and
  every rank clips and steps the same gradient: the weights stay identical without broadcast;
* rank 0 alone writes the run directory (config, metrics, checkpoints, the final model) and
  synthesises tasks, the others wait for it (``main_first``, ``on_main``); the held-out
  evaluation is sharded like the rollouts and its counts summed.

Limits: the processes share the run directory (one machine, or a shared file system); a round
of groups is spread over the ranks, so a step with fewer groups than processes leaves some
idle; ``workers``/``ray`` and the mlx backend are refused (``loop._check_distributed``).

Process groups: the gradients go through the default group (nccl on CUDA, gloo on CPU); objects
and waits go through a gloo group, so that a rank waiting while rank 0 synthesises or writes
holds no GPU collective.  Both wait up to ``TIMEOUT``: synthesis of a large repository on rank 0
can take long, and a launcher ends the whole job anyway when one process dies.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from typing import Any, Callable, Iterator, TypeVar

from ..errors import FrogNanoError

__all__ = ["MainFailed", "active", "all_reduce", "barrier", "broadcast", "broadcast_tensors", "close",
           "gather_objects", "init", "is_main", "local_rank", "main_first", "on_main", "rank", "world"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a rank waits for the others (rank 0's task synthesis, evaluation, checkpoint writes).
TIMEOUT = datetime.timedelta(hours=6)

_objects: Any = None  # the gloo group for objects and waits, once init() ran


class MainFailed(FrogNanoError):
    """Rank 0 failed at a step the other ranks waited for; rank 0 reports the error itself."""


def world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def active() -> bool:
    """Launched as one of several processes (accelerate launch, torchrun)."""
    return world() > 1


def is_main() -> bool:
    return rank() == 0


def init() -> None:
    """Join the launcher's process group (once; nothing when not ``active``)."""
    global _objects
    if not active() or _objects is not None:
        return
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(local_rank())
        dist.init_process_group("nccl" if cuda else "gloo", timeout=TIMEOUT)
    _objects = dist.new_group(backend="gloo", timeout=TIMEOUT) if dist.get_backend() != "gloo" else dist.group.WORLD
    log.info("distributed: rank %d of %d (local rank %d, %s)", rank(), world(), local_rank(), dist.get_backend())


def close() -> None:
    """Leave the process group (at the end of a run)."""
    global _objects
    if _objects is None:
        return
    import torch.distributed as dist

    _objects = None
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if active():
        init()
        import torch.distributed as dist

        dist.barrier(group=_objects)


def gather_objects(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` in a single process)."""
    if not active():
        return [obj]
    init()
    import torch.distributed as dist

    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj, group=_objects)
    return out


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not active():
        return obj
    init()
    import torch.distributed as dist

    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0, group=_objects)
    return box[0]


def all_reduce(tensors: list[Any]) -> None:
    """Sum each tensor over the ranks, in place (through the default group: nccl on CUDA).
    Flattened into one buffer per dtype and device: one collective instead of one per tensor."""
    if not active() or not tensors:
        return
    init()
    import torch
    import torch.distributed as dist

    by_kind: dict[tuple, list] = {}
    for t in tensors:
        by_kind.setdefault((t.dtype, t.device), []).append(t)
    for group in by_kind.values():
        flat = torch.cat([t.reshape(-1) for t in group])
        dist.all_reduce(flat)
        offset = 0
        for t in group:
            t.copy_(flat[offset: offset + t.numel()].view_as(t))
            offset += t.numel()


def broadcast_tensors(tensors: list[Any]) -> None:
    """Rank 0's values of ``tensors`` on every rank, in place (through the default group)."""
    if not active():
        return
    init()
    import torch.distributed as dist

    for t in tensors:
        dist.broadcast(t, src=0)


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (it writes files), then the other ranks run it (they read
    them).  When rank 0's block fails, the others raise ``MainFailed`` instead of running it."""
    if not active():
        yield
        return
    if not is_main():
        failed = broadcast(None)
        if failed is not None:
            raise MainFailed(f"rank 0 failed: {failed}")
        yield
        return
    try:
        yield
    except BaseException as exc:
        broadcast(f"{type(exc).__name__}: {exc}")
        raise
    broadcast(None)


def on_main(fn: Callable[[], T]) -> T:
    """``fn()`` on rank 0 only, its result on every rank (it must pickle); when it fails, the
    other ranks raise ``MainFailed``."""
    if not active():
        return fn()
    if is_main():
        try:
            result = fn()
        except BaseException as exc:
            broadcast((False, f"{type(exc).__name__}: {exc}"))
            raise
        broadcast((True, result))
        return result
    ok, result = broadcast(None)
    if not ok:
        raise MainFailed(f"rank 0 failed: {result}")
    return result
