"""What FrogNano keeps in its cache folder (``paths.cache_root``), and removing it safely.

The layout this reads is the one the rest of FrogNano writes:

- ``projects/<name>-<hash>/``, one folder per project (``paths.project_cache``): shadow copies
  ``shadow-N/`` with their ``shadow-N.manifest.json`` and ``shadow-N.lock``, run logs
  ``shadow-N.runs/``, recorded model episodes ``episodes/``, whole-suite runs kept for reuse
  ``pictures/``, and the undo copies of ``--apply`` in ``undo/``;
- ``trees/<repo>-<commit>/``: a repository's tree at a task's git base, exported once by
  ``frognano eval`` and ``frognano train`` (its ``.frognano-tree`` names the repository), and
  ``trees/<example>-repaired-<hash>/``, a bundled example repaired once for the training presets;
- ``models/<stem>-<sha256>-<kind>/``: a GGUF file converted once for ``--model torch:FILE.gguf``
  or ``mlx:FILE.gguf`` (``runtime/gguf.py``; its ``frognano-import.json`` names the file), and
  ``models/.<name>.*/``, an import under way (its process holds a lock on the folder) or one
  that was killed;
- ``.removing-*``: what an interrupted ``frognano cache clean`` left half deleted.

Removal only ever touches those entries, never the rest of the cache root (which may be a
folder the user named with ``FROGNANO_CACHE_DIR``, holding other files).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError
from .paths import cache_root, project_cache

log = logging.getLogger(__name__)

TRASH_PREFIX = ".removing-"
# The largest episode record read to learn which project a folder belongs to.
_MAX_RECORD_BYTES = 4 << 20


@dataclass
class ProjectEntry:
    """One project's folder under ``projects/``: bytes per kind of content."""

    folder: Path
    sizes: dict[str, int]
    project: Path | None  # the project it belongs to, when a record in it says so
    in_use: bool  # a running fix, watch or serve holds one of its shadow copies

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


@dataclass
class TreeEntry:
    """A repository's tree at one commit under ``trees/``."""

    folder: Path
    size: int
    source: Path | None  # the repository it was exported from
    commit: str | None  # None: an export that never finished


@dataclass
class ModelEntry:
    """A GGUF file imported under ``models/`` (or an import not finished)."""

    folder: Path
    size: int
    source: Path | None  # the GGUF file it was converted from, as its record names it
    kind: str | None  # "torch" or "mlx"
    architecture: str | None
    finished: bool  # False: a staging folder, an import under way or killed
    in_use: bool  # an import is writing it now (it holds the folder's lock)


@dataclass
class Inventory:
    root: Path
    projects: list[ProjectEntry] = field(default_factory=list)
    trees: list[TreeEntry] = field(default_factory=list)
    models: list[ModelEntry] = field(default_factory=list)
    leftovers: list[tuple[Path, int]] = field(default_factory=list)  # ``.removing-*`` folders
    other: list[tuple[Path, int]] = field(default_factory=list)  # not FrogNano's: never removed

    @property
    def total(self) -> int:
        return (sum(p.total for p in self.projects) + sum(t.size for t in self.trees)
                + sum(m.size for m in self.models)
                + sum(size for _, size in self.leftovers) + sum(size for _, size in self.other))


def size_of(path: Path) -> int:
    """Bytes in the files under ``path`` (symbolic links count as themselves, never followed)."""
    try:
        st = path.lstat()
    except OSError:
        return 0
    if path.is_symlink() or not path.is_dir():
        return st.st_size
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def kind_of(name: str) -> str:
    """The kind of content an entry of a project folder holds, as the listing groups it."""
    if name.startswith("shadow-"):
        return "run logs" if name.endswith(".runs") else "shadow copies"
    return {"episodes": "episodes", "pictures": "stored runs", "undo": "undo copies",
            "last-fix.json": "last verified fix", "project.json": "project record"}.get(name, "other")


def _locks(folder: Path) -> list[Path]:
    undo = folder / "undo" / ".lock"
    return sorted(folder.glob("shadow-*.lock")) + ([undo] if undo.exists() else [])


