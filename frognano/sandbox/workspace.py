"""The shadow copy: an isolated image of the project where candidate edits are tried.

The shadow holds the files git tracks or would track (never ``.git`` objects, virtualenvs,
caches, node_modules or build outputs), lives in FrogNano's cache outside the project, and is
synced incrementally: a later run copies only what changed (size or mtime) since the last.
Edits are applied and reverted in the shadow only; the user's tree is read, never written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..paths import project_cache

log = logging.getLogger(__name__)

# Directory names that are never part of the project's source, whatever .gitignore says.
IGNORED_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    ".tox", ".nox", ".eggs", "node_modules", ".venv", "venv", "build", "dist", ".frognano",
    ".ipynb_checkpoints", ".cache", "htmlcov", ".hypothesis",
})
# Concurrent sessions on one project (CLI, server, and a data-parallel training launch: one per
# process plus the background synthesis's) each get their own shadow; made only when used.
_SLOTS = 64


def _ignored_dir(path: Path, name: str) -> bool:
    return name in IGNORED_DIRS or name.endswith(".egg-info") or (path / "pyvenv.cfg").exists()


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
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        # Symlinked directories are listed as entries (and not followed), like git does.
        keep = []
        for d in dirnames:
            if (here / d).is_symlink():
                found.append(str((here / d).relative_to(root)))
            elif not _ignored_dir(here / d, d):
                keep.append(d)
        dirnames[:] = sorted(keep)
        found.extend(str((here / f).relative_to(root)) for f in filenames)
    return found


def list_project(root: Path) -> list[Entry]:
    """The project's files, as git would see them, minus anything under an ignored directory."""
    names = _git_listing(root)
    if names is None:
        names = _walk_listing(root)
    real_root = os.path.realpath(root)
    entries: list[Entry] = []
    for rel in sorted(set(names)):
        parts = rel.split("/")
        if any(p in IGNORED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if parts[-1].endswith((".pyc", ".pyo")):
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


def _signature(path: Path) -> list[int] | None:
    """How a shadow file looks on disk, without reading it: any rewrite, replacement or chmod
    changes the status-change time (which, unlike mtime, no process can set back)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]


def read_source(path: Path) -> str:
    """Decode a Python file as Python does (coding cookie, BOM); newlines kept as they are."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(iter(data.splitlines(keepends=True)).__next__)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise UnicodeDecodeError("utf-8", data, 0, 1, f"cannot decode {path.name}: {exc}") from exc


def encode_source(text: str, like: Path | None = None) -> bytes:
    """Encode ``text`` with the encoding the file ``like`` declares (UTF-8 when none)."""
    encoding = "utf-8"
    if like is not None:
        with contextlib.suppress(OSError, SyntaxError), open(like, "rb") as fh:
            encoding, _ = tokenize.detect_encoding(fh.readline)
    if encoding == "utf-8-sig":
        encoding = "utf-8"  # the BOM is part of the text we were given, when there was one
    return text.encode(encoding)


@dataclass
class SyncStats:
    copied: int = 0
    removed: int = 0
    unchanged: int = 0
    external_links: list[str] = field(default_factory=list)


class Workspace:
    """A project and its shadow copy.  Use as a context manager to hold the shadow's lock."""

    def __init__(self, project: Path | str, cache: Path | None = None) -> None:
        root = Path(project).expanduser()
        if not root.exists():
            raise UsageError(f"{project}: no such directory")
        if not root.is_dir():
            raise UsageError(f"{project}: not a directory (give the project's folder)")
        self.root = root.resolve()
        self.cache = cache or project_cache(self.root)
        self.shadow: Path | None = None
        self._lock_fd: int | None = None
        self.entries: dict[str, Entry] = {}
        self._overlay: dict[str, str] = {}
        # What each shadow file looked like when FrogNano last wrote it: a run of the code under
        # test can rewrite shadow files (a test module, say), and this is how that is noticed.
        self._sigs: dict[str, list[int] | None] = {}
        self.editing = 0  # ``edited`` blocks in progress: the shadow holds a candidate's text
        self._layers: list[tuple[dict[str, bytes | None], Mapping[str, str]]] = []  # their originals, edits

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "Workspace":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        self.cache.mkdir(parents=True, exist_ok=True)
        # Which project this cache folder belongs to, for ``frognano cache`` (the folder's name
        # is only the project's base name and a hash).
        record = self.cache / "project.json"
        if not record.exists():
            tmp = record.with_name(f".project.json.{os.getpid()}")
            tmp.write_text(json.dumps({"project": str(self.root)}) + "\n")
            os.replace(tmp, record)
        for slot in range(_SLOTS):
            fd = os.open(self.cache / f"shadow-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock_fd = fd
            self.shadow = self.cache / f"shadow-{slot}"
            self.shadow.mkdir(exist_ok=True)
            return
        raise UsageError(f"{_SLOTS} FrogNano sessions already hold {self.root}'s shadow copies")

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- syncing --------------------------------------------------------------------------
    @property
    def _manifest_path(self) -> Path:
        assert self.shadow is not None
        return self.shadow.with_name(self.shadow.name + ".manifest.json")

    def sync(self) -> SyncStats:
        """Bring the shadow up to date with the project (and any editor overlay)."""
        if self.shadow is None:
            self.open()
        assert self.shadow is not None
        stats = SyncStats()
        try:
            old = json.loads(self._manifest_path.read_text())
        except (OSError, ValueError):
            old = {}
        dirty = set(old.pop("__dirty__", []))
        entries = {e.rel: e for e in list_project(self.root)}
        new: dict[str, list] = {}
        for rel, e in entries.items():
            key = [e.size, e.mtime_ns, e.link]
            dest = self.shadow / rel
            prev = old.get(rel) or []
            sig = _signature(dest)
            # Unchanged only if the project file is as it was and the shadow's copy too: a run
            # may have rewritten the copy (the manifest keeps the copy's signature for that).
            if prev[:3] == key and rel not in dirty and sig is not None and prev[3:] == [sig]:
                stats.unchanged += 1
            else:
                self._copy(e, dest)
                sig = _signature(dest)
                stats.copied += 1
            if e.external:
                stats.external_links.append(rel)
            new[rel] = [*key, sig]
            self._sigs[rel] = sig
        for rel in set(old) - set(entries):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                (self.shadow / rel).unlink()
                stats.removed += 1
        self.entries = entries
        new["__dirty__"] = sorted(self._overlay)
        self._write_manifest(new)
        for rel, text in self._overlay.items():
            self._write_shadow(rel, text)
        # A conftest.py or pytest configuration an earlier run planted near the tests (or a
        # planted bytecode cache) would judge every later run: gone before anything runs.
        from .specification import Specification

        self.ensure_pristine((), Specification.of_workspace(self).strays(self.entries))
        return stats

    def _copy(self, e: Entry, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.is_dir():
            shutil.rmtree(dest)
        if e.link is not None:
            # Links inside the project keep their text (they resolve inside the shadow);
            # links leading out point at their absolute target, read-only by convention.
            target = os.path.realpath(self.root / e.rel) if e.external else e.link
            os.symlink(target, dest)
        else:
            shutil.copyfile(self.root / e.rel, dest)
            shutil.copymode(self.root / e.rel, dest)
        self._sigs[e.rel] = _signature(dest)

    def _write_manifest(self, manifest: Mapping[str, object]) -> None:
        tmp = self._manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, self._manifest_path)

    def _mark_dirty(self, rels: set[str]) -> None:
        """Record shadow files that differ from the project, so a crash cannot leave them stale."""
        try:
            manifest = json.loads(self._manifest_path.read_text())
        except (OSError, ValueError):
            manifest = {}
        manifest["__dirty__"] = sorted(set(manifest.get("__dirty__", [])) | rels)
        self._write_manifest(manifest)

    # -- reading and editing --------------------------------------------------------------
    def check_editable(self, rel: str) -> Path:
        """The shadow path of ``rel``; refuses paths outside the project or through outside links."""
        assert self.shadow is not None
        norm = os.path.normpath(rel)
        if os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
            raise UsageError(f"{rel}: outside the project")
        entry = self.entries.get(norm.replace(os.sep, "/"))
        if entry is not None and entry.link is not None:
            raise UsageError(f"{rel}: a symlink; FrogNano does not edit through links")
        real = os.path.realpath(self.root / norm)
        if not (real == str(self.root) or real.startswith(str(self.root) + os.sep)):
            raise UsageError(f"{rel}: leads outside the project")
        return self.shadow / norm

    def read(self, rel: str) -> str:
        """The text of ``rel`` as the tests see it (shadow, overlay included)."""
        assert self.shadow is not None
        return read_source(self.shadow / rel)

    def python_files(self) -> list[str]:
        return [r for r, e in self.entries.items() if r.endswith(".py") and not e.external]

    @contextlib.contextmanager
    def edited(self, files: Mapping[str, str]) -> Iterator[None]:
        """Temporarily replace files in the shadow with new text; always restored."""
        originals: dict[str, bytes | None] = {}
        self._mark_dirty(set(files))
        self.editing += 1
        self._layers.append((originals, files))
        try:
            for rel, text in files.items():
                path = self.check_editable(rel)
                originals[rel] = path.read_bytes() if path.exists() else None
                self._write_shadow(rel, text)
            yield
        finally:
            self._layers.remove((originals, files))
            for rel in self._put_back(originals):
                self._sigs[rel] = _signature(self.shadow / rel)  # type: ignore[operator]
            self._clear_dirty(set(files) - set(self._overlay))
            self.editing -= 1

    @contextlib.contextmanager
    def pristine(self) -> Iterator[None]:
        """Inside ``edited`` blocks: the shadow as it was before them, for the duration (a warm
        session collects the project's own text, and candidates are swapped in from there)."""
        layers = list(self._layers)
        for originals, _ in reversed(layers):
            self._put_back(originals)
        try:
            yield
        finally:
            for _, files in layers:
                for rel, text in files.items():
                    self._write_shadow(rel, text)

    def _put_back(self, originals: Mapping[str, bytes | None]) -> list[str]:
        """Write the shadow's files back as ``originals`` holds them (None: the file did not exist)."""
        for rel, data in originals.items():
            path = self.shadow / rel  # type: ignore[operator]
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        return list(originals)

    def _clear_dirty(self, rels: set[str]) -> None:
        try:
            manifest = json.loads(self._manifest_path.read_text())
        except (OSError, ValueError):
            return
        manifest["__dirty__"] = sorted(set(manifest.get("__dirty__", [])) - rels)
        self._write_manifest(manifest)

    def _write_shadow(self, rel: str, text: str) -> None:
        path = self.check_editable(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_source(text, like=self.root / rel if (self.root / rel).exists() else None))
        self._sigs[rel] = _signature(path)

    def ensure_pristine(self, rels: Iterable[str], absent: Iterable[str] = ()) -> list[str]:
        """Put back the user's version (editor buffer, else disk) of every file of ``rels`` that
        changed in the shadow since FrogNano wrote it, and remove whatever of ``absent`` exists
        there; returns what it restored or removed (empty: the shadow was pristine).

        Cheap (a stat a file, nothing read): verification calls it around every run so that
        the tests it runs are the user's, whatever the code under test wrote meanwhile.
        """
        assert self.shadow is not None
        changed: list[str] = []
        for rel in rels:
            path = self.shadow / rel
            entry = self.entries.get(rel)
            if entry is None or _signature(path) == self._sigs.get(rel, False):
                continue
            changed.append(rel)
            if rel in self._overlay:
                self._write_shadow(rel, self._overlay[rel])
            else:
                self._copy(entry, path)
        for rel in absent:
            path = self.shadow / rel
            if rel in self.entries or not (path.exists() or path.is_symlink()):
                continue
            changed.append(rel)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if changed:
            log.warning("restored files a test run changed in the shadow copy: %s", ", ".join(changed[:5]))
        return changed

    @property
    def overlay(self) -> dict[str, str]:
        """The unsaved editor buffers the tests see (``set_overlay``)."""
        return dict(self._overlay)

    def set_overlay(self, buffers: Mapping[str, str]) -> None:
        """Unsaved editor buffers: the tests see this text instead of the file on disk."""
        for rel in set(self._overlay) - set(buffers):
            self._overlay.pop(rel)
            if self.shadow is not None and rel in self.entries:
                self._copy(self.entries[rel], self.shadow / rel)
        self._overlay = dict(buffers)
        if self.shadow is not None:
            self._mark_dirty(set(self._overlay))
            for rel, text in self._overlay.items():
                self._write_shadow(rel, text)
