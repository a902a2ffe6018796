"""The shadow copy: an isolated image of the project where candidate edits are tried.

The shadow holds the files git tracks or would track (never ``.git`` objects, virtualenvs,
caches, node_modules or build outputs), lives in FrogNano's cache outside the project, and is
synced incrementally: a later run copies only what changed (size or mtime) since the last.
Edits are applied and reverted in the shadow only; the user's tree is read, never written.

Beside it: ``listing.py`` (which files are the project's), ``shadow_files.py`` (how a shadow
file is written, and its signature) and ``storage.py`` (whether the cache can take it all).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import posixpath
import shutil
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..paths import project_cache
from ..project_paths import is_test_file
from ._worker.frognano_paths import READS_RECORD
from .listing import Entry, list_project
from .scope import check_scope
from .shadow_files import copy_file, replace_bytes, shadow_signature, stat_signature
from .storage import check_file_size_limit, check_free_space, storage_errors

log = logging.getLogger(__name__)

# Concurrent sessions on one project (CLI, server, and a data-parallel training launch: one per
# process plus the background synthesis's) each get their own shadow; made only when used.
_SLOTS = 64


def _norm(rel: str) -> str:
    return os.path.normpath(rel).replace(os.sep, "/")


# Files that Python or pytest load when they find them: a run that leaves one in the shadow
# may have changed how a run judges (pytest 9 reads pytest.toml and .pytest.toml first).
_LOADED_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml",
                           "pyproject.toml", "tox.ini", "setup.cfg"})


def _loadable(rel: str) -> bool:
    name = posixpath.basename(rel)
    return name in _LOADED_NAMES or name.endswith((".py", ".pyc", ".pth")) and "__pycache__/" not in rel


def _files_under(path: Path, rel: str) -> Iterator[str]:
    for dirpath, _, filenames in os.walk(path):
        sub = os.path.relpath(dirpath, path)
        for f in filenames:
            yield posixpath.normpath(posixpath.join(rel, sub.replace(os.sep, "/"), f))


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
        check_scope(root)  # not /, a home folder, or a big tree that is no project
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
        # The user's opt-in (Settings.allow_data_edits): then the data the tests read is not
        # part of the specification (``test_reads`` is empty).
        self.allow_data_edits = False
        self._layers: list[tuple[dict[str, bytes | None], Mapping[str, str]]] = []  # their originals, edits

    # -- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "Workspace":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        check_file_size_limit()
        with storage_errors(self.cache):
            self._open()

    def _open(self) -> None:
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
        with storage_errors(self.cache):
            return self._sync()

    def _sync(self) -> SyncStats:
        assert self.shadow is not None
        check_free_space(self.cache)
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
            sig = shadow_signature(dest)
            # Unchanged only if the project file is as it was and the shadow's copy too: a run
            # may have rewritten the copy (the manifest keeps the copy's signature for that).
            if prev[:3] == key and rel not in dirty and sig is not None and prev[3:] == [sig]:
                stats.unchanged += 1
            else:
                self._copy(e, dest)
                sig = shadow_signature(dest)
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
        self._compact_reads()
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
            copy_file(self.root / e.rel, dest)
            shutil.copymode(self.root / e.rel, dest)
        self._sigs[e.rel] = shadow_signature(dest)

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

    # -- what the tests read ----------------------------------------------------------------
    @property
    def _reads_path(self) -> Path:
        # The runner's folder for this shadow's runs (TestRunner.dir), where the worker writes it.
        assert self.shadow is not None
        return self.shadow.with_name(self.shadow.name + ".runs") / READS_RECORD

    def test_reads(self) -> set[str]:
        """The project's files (not Python sources) that test code opened for reading in this
        shadow's runs (``frognano_reads``); empty when the user opted in to data edits.

        The record only grows (a truncated one is filled again by the next baseline run), so a
        file once read stays protected: over-protecting costs a fix an opt-in, under-protecting
        lets it rewrite what a test expects."""
        if self.allow_data_edits or self.shadow is None:
            return set()
        try:
            text = self._reads_path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return set()
        reads = set()
        for line in text.splitlines():
            reader, _, rel = line.partition("\t")
            if rel in self.entries and not rel.endswith(".py") and is_test_file(reader):
                reads.add(rel)
        return reads

    def _compact_reads(self) -> None:
        """Drop repeated lines and files the project no longer has, once the record is large."""
        path = self._reads_path
        try:
            if path.stat().st_size < 256 << 10:
                return
            lines = path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
        except OSError:
            return
        kept = sorted({ln for ln in lines if ln.partition("\t")[2] in self.entries})
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(f"{ln}\n" for ln in kept), encoding="utf-8", errors="surrogateescape")
        os.replace(tmp, path)

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

    def versions(self) -> dict[str, object]:
        """Each Python file's version as of the last ``sync``: its unsaved editor buffer, else
        the project file's size and modification time.  Two equal maps mean the tests would
        see the same sources, without reading a file (what a picture of the suite is current
        for)."""
        out: dict[str, object] = {rel: (e.size, e.mtime_ns, e.link)
                                  for rel, e in self.entries.items() if rel.endswith(".py")}
        out.update((rel, text) for rel, text in self._overlay.items() if rel.endswith(".py"))
        return out

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
                self._sigs[_norm(rel)] = shadow_signature(self.shadow / rel)  # type: ignore[operator]
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
                if path.is_dir() and not path.is_symlink():  # a run made a folder of it
                    shutil.rmtree(path, ignore_errors=True)
                path.unlink(missing_ok=True)
            else:
                replace_bytes(path, data)
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
        replace_bytes(path, encode_source(text, like=self.root / rel if (self.root / rel).exists() else None))
        self._sigs[_norm(rel)] = shadow_signature(path)

    def ensure_pristine(self, rels: Iterable[str] = (), absent: Iterable[str] = ()) -> list[str]:
        """Make the shadow hold exactly the project's files (editor buffers and the edits in
        progress included) and nothing else; returns what of it could have judged the run just
        made (empty: the shadow was pristine, or only held a test's output files).

        Every project file whose copy changed since FrogNano wrote it is put back; every file
        or folder the project does not have (a ``tests/__init__.py`` or ``tests/m.py`` that a
        run wrote, a ``conftest.py`` in a new folder, a ``pytest.toml``, a ``.pth``, bytecode,
        a test's output) is removed.  What is returned: changes to ``rels`` (the specification)
        and to Python files, and removed files that Python or pytest would load (``.py``,
        ``.pyc``, ``.pth``, configuration, whatever of ``absent`` existed); a test that writes
        ``out.txt`` is cleaned up, not a rewrite.

        Cheap (one ``scandir`` walk and a stat a file, nothing read unless it changed):
        verification calls it around every run, so the tests it runs are the user's whatever
        the code under test wrote meanwhile.
        """
        assert self.shadow is not None
        watched, absent = set(rels), set(absent)
        texts = dict(self._overlay)  # what the shadow holds beyond the project's own bytes
        for _, files in self._layers:
            texts.update({_norm(r): t for r, t in files.items()})
        known = set(self.entries) | set(texts)
        changed, strays = self._scan(known)
        removed: list[str] = []  # strays go first: one may stand where a project folder was
        for rel in strays:
            path = self.shadow / rel
            if path.is_dir() and not path.is_symlink():
                if rel in absent:
                    removed.append(rel)
                else:
                    removed.extend(f for f in _files_under(path, rel) if _loadable(f))
                shutil.rmtree(path, ignore_errors=True)
            else:
                if rel in absent or _loadable(rel):
                    removed.append(rel)
                path.unlink(missing_ok=True)
        restored = [rel for rel in changed if rel in watched or rel.endswith(".py")]
        for rel in changed:
            if rel in texts:
                self._write_shadow(rel, texts[rel])
            else:
                self._copy(self.entries[rel], self.shadow / rel)
        reported = restored + removed
        if reported:
            log.warning("restored or removed files a test run wrote in the shadow copy: %s",
                        ", ".join(reported[:5]))
        elif changed or strays:
            log.debug("cleaned the shadow copy after a run: %s", ", ".join([*changed, *strays][:5]))
        return reported

    def _scan(self, known: set[str]) -> tuple[list[str], list[str]]:
        """``(changed, strays)``: files of ``known`` whose shadow copy is not as FrogNano wrote it
        (or is gone), and top-most files or folders of the shadow that ``known`` lacks."""
        assert self.shadow is not None
        folders = self._folders(known)
        sigs, base = self._sigs, str(self.shadow) + os.sep
        changed, strays, seen = [], [], set()
        stack = [""]
        while stack:
            folder = stack.pop()
            prefix = folder + "/" if folder else ""
            try:
                listing = os.scandir(base + folder)
            except OSError:
                continue
            with listing:
                for d in listing:
                    rel = prefix + d.name
                    if rel in known:
                        seen.add(rel)
                        try:
                            st = d.stat(follow_symlinks=False)
                        except OSError:
                            changed.append(rel)  # gone meanwhile
                            continue
                        if stat_signature(st) != sigs.get(rel):
                            changed.append(rel)
                    elif rel in folders and d.is_dir(follow_symlinks=False):
                        stack.append(rel)
                    else:
                        strays.append(rel)
        if len(seen) < len(known):  # removed by a run, or under a folder it replaced
            changed.extend(sorted(known - seen))
        return changed, strays

    def _folders(self, known: set[str]) -> frozenset[str]:
        """Every folder that holds a file of ``known`` (and its parents); kept while the same."""
        extra = frozenset(known - self.entries.keys())  # editor buffers, a candidate's new files
        cached = getattr(self, "_folders_cache", None)
        if cached is not None and cached[0] is self.entries and cached[1] == extra:
            return cached[2]
        folders = {posixpath.dirname(r) for r in known}
        for folder in list(folders):
            while folder:
                folder = posixpath.dirname(folder)
                folders.add(folder)
        self._folders_cache = (self.entries, extra, frozenset(folders))
        return self._folders_cache[2]

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