@contextlib.contextmanager
def holding(folder: Path) -> Iterator[bool]:
    """Try the locks a running session holds on ``folder`` (each shadow copy's, and the undo
    folder's, held by an --apply or undo); yields False if any is taken, True while all of them
    are held here, so no session can take one until the block ends.  A session starting in
    that instant takes the next free shadow slot instead: harmless while listing; while
    removing, only a session that starts between these locks and the folder's rename (a few
    system calls) would lose its shadow copy mid-run."""
    fds: list[int] = []
    try:
        free = True
        for lock in _locks(folder):
            try:
                fd = os.open(lock, os.O_RDONLY)
            except OSError:
                continue  # gone meanwhile: nobody can hold it
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                free = False
                break
        yield free
    finally:
        for fd in fds:
            os.close(fd)  # closing releases the lock


def _recorded_project(folder: Path) -> Path | None:
    """The project path a record in ``folder`` names: ``project.json`` (``Workspace.open`` writes
    it), else an undo manifest, else an episode."""
    for pattern in ("project.json", "undo/*/manifest.json", "undo/*.journal.json", "episodes/*.json"):
        for record in sorted(folder.glob(pattern), reverse=True):
            try:
                if record.stat().st_size > _MAX_RECORD_BYTES:
                    continue
                data = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            named = (data.get("root") or data.get("project")) if isinstance(data, dict) else None
            if isinstance(named, str) and named:
                return Path(named)
    return None


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _project(folder: Path) -> ProjectEntry:
    sizes: dict[str, int] = {}
    for entry in _entries(folder):
        kind = kind_of(entry.name)
        sizes[kind] = sizes.get(kind, 0) + size_of(Path(entry.path))
    with holding(folder) as free:
        in_use = not free
    return ProjectEntry(folder, sizes, _recorded_project(folder), in_use)


def _tree(folder: Path) -> TreeEntry:
    source = commit = None
    with contextlib.suppress(OSError):
        lines = (folder / ".frognano-tree").read_text().splitlines()
        if len(lines) >= 2:
            source, commit = Path(lines[0]), lines[1]
    return TreeEntry(folder, size_of(folder), source, commit)


def _folder_locked(folder: Path) -> bool:
    """Whether a process holds the lock ``gguf._import`` takes on its staging folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the lock
    return False


def _model(folder: Path) -> ModelEntry:
    from .runtime.gguf import RECORD  # light: the converters load only to convert

    record: dict = {}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((folder / RECORD).read_text())
        record = data if isinstance(data, dict) else {}
    finished = not folder.name.startswith(".")
    source = record.get("source")
    return ModelEntry(folder, size_of(folder), Path(source) if isinstance(source, str) else None,
                      record.get("to"), record.get("architecture"), finished,
                      in_use=not finished and _folder_locked(folder))


def inventory(root: Path | None = None) -> Inventory:
    """Everything under the cache root, grouped as ``frognano cache`` shows it."""
    root = cache_root() if root is None else root
    inv = Inventory(root)
    for entry in _entries(root):
        path = Path(entry.path)
        if entry.name in ("projects", "models") and entry.is_dir(follow_symlinks=False):
            read, found = (_project, inv.projects) if entry.name == "projects" else (_model, inv.models)
            for sub in _entries(path):
                if sub.is_dir(follow_symlinks=False):
                    found.append(read(Path(sub.path)))
                else:
                    inv.other.append((Path(sub.path), size_of(Path(sub.path))))
        elif entry.name == "trees" and entry.is_dir(follow_symlinks=False):
            inv.trees.extend(_tree(Path(sub.path)) for sub in _entries(path) if sub.is_dir(follow_symlinks=False))
        elif entry.name.startswith(TRASH_PREFIX) and entry.is_dir(follow_symlinks=False):
            inv.leftovers.append((path, size_of(path)))
        else:
            inv.other.append((path, size_of(path)))
    return inv


@dataclass
class Selection:
    """What one ``clean`` would remove."""

    projects: list[ProjectEntry] = field(default_factory=list)
    trees: list[TreeEntry] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)
    models: list[ModelEntry] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.projects or self.trees or self.leftovers or self.models)


def _within(path: Path, folder: Path) -> str | None:
    """The first component of ``path`` below ``folder``, or None when it is not below it."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return None
    return rel.parts[0] if rel.parts else None


