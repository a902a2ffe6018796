"""A cheap check that a model SPEC can be used, before minutes of tests and search.

Loading weights costs seconds and most fixes never need them, so faces load a model lazily
(``lazy.LazyModel``).  But a typo in a model folder or a server that is not running should be
said at once, not after the search has run: ``check_spec`` looks without loading — the folder
and its ``config.json`` for in-process backends, one short ``GET /models`` for an endpoint, the
file for a replay — and raises the same one-line ``ModelError`` the load would.
"""

from __future__ import annotations

from pathlib import Path

from .base import ModelError, parse_spec


def check_spec(spec: str, *, timeout: float = 3.0) -> None:
    """Raise a one-line ``FrogNanoError`` when ``spec`` cannot work; return quietly otherwise.

    Nothing is downloaded and no backend library is imported (offline by default).
    """
    kind, rest = parse_spec(spec)
    if kind in ("mlx", "torch"):
        from .local import resolve_model_path

        resolve_model_path(rest, kind, convert=False)  # a GGUF's conversion waits for the load
    elif kind == "replay":
        file = Path(rest).expanduser()
        if not file.is_file():
            raise ModelError(f"replay:{rest}: no such file")
    else:
        from .http import OpenAIModel

        # No retries: a refused connection now is what the user needs to hear about.
        OpenAIModel.from_spec(rest, timeout=timeout, retries=0).check_model()
