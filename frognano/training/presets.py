"""Repositories for the presets: the bundled examples, repaired; corrected real-bug projects.

Each bundled example ships with one bug (``examples/*/README.md``).  Synthesis needs green
suites, so the presets repair each example with FrogNano's own search (``Engine.fix``, then the
verified fix written with ``repair.apply``) once per content of the example, keep the repaired
tree in the cache (``trees/<example>-repaired-<hash>/``), and copy it into the run directory; an
example that cannot be repaired is left out with a warning.  The examples come from a source
checkout (an installed wheel does not carry them): elsewhere, give ``--repos``.

Held-out repositories (``heldout_repos``) may name ``realbugs:GLOB``: the projects of
``benchmarks/realbugs/`` whose folder matches GLOB, each with its ``correct/`` files laid over
``project/`` (a green suite), copied into the run directory.  They are other repositories than
the training ones, with other functions, so a held-out rate there measures what carries over.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ..errors import UsageError
from ..progress import Progress, Silent

__all__ = ["REALBUGS", "bundled_examples", "example_repos", "realbug_repos", "resolve_heldout"]

REALBUGS = "realbugs:"  # the prefix of a heldout_repos entry naming corrected benchmark projects

log = logging.getLogger(__name__)


def bundled_examples() -> Path:
    folder = Path(__file__).resolve().parents[2] / "examples"
    if not folder.is_dir():
        raise UsageError("the tiny preset trains on the bundled examples, which come with a source checkout "
                         "of FrogNano; give --repos PATH... instead")
    return folder


def example_repos(dest: Path, progress: Progress | None = None) -> list[Path]:
    """Green copies of the bundled examples under ``dest`` (made once), from repaired trees kept
    in the cache by the example's content (``_repaired``)."""
    progress = progress or Silent()
    repos = []
    for example in sorted(p for p in bundled_examples().iterdir() if (p / "pyproject.toml").exists()):
        copy = dest / example.name
        marker = copy / ".frognano-green"
        if not marker.exists():
            repaired = _repaired(example, progress)
            if repaired is None:
                continue
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(repaired, copy, ignore=shutil.ignore_patterns(".frognano-tree"))
        repos.append(copy)
    if not repos:
        raise UsageError("none of the bundled examples could be repaired for training")
    return repos


def _digest(folder: Path) -> str:
    """A hash of ``folder``'s files (paths and bytes), caches left out."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not {"__pycache__", ".pytest_cache"} & set(rel.parts):
            digest.update(str(rel.as_posix()).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _repaired(example: Path, progress: Progress) -> Path | None:
    """``example`` repaired by FrogNano's own search (``Engine.fix``, then the verified fix
    written), kept in the cache's ``trees/`` by the example's content: every training run used to
    repair each example again (15-21 s of a 6-minute tiny run on 2 cores).  Made in a private
    folder and renamed into place, so runs started side by side never see half a tree.  None
    (with a warning) when it cannot be repaired."""
    from ..config import Settings
    from ..paths import cache_root
    from ..repair.apply import apply_patch
    from ..repair.engine import Engine
    from ..sandbox.workspace import Workspace

    trees = cache_root() / "trees"
    digest = _digest(example)
    tree = trees / f"{example.name}-repaired-{digest}"
    if (tree / ".frognano-green").exists():
        return tree
    progress.phase(f"repairing the bundled example {example.name}")
    trees.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{example.name}-", dir=trees)) / example.name
    try:
        shutil.copytree(example, work, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        with Workspace(work) as ws, Engine(ws, Settings(lanes=1)) as engine:
            report = engine.fix()
            if report.status == "fixed" and report.fix is not None:
                apply_patch(ws.root, report.fix.patch)
            elif report.status != "passing":
                log.warning("%s: not repaired (%s); not used for training", example.name, report.message)
                return None
        (work / ".frognano-tree").write_text(f"{example} (repaired)\n{digest}\n")  # `frognano cache` lists it
        (work / ".frognano-green").write_text("repaired by frognano fix\n")
        try:
            os.rename(work, tree)
        except OSError:  # another run put it there first: theirs is as good
            if not (tree / ".frognano-green").exists():
                raise
        return tree
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)


def realbugs_corpus() -> Path:
    folder = Path(__file__).resolve().parents[2] / "benchmarks" / "realbugs"
    if not folder.is_dir():
        raise UsageError("realbugs: held-out repositories come from benchmarks/realbugs, which comes with a "
                         "source checkout of FrogNano; give heldout_repos as paths instead")
    return folder


def realbug_repos(pattern: str, dest: Path) -> list[Path]:
    """Green copies under ``dest`` of the corpus projects matching ``pattern`` (made once): each
    case's ``project/`` with its ``correct/`` files laid over it."""
    cases = sorted(p for p in realbugs_corpus().iterdir()
                   if fnmatch.fnmatch(p.name, pattern) and (p / "project").is_dir() and (p / "correct").is_dir())
    if not cases:
        raise UsageError(f"{REALBUGS}{pattern}: no case of benchmarks/realbugs matches")
    repos = []
    for case in cases:
        copy = dest / case.name
        if not (copy / ".frognano-green").exists():
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(case / "project", copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
            shutil.copytree(case / "correct", copy, dirs_exist_ok=True)
            (copy / ".frognano-green").write_text("benchmarks/realbugs: project/ with correct/ laid over it\n")
        repos.append(copy)
    return repos


def resolve_heldout(entries: list[str], dest: Path) -> list[Path]:
    """The held-out repositories ``entries`` name: paths as given, ``realbugs:GLOB`` laid out
    under ``dest``."""
    repos: list[Path] = []
    for entry in entries:
        if entry.startswith(REALBUGS):
            repos.extend(realbug_repos(entry[len(REALBUGS):], dest))
        else:
            repos.append(Path(entry))
    return repos
