"""Training repositories for the presets: the bundled examples, repaired.

Each bundled example ships with one bug (``examples/*/README.md``).  Synthesis needs green
suites, so the tiny preset copies each example into the run directory and repairs the copy with
FrogNano's own search (``Engine.fix``, then the verified fix written with ``repair.apply``); an
example that cannot be repaired is left out with a warning.  The examples come from a source
checkout (an installed wheel does not carry them): elsewhere, give ``--repos``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..errors import UsageError
from ..progress import Progress, Silent

__all__ = ["bundled_examples", "example_repos"]

log = logging.getLogger(__name__)


def bundled_examples() -> Path:
    folder = Path(__file__).resolve().parents[2] / "examples"
    if not folder.is_dir():
        raise UsageError("the tiny preset trains on the bundled examples, which come with a source checkout "
                         "of FrogNano; give --repos PATH... instead")
    return folder


def example_repos(dest: Path, progress: Progress | None = None) -> list[Path]:
    """Green copies of the bundled examples under ``dest`` (made once)."""
    from ..config import Settings
    from ..repair.apply import apply_patch
    from ..repair.engine import Engine
    from ..sandbox.workspace import Workspace

    progress = progress or Silent()
    repos = []
    for example in sorted(p for p in bundled_examples().iterdir() if (p / "pyproject.toml").exists()):
        copy = dest / example.name
        marker = copy / ".frognano-green"
        if not marker.exists():
            progress.phase(f"repairing the bundled example {example.name}")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(example, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
            with Workspace(copy) as ws, Engine(ws, Settings(lanes=1)) as engine:
                report = engine.fix()
                if report.status == "fixed" and report.fix is not None:
                    apply_patch(ws.root, report.fix.patch)
                elif report.status != "passing":
                    log.warning("%s: not repaired (%s); not used for training", example.name, report.message)
                    continue
            marker.write_text("repaired by frognano fix\n")
        repos.append(copy)
    if not repos:
        raise UsageError("none of the bundled examples could be repaired for training")
    return repos
