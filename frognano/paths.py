"""Where FrogNano keeps its own files: a cache directory outside every project."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_root() -> Path:
    """``$FROGNANO_CACHE_DIR``, else ``$XDG_CACHE_HOME/frognano``, else ``~/.cache/frognano``."""
    explicit = os.environ.get("FROGNANO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "frognano"


def project_cache(project: Path) -> Path:
    """The cache folder of one project: its shadow copies, undo copies and episode records."""
    real = Path(os.path.realpath(project))
    digest = hashlib.sha1(str(real).encode()).hexdigest()[:12]
    return cache_root() / "projects" / f"{real.name or 'root'}-{digest}"