def select(inv: Inventory, target: Path | None) -> Selection:
    """The entries of ``target``'s project (everything with ``target`` None): its folder under
    ``projects/``, the trees exported from it and their projects.  ``target`` may also be one
    of the cache's own folders, e.g. a project folder the listing shows, or a GGUF file, whose
    imports under ``models/`` it selects."""
    if target is None:
        return Selection(list(inv.projects), list(inv.trees), [p for p, _ in inv.leftovers], list(inv.models))
    inside = _within(target, inv.root / "projects")
    if inside is not None:
        return Selection([p for p in inv.projects if p.folder.name == inside])
    inside = _within(target, inv.root / "models")
    if inside is not None:
        return Selection(models=[m for m in inv.models if m.folder.name == inside])
    if Path(target).is_file():
        real = Path(os.path.realpath(target))
        return Selection(models=[m for m in inv.models
                                 if m.source is not None and Path(os.path.realpath(m.source)) == real])
    inside = _within(target, inv.root / "trees")
    if inside is not None:
        trees = [t for t in inv.trees if t.folder.name == inside]
    else:
        real = Path(os.path.realpath(target))
        trees = [t for t in inv.trees if t.source is not None and Path(os.path.realpath(t.source)) == real]
    # A tree is a project of its own while eval or train run in it: its folder goes with it.
    wanted = {project_cache(t.folder).name for t in trees}
    if inside is None:
        wanted.add(project_cache(target).name)
    return Selection([p for p in inv.projects if p.folder.name in wanted], trees)


def _discard(path: Path, root: Path) -> None:
    """Move ``path`` aside (one rename, so no session can find it half deleted), then delete it."""
    if _within(path, root) is None or os.path.realpath(path) == os.path.realpath(root):
        raise AssertionError(f"{path} is not inside the cache {root}")  # never reached: paths come from scanning root
    if path.is_symlink():
        path.unlink()
        return
    trash = root / f"{TRASH_PREFIX}{path.name}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.rename(path, trash)
    except OSError as exc:
        raise UsageError(f"cannot remove {path}: {exc.strerror or exc}") from exc
    # Half deleted (killed, unreadable files), it is listed as a leftover and --all retries it.
    shutil.rmtree(trash, ignore_errors=True)


@dataclass
class Removed:
    removed: list[Path] = field(default_factory=list)
    freed: int = 0
    in_use: list[ProjectEntry] = field(default_factory=list)  # kept: a session holds them
    importing: list[ModelEntry] = field(default_factory=list)  # kept: an import is writing them


def remove(inv: Inventory, selection: Selection) -> Removed:
    """Delete the selected entries, keeping each project a running session holds."""
    done = Removed()
    if not selection:
        raise UsageError("nothing to remove")
    for project in selection.projects:
        with holding(project.folder) as free:
            if not free:
                done.in_use.append(project)
                continue
            # Renamed while its locks are held here: a session that starts now gets a new folder.
            _discard(project.folder, inv.root)
        done.removed.append(project.folder)
        done.freed += project.total
        log.info("removed %s", project.folder)
    for tree in selection.trees:
        _discard(tree.folder, inv.root)
        done.removed.append(tree.folder)
        done.freed += tree.size
    for model in selection.models:
        if not model.finished and _folder_locked(model.folder):
            done.importing.append(model)
            continue
        _discard(model.folder, inv.root)
        done.removed.append(model.folder)
        done.freed += model.size
    for leftover in selection.leftovers:
        size = size_of(leftover)
        shutil.rmtree(leftover, ignore_errors=True)
        done.removed.append(leftover)
        done.freed += size
    return done
