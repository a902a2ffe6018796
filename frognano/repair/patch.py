"""Edits, patches and fixes; unified diffs; safe application to the user's tree with undo.

Applying keeps DESIGN.md invariant 1: a file is written only when its content is still exactly
what the fix was computed against, every write is atomic (temp file + rename in the same
folder), and an undo record is saved before the first rename.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ApplyError
from ..paths import project_cache
from ..sandbox.workspace import encode_source, read_source

log = logging.getLogger(__name__)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class FileEdit:
    """The whole new text of one file, and the text it replaces."""

    path: str  # posix, relative to the project root
    before: str
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"a/{self.path}", tofile=f"b/{self.path}",
        ))


@dataclass(frozen=True)
class Patch:
    edits: tuple[FileEdit, ...]

    @property
    def files(self) -> list[str]:
        return [e.path for e in self.edits]

    def diff(self) -> str:
        return "".join(e.diff() for e in self.edits)

    def texts(self) -> dict[str, str]:
        return {e.path: e.after for e in self.edits}

    @property
    def changed_lines(self) -> int:
        return sum(1 for ln in self.diff().splitlines()
                   if ln[:1] in "+-" and not ln.startswith(("+++", "---")))


@dataclass
class Verification:
    """What was measured in the shadow copy for a fix (DESIGN.md invariant 2)."""

    fail_to_pass: list[str]  # originally failing tests that now pass
    pass_to_pass: int  # originally passing tests run again that still pass
    scope: str = "suite"  # "suite": every originally passing selected test; "covering": those covering the edit

    def describe(self) -> str:
        n = len(self.fail_to_pass)
        which = "tests" if self.scope == "suite" else "covering tests"
        return (f"{n} failing test{'s' * (n != 1)} now pass{'es' * (n == 1)}, "
                f"{self.pass_to_pass} {which} still pass")


@dataclass
class Fix:
    patch: Patch
    verified: Verification
    source: str = "search"  # "search" | "model"
    notes: list[str] = field(default_factory=list)  # what each edit does, e.g. "calc/stats.py:15 `>` -> `>=`"

    def to_json(self) -> dict:
        return {
            "diff": self.patch.diff(),
            "files": self.patch.files,
            "verified": {"fail_to_pass": list(self.verified.fail_to_pass),
                         "pass_to_pass": self.verified.pass_to_pass},
            "source": self.source,
            "notes": list(self.notes),
        }


# -- applying and undoing -----------------------------------------------------------------------

def _current_text(path: Path) -> str | None:
    try:
        return read_source(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ApplyError(f"cannot read {path}: {exc}; nothing was written") from exc


def _atomic_replace(root: Path, writes: dict[str, bytes]) -> None:
    """Write every file to a temp file first, then rename them all; roll back on failure."""
    temps: dict[str, str] = {}
    try:
        for rel, data in writes.items():
            target = root / rel
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".frognano", dir=target.parent)
            temps[rel] = tmp
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            with contextlib.suppress(OSError):
                os.chmod(tmp, os.stat(target).st_mode & 0o7777)
    except OSError as exc:
        for tmp in temps.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise ApplyError(f"cannot write {exc.filename or rel}: {exc.strerror or exc}; nothing was written") from exc
    for rel, tmp in temps.items():
        os.replace(tmp, root / rel)


def apply_patch(root: Path, patch: Patch, *, cache: Path | None = None) -> Path:
    """Write ``patch`` to the project at ``root``; returns the undo record's folder.

    Refuses (ApplyError, nothing written) when any file no longer has the text the patch was
    computed against, or a path leaves the project.
    """
    root = root.resolve()
    for e in patch.edits:
        target = (root / e.path).resolve()
        if not str(target).startswith(str(root) + os.sep) or (root / e.path).is_symlink():
            raise ApplyError(f"{e.path}: outside the project or a symlink; nothing was written")
        if _current_text(root / e.path) != e.before:
            raise ApplyError(f"{e.path} changed since the fix was computed; nothing was written "
                             "(run frognano fix again)")
    undo_root = (cache or project_cache(root)) / "undo"
    undo_root.mkdir(parents=True, exist_ok=True)
    # Nanosecond names sort in the order fixes were applied; undo takes the newest.
    record = Path(tempfile.mkdtemp(prefix=f"{time.time_ns():020d}-", dir=undo_root))
    manifest = {"root": str(root), "time": time.time(), "files": []}
    for i, e in enumerate(patch.edits):
        (record / f"{i}.before").write_bytes((root / e.path).read_bytes())
        manifest["files"].append({"path": e.path, "copy": f"{i}.before", "after_sha256": sha256(e.after)})
    (record / "manifest.json").write_text(json.dumps(manifest, indent=1))
    try:
        _atomic_replace(root, {e.path: encode_source(e.after, like=root / e.path) for e in patch.edits})
    except ApplyError:
        (record / "manifest.json").unlink()
        raise
    log.info("applied %d file(s); undo record %s", len(patch.edits), record)
    return record


@dataclass
class UndoResult:
    record: Path
    files: list[str]


def undo_last(root: Path, *, cache: Path | None = None, force: bool = False) -> UndoResult:
    """Restore the files of the most recent applied fix that has not been undone yet."""
    root = root.resolve()
    base = (cache or project_cache(root)) / "undo"
    records = sorted((p for p in base.glob("*/manifest.json")), key=lambda p: p.parent.name)
    if not records:
        raise ApplyError(f"nothing to undo for {root}")
    manifest_path = records[-1]
    record = manifest_path.parent
    manifest = json.loads(manifest_path.read_text())
    if not force:
        for f in manifest["files"]:
            now = _current_text(root / f["path"])
            if now is None or sha256(now) != f["after_sha256"]:
                raise ApplyError(f"{f['path']} changed since the fix was applied; not undoing "
                                 "(use --force to restore it anyway)")
    _atomic_replace(root, {f["path"]: (record / f["copy"]).read_bytes() for f in manifest["files"]})
    manifest_path.rename(record / "manifest.undone.json")
    return UndoResult(record, [f["path"] for f in manifest["files"]])

