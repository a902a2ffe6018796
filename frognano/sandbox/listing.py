"""Which files are the project's: what git tracks or would track (its listing when there is a
repository, else a walk that honours every ``.gitignore``), never what lies under an ignored
folder (``project_paths.ignored_dir``: caches, build outputs, any virtualenv).  The shadow copy
holds exactly these files."""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..project_paths import ignored_dir, ignored_path
from .gitignore import Ignore

__all__ = ["Entry", "list_project"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    """One file of the project: a regular file, or a symlink (kept as a symlink)."""

    rel: str
    size: int
    mtime_ns: int
    link: str | None = None  # symlink text
    external: bool = False  # a symlink that leads out of the project: read, never edited


def _git_listing(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


def _walk_listing(root: Path) -> list[str]:
    """The files git would list, without git: the walk honours every ``.gitignore`` on the way
    (a 1 GiB ignored data folder is never copied) and never enters an ignored folder."""
    found: list[str] = []
    ignore = Ignore(root)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        folder = "" if here == root else here.relative_to(root).as_posix()
        ignore.enter(folder)

        def rel(name: str) -> str:
            return f"{folder}/{name}" if folder else name

        # Symlinked directories are listed as entries (and not followed), like git does.
        keep = []
        for d in dirnames:
            if (here / d).is_symlink():
                if not ignore.ignored(rel(d), is_dir=False):
                    found.append(rel(d))
            elif not ignored_dir(here / d, d) and not ignore.ignored(rel(d), is_dir=True):
                keep.append(d)
        dirnames[:] = sorted(keep)
        found.extend(rel(f) for f in filenames if not ignore.ignored(rel(f), is_dir=False))
    return found


def list_project(root: Path) -> list[Entry]:
    """The project's files, as git would see them, minus anything under an ignored directory
    (git itself lists an untracked virtualenv that has no ``.gitignore`` of its own)."""
    names = _git_listing(root)
    if names is None:
        names = _walk_listing(root)
    real_root = os.path.realpath(root)
    entries: list[Entry] = []
    seen: dict[str, bool] = {}  # folder -> ignored: one stat a folder, not one a file
    for rel in sorted(set(names)):
        if rel.endswith((".pyc", ".pyo")) or ignored_path(root, rel, seen=seen):
            continue
        path = root / rel
        try:
            st = os.lstat(path)
        except OSError:  # listed by git but deleted in the working tree
            continue
        if os.path.islink(path):
            target = os.path.realpath(path)
            inside = target == real_root or target.startswith(real_root + os.sep)
            if not inside:
                log.warning("%s is a symlink leading out of the project (%s); it is never edited",
                            rel, target)
            entries.append(Entry(rel, st.st_size, st.st_mtime_ns, os.readlink(path), not inside))
        elif os.path.isfile(path):
            entries.append(Entry(rel, st.st_size, st.st_mtime_ns))
        elif os.path.isdir(path):  # a git submodule or nested repository: skip with a note
            log.info("skipping %s: a nested repository", rel)
    return entries
