"""The learner: the backend-specific half of the training loop, behind one small protocol.

``loop.py`` owns everything that does not depend on the framework (tasks, rollouts through the
serving harness, the sampler, metrics, the checkpoint's folder and pointer file: ``rundir.py``); a ``Learner``
owns the weights: the in-process policy the environments roll out with, one GRPO update, its
part of a checkpoint (adapter, optimiser, the framework's RNG), and the final merged model.

Two implementations, each importing its framework only inside its own module (docs/ARCHITECTURE.md §1):
``torch_learner.TorchLearner`` (transformers + peft, ``torch_grpo``) and
``mlx_learner.MLXLearner`` (mlx-lm, ``mlx_grpo``).  Both train the same GRPO variant from the
same ``GRPOConfig`` and ``Sample``s; ``backends.make_learner`` picks one.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..runtime.local import LocalModel
    from .config import TrainConfig
    from .grpo import GRPOConfig, Sample

__all__ = ["Learner", "base_model_path", "export_final", "publish"]

log = logging.getLogger(__name__)


class Learner(Protocol):
    """The weights being trained, and what the loop asks of them."""

    #: The in-process model (base + LoRA adapters) the environments roll out with: the same
    #: decode loop as serving, recording token ids, log-probabilities and grammar masks.
    policy: LocalModel

    def step(self, samples: list[Sample], grpo: GRPOConfig) -> dict[str, float]:
        """One GRPO update from a step's episodes (``grpo_step``'s statistics); the model is in
        training mode only for the update, back in inference mode for the next rollouts."""
        ...

    def save(self, folder: Path) -> None:
        """Write the adapter, the optimiser state and the framework's RNG state into the
        (temporary) checkpoint folder ``folder``."""
        ...

    def restore(self, folder: Path) -> None:
        """Continue exactly from the checkpoint folder ``folder`` (what ``save`` wrote)."""
        ...

    def load_adapter(self, folder: Path) -> None:
        """Put the adapter of checkpoint ``folder`` into the policy (a rollout worker following
        the learner); the optimiser is untouched."""
        ...

    def finish(self, run: Path, export: str) -> tuple[Path, Path | None]:
        """Merge the adapter into the base weights as ``run/final`` (a model folder that
        ``frognano fix --model BACKEND:run/final`` loads) and export it (``export``: "mlx-4bit"
        or "none"); returns (final folder, export folder or None)."""
        ...


def base_model_path(config: TrainConfig, run: Path) -> str:
    """Where the base model is: the tiny one (built into ``run/base`` in the backend's format
    on first use), a packaged one's GGUF (``runtime.packaged``), else the path or hub id of
    ``BACKEND:PATH_OR_ID``."""
    from ..runtime.packaged import PACKAGED, packaged_gguf

    if config.base_model in PACKAGED:  # a GGUF inside a pip package; the backend converts it once
        return str(packaged_gguf(config.base_model))
    if config.base_model != "tiny":
        return config.base_model.split(":", 1)[1]
    base = run / "base"
    if not (base / "config.json").exists():
        from ..runtime.tiny import build_tiny

        # On mlx, the dtype its device computes in natively: float16 is emulated by mlx's CPU
        # build, where the tiny-ci run's three steps took 29 s as float16 and 13 s as float32.
        dtype = None
        if config.backend == "mlx":
            from ..runtime.export import mlx_float_dtype

            dtype = mlx_float_dtype()
        build_tiny(base, config.backend, seed=config.seed, dtype=dtype, **config.tiny)
    return str(base)


def publish(tmp: Path, final: Path) -> Path:
    """Replace ``final`` with the finished folder ``tmp``."""
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def export_final(final: Path, run: Path, export: str) -> Path | None:
    """The ``export`` of the merged model ``final`` (``run/final-mlx-4bit``), or None: "none",
    or mlx-lm not installed (a torch run on a machine without mlx; logged)."""
    if export != "mlx-4bit":
        return None
    from ..runtime.mlx_cpu import use_fast_blas

    use_fast_blas()
    try:
        import mlx_lm  # noqa: F401
    except ImportError:
        log.warning("mlx is not installed: the mlx-4bit export is skipped")
        return None
    from ..runtime.export import export as do_export

    out = run / "final-mlx-4bit"
    shutil.rmtree(out, ignore_errors=True)
    return do_export(final, "mlx-4bit", out).path
