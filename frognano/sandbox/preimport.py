"""Which modules a warm test server may import ahead of time: the project's dependencies only.

The project's own modules must never be pre-imported (a forked child would then run stale code),
so every absolute import found in the project's sources is kept unless its top-level name is one
the project itself provides.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

# Importing these has side effects (a browser, a printout) or means nothing in a server.
_NEVER = frozenset({"antigravity", "this", "__main__", "__future__", "idlelib", "tkinter", "turtle"})


def project_top_names(files: Iterable[str], root: Path) -> set[str]:
    """Top-level module names the project provides (flat and src layouts, namespace packages)."""
    names: set[str] = set()
    for rel in files:
        parts = rel.split("/")
        if parts[0] == "src" and len(parts) > 1:
            parts = parts[1:]
        top = parts[0]
        names.add(top[:-3] if top.endswith(".py") else top)
    if (root / "src").is_dir():
        names.update(p.name for p in (root / "src").iterdir() if p.is_dir())
    return names


def _imports(source: str) -> Iterable[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def third_party_modules(root: Path, files: Iterable[str]) -> list[str]:
    """Absolute imports in the project's Python files that do not name the project itself."""
    files = list(files)
    own = project_top_names(files, root)
    found: set[str] = set()
    for rel in files:
        if not rel.endswith(".py"):
            continue
        try:
            source = (root / rel).read_text(encoding="utf-8")
            names = list(_imports(source))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue  # reported elsewhere; a server can do without this file's imports
        for name in names:
            top = name.split(".")[0]
            if top in own or top in _NEVER or top.startswith(("test_", "conftest")):
                continue
            found.add(name)
    return sorted(found)
