"""The task store: synthesised bug tasks as JSON lines (docs/ARCHITECTURE.md §6).

One task per line, with the fields of SWE-bench / SWE-smith instances (``instance_id``,
``repo``, ``base_commit``, ``patch``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``) plus the family key
and the difficulty features the frontier and the evaluation read, so a store loads with
``datasets.load_dataset("json", data_files=path)``.

``TaskStore`` is the single writer of one file: it skips a task whose bug it already holds
(same repo, base and patch), writes each task with one write + flush + fsync, and on reopening
a file after a crash keeps every complete line and cuts off a half-written last one. Readers
use ``read_tasks``, which never modifies the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import FrogNanoError
from .frontier import Family

try:  # advisory lock against two writers; POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

BASE_KINDS = ("git", "content")
_HEX = re.compile(r"[0-9a-f]{7,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class StoreError(FrogNanoError):
    """A task or a task file is malformed, or the file is held by another writer (exit 2)."""


def patch_hash(patch: str) -> str:
    """SHA-256 of the patch text (hex), the bug's identity within a repo and base."""
    return hashlib.sha256(patch.encode("utf-8", "surrogatepass")).hexdigest()


def repo_name(repo: str) -> str:
    """A short, path-free name for ids: ``owner/name`` and URLs give ``owner__name``, an
    absolute local path only its last component (ids must not depend on where a clone lives)."""
    text = repo.strip().rstrip("/\\")
    if text.endswith(".git"):
        text = text[:-4]
    url = "://" in text or re.match(r"^[\w.-]+@[\w.-]+:", text) is not None
    local = not url and (text.startswith(("/", "~", "\\")) or re.match(r"^[A-Za-z]:[\\/]", text) is not None)
    parts = [p for p in re.split(r"[/\\:]", text) if p]
    keep = parts[-1:] if local else parts[-2:]
    return _UNSAFE.sub("_", "__".join(keep)) or "repo"


def make_instance_id(repo: str, base: str, family: str, patch: str) -> str:
    """``{repo_name}.{base[:8]}.{family}.{patch_hash[:8]}``: readable and stable (it depends only
    on what the task is, never on when or where it was made)."""
    return f"{repo_name(repo)}.{base[:8]}.{family}.{patch_hash(patch)[:8]}"


