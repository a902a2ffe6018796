"""``make_learner``: the ``learner.Learner`` for a config's backend, torch or MLX.

Apart from ``learner.py`` because the two learners import that module's shared helpers
(``base_model_path``, ``publish``, ``export_final``); a factory there, importing them back,
would close a circle.  Each backend's framework is imported only when it is chosen.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .config import TrainConfig
    from .learner import Learner

__all__ = ["make_learner"]


def make_learner(config: TrainConfig, run: Path, state: dict | None = None) -> Learner:
    """The learner for ``config.backend``, with the base model of ``config.base_model`` (the tiny
    one built into ``run/base`` on first use), restored from ``state["folder"]`` when resuming."""
    if config.backend == "mlx":
        try:
            from .mlx_learner import MLXLearner
        except ImportError as exc:
            raise UsageError(f"backend mlx needs mlx and mlx-lm ({exc}): pip install 'frognano[mlx]'") from None
        learner: Learner = MLXLearner(config, Path(run))
    else:
        try:
            from .torch_learner import TorchLearner
        except ImportError as exc:
            raise UsageError(f"backend torch needs torch, transformers and peft ({exc}): "
                             "pip install 'frognano[torch]'") from None
        learner = TorchLearner(config, Path(run))
    if state is not None:
        learner.restore(Path(state["folder"]))
    return learner
