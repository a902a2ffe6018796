"""``load_model``: a ``SPEC`` from the command line turned into a ``Model``.

``mlx:PATH_OR_ID``, ``torch:PATH_OR_ID``, ``openai:MODEL@BASE_URL`` or ``replay:EPISODE.json``
(a recorded episode, replayed).  The factory lives apart from the protocol (``base.py``) because
it knows every backend and every backend knows the protocol: in one module the two would import
each other.  Only the backend a spec names is imported, so ``import frognano`` and a fix by the
operator search alone never load mlx or torch.
"""

from __future__ import annotations

from typing import Any

from .base import Model, parse_spec


def load_model(spec: str, **options: Any) -> Model:
    """Load the model a ``SPEC`` names; only that backend's libraries are imported."""
    kind, rest = parse_spec(spec)
    if kind == "mlx":
        from .mlx import MLXModel

        return MLXModel.load(rest, **options)
    if kind == "torch":
        from .torch import TorchModel

        return TorchModel.load(rest, **options)
    if kind == "replay":
        from .replay import ReplayModel

        return ReplayModel.load(rest)
    from .http import OpenAIModel

    return OpenAIModel.from_spec(rest, **options)