def _str_list(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise StoreError(f"{name} must be a list of strings, got {value!r}")
    return value


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise StoreError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


@dataclass(kw_only=True)
class Task:
    """One synthesised bug. Field order is the JSON order; ``extra`` holds keys this version
    does not know (e.g. SWE-smith's ``image_name``), written back at the top level."""

    instance_id: str = field(default="", metadata={"help": "stable id; computed by make_instance_id when empty"})
    repo: str = field(metadata={"help": "owner/name, URL or path of the source project"})
    base_commit: str = field(metadata={"help": "git commit the patch applies to, or the hex content hash of "
                                                "the source tree when it is not a git repository"})
    base_kind: str = field(default="git", metadata={"help": "git | content: what base_commit holds"})
    patch: str = field(metadata={"help": "the bug, a git-style unified diff with a/ b/ prefixes"})
    FAIL_TO_PASS: list[str] = field(metadata={"help": "test ids the bug makes fail (a fix makes them pass)"})
    PASS_TO_PASS: list[str] = field(default_factory=list, metadata={"help": "test ids that pass with and without the bug"})
    family: str = field(metadata={"help": "frontier family key, operator-bN-hint-dN"})
    operators: list[str] = field(metadata={"help": "operator of each injected bug, one per bug"})
    n_bugs: int | None = field(default=None, metadata={"help": "number of bugs (default: len(operators))"})
    n_fail: int | None = field(default=None, metadata={"help": "number of failing tests (default: len(FAIL_TO_PASS))"})
    distance: int = field(default=0, metadata={"help": "calls between a failing test and the farthest bug "
                                                       "(0: the function the test calls directly)"})
    file_lines: int = field(default=0, metadata={"help": "lines of the file(s) holding the bug(s)"})
    traceback_through_bug: bool = field(default=False, metadata={"help": "a failing test's traceback passes "
                                                                         "through a bug line"})
    hint: str = field(default="", metadata={"help": "the hint shown with the task, at the family's hint level"})
    extra: dict[str, Any] = field(default_factory=dict, metadata={"help": "unknown keys, kept on round trips"})

    def __post_init__(self) -> None:
        for name in ("repo", "base_commit", "patch", "family", "instance_id", "hint"):
            if not isinstance(getattr(self, name), str):
                raise StoreError(f"{name} must be a string, got {getattr(self, name)!r}")
        for name in ("repo", "base_commit", "patch"):
            if not getattr(self, name).strip():
                raise StoreError(f"{name} must not be empty")
        if self.base_kind not in BASE_KINDS:
            raise StoreError(f"base_kind must be one of {', '.join(BASE_KINDS)}, got {self.base_kind!r}")
        # Lower case so the dedup key and the id do not depend on how a hash was spelt.
        self.base_commit = self.base_commit.strip().lower()
        if not _HEX.fullmatch(self.base_commit):
            raise StoreError(f"base_commit must be a hex {'commit' if self.base_kind == 'git' else 'content hash'} "
                             f"(7-64 hex digits) for base_kind {self.base_kind!r}, got {self.base_commit!r}")
        if not re.search(r"^\+\+\+ b/", self.patch, re.M) or not re.search(r"^--- (a/|/dev/null)", self.patch, re.M):
            raise StoreError("patch must be a unified diff with a/ and b/ prefixes (--- a/PATH, +++ b/PATH)")
        _str_list("FAIL_TO_PASS", self.FAIL_TO_PASS)
        _str_list("PASS_TO_PASS", self.PASS_TO_PASS)
        _str_list("operators", self.operators)
        if not self.FAIL_TO_PASS:
            raise StoreError("FAIL_TO_PASS must name at least one test: a bug no test catches is no task")
        both = sorted(set(self.FAIL_TO_PASS) & set(self.PASS_TO_PASS))
        if both:
            raise StoreError(f"FAIL_TO_PASS and PASS_TO_PASS share tests: {', '.join(both[:3])}")
        if not self.operators:
            raise StoreError("operators must name at least one operator")
        if self.n_bugs is None:
            self.n_bugs = len(self.operators)
        if _int("n_bugs", self.n_bugs, 1) != len(self.operators):
            raise StoreError(f"n_bugs ({self.n_bugs}) must equal the number of operators ({len(self.operators)})")
        if self.n_fail is None:
            self.n_fail = len(self.FAIL_TO_PASS)
        if _int("n_fail", self.n_fail, 1) != len(self.FAIL_TO_PASS):
            raise StoreError(f"n_fail ({self.n_fail}) must equal the number of FAIL_TO_PASS tests "
                             f"({len(self.FAIL_TO_PASS)})")
        _int("distance", self.distance, 0)
        _int("file_lines", self.file_lines, 0)
        if not isinstance(self.traceback_through_bug, bool):
            raise StoreError(f"traceback_through_bug must be true or false, got {self.traceback_through_bug!r}")
        try:
            fam = Family.from_key(self.family)
        except FrogNanoError as exc:
            raise StoreError(f"family: {exc}") from None
        # The frontier credits an outcome to the task's family, so the family must describe it.
        if fam.bugs != self.n_bugs:
            raise StoreError(f"family {self.family} has {fam.bugs} bug(s) but n_bugs is {self.n_bugs}")
        if fam.distance != Family.bucket(self.distance):
            raise StoreError(f"family {self.family} is distance bucket {fam.distance} but distance "
                             f"{self.distance} falls in bucket {Family.bucket(self.distance)}")
        if not isinstance(self.extra, dict):
            raise StoreError(f"extra must be a dict, got {self.extra!r}")
        clash = sorted(set(self.extra) & _FIELDS)
        if clash:
            raise StoreError(f"extra must not hold task fields: {', '.join(clash)}")
        if not self.instance_id:
            self.instance_id = make_instance_id(self.repo, self.base_commit, self.family, self.patch)

    @property
    def key(self) -> str:
        """Dedup key: the same bug (patch) on the same repo and base is the same task, whatever
        its family or hint."""
        return f"{self.repo}\n{self.base_commit}\n{patch_hash(self.patch)}"

    @property
    def family_settings(self) -> Family:
        return Family.from_key(self.family)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        out["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        out["operators"] = list(self.operators)
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        if not isinstance(data, Mapping):
            raise StoreError(f"a task must be a JSON object, got {type(data).__name__}")
        missing = [name for name in _REQUIRED if name not in data]
        if missing:
            raise StoreError(f"task lacks field(s): {', '.join(missing)}")
        known = {k: v for k, v in data.items() if k in _FIELDS}
        extra = {k: v for k, v in data.items() if k not in _FIELDS}
        return cls(**known, extra=extra)

    def to_json(self) -> str:
        """One line of JSON (no newline). Raises StoreError for text that is not valid UTF-8."""
        text = json.dumps(self.to_dict(), ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise StoreError(f"task {self.instance_id} holds text that is not valid UTF-8: {exc}") from None
        return text

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise StoreError(f"not a JSON task: {exc}") from None
        return cls.from_dict(data)


_FIELDS = frozenset(f.name for f in fields(Task)) - {"extra"}
#: What a stored line must hold; the rest default (and ``instance_id`` is always written).
_REQUIRED = ("instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS", "family", "operators")


def _lines(fh) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) for each line of a binary file from its start."""
    offset = 0
    for lineno, raw in enumerate(fh, 1):
        yield lineno, offset, raw
        offset += len(raw)


def _parse(path: Path, lineno: int, raw: bytes) -> Task:
    try:
        return Task.from_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, StoreError) as exc:
        raise StoreError(f"{path}:{lineno}: {exc}") from None


def read_tasks(path: str | os.PathLike) -> Iterator[Task]:
    """Every task of a store file, without modifying it. An unterminated last line is a write
    in progress (or cut off by a crash) and is skipped; any other bad line is an error."""
    path = Path(path)
    with open(path, "rb") as fh:
        for lineno, _, raw in _lines(fh):
            if not raw.endswith(b"\n"):
                return
            if raw.strip():
                yield _parse(path, lineno, raw)


class TaskStore:
    """Appends tasks to one JSON-lines file, skipping duplicates; reopening resumes it.

    Use as a context manager (or call ``close``). One writer per file: a second ``TaskStore``
    on the same file, in any process, raises StoreError while the first is open.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.duplicates = 0  # tasks skipped as duplicates since this store was opened
        self.recovered = False  # a cut-off last line was removed on opening
        self._keys: set[str] = set()
        self._count = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+b")  # writes always go to the end
        try:
            self._lock()
            self._resume()
        except BaseException:
            self._fh.close()
            raise

    def _lock(self) -> None:
        if fcntl is None:  # pragma: no cover - Windows
            return
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{self.path} is open for writing by another TaskStore") from None

    def _resume(self) -> None:
        """Load the keys already stored; cut off a half-written last line (a crash mid-write)."""
        self._fh.seek(0)
        for lineno, offset, raw in _lines(self._fh):
            if not raw.strip():
                continue
            if raw.endswith(b"\n"):
                task = _parse(self.path, lineno, raw)
            else:
                # Each task is written in one write() ending in "\n", so an unterminated last line
                # is a prefix of one. A prefix that parses is the whole object (a JSON object's
                # last byte is its closing brace): keep it and finish the line; else cut it off.
                try:
                    task = Task.from_json(raw.decode("utf-8"))
                except (UnicodeDecodeError, StoreError):
                    log.warning("%s: removing a half-written last line (%d bytes) left by an "
                                "interrupted write", self.path, len(raw))
                    self._fh.truncate(offset)
                    self._sync()
                    self.recovered = True
                    break
                self._fh.write(b"\n")
                self._sync()
            self._keys.add(task.key)
            self._count += 1
        self._fh.seek(0, os.SEEK_END)

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, task: Task) -> bool:
        """Write ``task`` unless its bug is already stored; True if written."""
        if self._fh.closed:
            raise StoreError(f"{self.path}: the store is closed")
        key = task.key
        if key in self._keys:
            self.duplicates += 1
            log.debug("%s: skipping duplicate task %s", self.path, task.instance_id)
            return False
        line = (task.to_json() + "\n").encode("utf-8")  # built whole before anything is written
        self._fh.write(line)
        self._sync()
        self._keys.add(key)
        self._count += 1
        return True

    def extend(self, tasks: Iterable[Task]) -> int:
        """Append each task; the number written (duplicates are counted in ``duplicates``)."""
        return sum(self.append(task) for task in tasks)

    def __contains__(self, task: object) -> bool:
        if isinstance(task, Task):
            return task.key in self._keys
        return task in self._keys

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Task]:
        return read_tasks(self.path)

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()  # also releases the lock

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TaskStore({str(self.path)!r}, tasks={self._count}, duplicates={self.duplicates})"
