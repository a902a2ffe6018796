"""TensorBoard scalars of a run's metric rows, when TensorBoard is installed.

``metrics.jsonl`` is the run's record; this mirrors every numeric field of its rows into
``RUN/tensorboard`` so that ``tensorboard --logdir RUN`` plots reward, zero-variance fraction,
loss, the frontier's per-family estimates and the held-out rate live.  The writer is torch's
``SummaryWriter`` (it needs the ``tensorboard`` package; ``pip install 'frognano[train]'``
brings both) or ``tensorboardX`` where only that is installed (an MLX-only Mac); with neither,
nothing is written and one line says how to get it.

Resuming redoes the steps after the last checkpoint, so their events are purged
(``purge_step``): the plots show each step once, as ``metrics.jsonl`` does.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

__all__ = ["Board", "scalars"]

log = logging.getLogger(__name__)


def _writer_class() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package too

        return SummaryWriter
    except ImportError:
        pass
    try:
        from tensorboardX import SummaryWriter  # type: ignore[no-redef]

        return SummaryWriter
    except ImportError:
        return None


def scalars(row: dict, prefix: str = "") -> dict[str, float]:
    """The numeric fields of a metrics row as TensorBoard tags: ``train/loss``,
    ``eval/resolve_rate``, ``frontier/<family>``, ``ends/<status>``; ``step`` and
    ``seconds`` are the axes, not scalars, and ``paths`` (a step's commonest call sequences,
    different ones from step to step) is no series: it stays in ``metrics.jsonl``."""
    out: dict[str, float] = {}
    for key, value in row.items():
        if not prefix and key in ("step", "seconds", "paths"):
            continue
        if isinstance(value, dict):
            out.update(scalars(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"{prefix or 'train/'}{key}"] = float(value)
    return out


class Board:
    """``add(row)`` per metrics row; ``close()`` at the end.  A no-op without TensorBoard."""

    def __init__(self, run: Path, *, resume_after: int | None = None) -> None:
        self.writer = None
        cls = _writer_class()
        if cls is None:
            log.info("TensorBoard is not installed: metrics go to metrics.jsonl only "
                     "(pip install tensorboard to plot them live)")
            return
        kwargs = {"purge_step": resume_after + 1} if resume_after is not None else {}
        self.writer = cls(log_dir=str(Path(run) / "tensorboard"), **kwargs)

    def add(self, row: dict) -> None:
        if self.writer is None:
            return
        step = int(row.get("step", 0))
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a live view, and nothing lost to a kill

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
