"""Writing a verified fix to the user's tree, and undoing it.

Keeps docs/ARCHITECTURE.md invariants 1 and 5: a file is written only when its content is still exactly
what the fix was computed against -- the atomic exchange that puts the fix in place hands back
what was there, and that is what gets compared -- a patch goes in whole or not at all, the
displaced file itself is the undo copy, and a process killed at any instant leaves neither a
half-applied patch, nor a temp file in the project, nor an undo record of a fix never applied
(the next run finishes or rolls back what it finds).  One file's exchange is ``exchange``'s
part, all of a patch's files and the crash safety ``journal``'s; this module checks a patch
against the project and keeps the undo records.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ApplyError
from ..paths import project_cache
from ..sandbox.workspace import encode_source, read_source
from .exchange import Swap
from .journal import locked, recover_locked, swap_all, write_json
from .patch import FileEdit, Patch, sha256

log = logging.getLogger(__name__)


def _current_text(path: Path) -> str | None:
    try:
        return read_source(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ApplyError(f"cannot read {path}: {exc}; nothing was written") from exc


def _check_path(root: Path, rel: str) -> None:
    target = (root / rel).resolve()
    if not str(target).startswith(str(root) + os.sep) or (root / rel).is_symlink():
        raise ApplyError(f"{rel}: outside the project or a symlink; nothing was written")


def _check_writable(root: Path, patch: Patch) -> None:
    """Refuse before anything is journaled when a file's folder cannot take the temp beside it:
    on a read-only file system even the cleanup of a temp that was never made fails, and the
    journal would be left for the next run to trip over (a user's ``chmod -R a-w``, a read-only
    mount, ``chattr +i``: root's writes are refused by the last two as well)."""
    for folder in sorted({(root / e.path).parent for e in patch.edits}):
        try:
            read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) if hasattr(os, "statvfs") else False
        except OSError:
            continue  # a folder that is not there yet: the write itself says what is wrong
        if read_only or not os.access(folder, os.W_OK | os.X_OK):
            where = folder.relative_to(root).as_posix() if folder != root else "the project folder"
            why = "is on a read-only file system" if read_only else "is not writable"
            raise ApplyError(f"cannot write the fix: {where} {why}; nothing was written")


def _encode(root: Path, e: FileEdit) -> bytes:
    try:
        return encode_source(e.after, like=root / e.path)
    except UnicodeEncodeError as exc:
        raise ApplyError(f"{e.path}: the fix cannot be written in the file's encoding ({exc.encoding}); "
                         "nothing was written") from exc


def _record_name() -> str:
    # Nanosecond names sort in the order fixes were applied; undo takes the newest.
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


def apply_patch(root: Path, patch: Patch, *, cache: Path | None = None) -> Path:
    """Write ``patch`` to the project at ``root``; returns the undo record's folder.

    Refuses (ApplyError, nothing written) when any file no longer has the text the patch was
    computed against, or a path leaves the project.  Each file is exchanged atomically with a
    temp holding the fix, and what that hands back is compared with the text the fix was computed
    on; any difference exchanges every file back.  So a save by the user that lands before the
    exchange -- a rename over the path (an editor's atomic save) or a write into the file -- is
    seen and refused, and one that lands after it edits the fix: nothing is lost either way.  The
    displaced file itself becomes the undo copy.

    The window that remains: a write into the file that was opened (or whose path was looked up)
    before the exchange but lands after the last comparison -- an append through a long-open
    handle, or a save preempted inside its open() -- goes into the displaced file, i.e. into the
    undo copy, not the project; ``frognano undo --force`` brings it back.
    Where the filesystem cannot exchange (EINVAL: some network and FUSE filesystems; platforms
    other than Linux and macOS) the fallback hard-links the file aside, compares it, checks the
    path still names it and renames the fix over it: a rename over the path in the microseconds
    between that check and the rename is lost.
    """
    root = root.resolve()
    for e in patch.edits:
        _check_path(root, e.path)
    if len({e.path for e in patch.edits}) != len(patch.edits):
        raise ApplyError("the fix names a file twice; nothing was written")
    _check_writable(root, patch)
    undo_root = (cache or project_cache(root)) / "undo"
    changed = "{path} changed since the fix was computed; nothing was written (run frognano fix again)"
    with locked(undo_root, root):
        recover_locked(root, undo_root, {(root / e.path).parent for e in patch.edits})
        for e in patch.edits:  # the early, cheap refusal; the swap below is the real check
            if _current_text(root / e.path) != e.before:
                raise ApplyError(changed.format(path=e.path))
        swaps = [Swap.make(root, e.path, _encode(root, e), sha256(e.before), f"{i}.before")
                 for i, e in enumerate(patch.edits)]
        record = _record_name()
        manifest = {"root": str(root), "time": time.time(),
                    "files": [{"path": e.path, "copy": s.copy, "after_sha256": sha256(e.after)}
                              for e, s in zip(patch.edits, swaps)]}
        swap_all(undo_root, {"op": "apply", "root": str(root), "record": record, "manifest": manifest},
                  swaps, changed)
    log.info("applied %d file(s); undo record %s", len(patch.edits), undo_root / record)
    return undo_root / record


def record_applied(root: Path, patch: Patch, *, cache: Path | None = None) -> Path:
    """Keep the undo record of ``patch`` written by someone else -- an editor that applied the
    fix's code action and saved -- so ``undo_last`` restores it as it restores ``apply_patch``'s.

    Every file must hold the fix's text now (ApplyError otherwise, nothing kept); its copy is the
    text the fix replaced, in the file's encoding.  The manifest is written last, so a record cut
    short is never one ``undo_last`` takes."""
    root = root.resolve()
    for e in patch.edits:
        _check_path(root, e.path)
    undo_root = (cache or project_cache(root)) / "undo"
    with locked(undo_root, root):
        for e in patch.edits:
            if _current_text(root / e.path) != e.after:
                raise ApplyError(f"{e.path} does not hold the fix; no undo record kept")
        record = undo_root / _record_name()
        record.mkdir()
        files = []
        for i, e in enumerate(patch.edits):
            (record / f"{i}.before").write_bytes(encode_source(e.before, like=root / e.path))
            files.append({"path": e.path, "copy": f"{i}.before", "after_sha256": sha256(e.after)})
        write_json(record / "manifest.json", {"root": str(root), "time": time.time(), "files": files,
                                               "by": "editor"})
    log.info("recorded the fix applied in the editor (%d file(s)); undo record %s", len(patch.edits), record)
    return record


@dataclass
class UndoResult:
    record: Path
    files: list[str]


def undo_last(root: Path, *, cache: Path | None = None, force: bool = False) -> UndoResult:
    """Restore the files of the most recent applied fix that has not been undone yet.

    The same exchange as ``apply_patch``: each file is swapped with its undo copy only while it
    still holds the fix's text (unless ``force``); what undo displaced is kept in the record.
    """
    root = root.resolve()
    base = (cache or project_cache(root)) / "undo"
    if not base.is_dir():
        raise ApplyError(f"nothing to undo for {root}")
    with locked(base, root):
        recover_locked(root, base, set())
        records = sorted((p for p in base.glob("*/manifest.json")), key=lambda p: p.parent.name)
        if not records:
            raise ApplyError(f"nothing to undo for {root}")
        manifest_path = records[-1]
        record = manifest_path.parent
        manifest = json.loads(manifest_path.read_text())
        changed = ("{path} changed since the fix was applied; not undoing "
                   "(use --force to restore it anyway)")
        for f in manifest["files"]:
            _check_path(root, f["path"])
            if not force:
                now = _current_text(root / f["path"])
                if now is None or sha256(now) != f["after_sha256"]:
                    raise ApplyError(changed.format(path=f["path"]))
        swaps = [Swap.make(root, f["path"], (record / f["copy"]).read_bytes(),
                            None if force else f["after_sha256"], f"{i}.undone")
                 for i, f in enumerate(manifest["files"])]
        swap_all(base, {"op": "undo", "root": str(root), "record": record.name}, swaps, changed)
    return UndoResult(record, [f["path"] for f in manifest["files"]])


def recover(root: Path, *, cache: Path | None = None) -> list[str]:
    """Resolve what a killed ``apply_patch``/``undo_last`` left for the project at ``root``: an
    interrupted write is completed when every file was swapped and checked, else rolled back;
    stray temps are removed.  Returns one note per resolved write.  Never raises for I/O."""
    root = Path(root).resolve()
    undo_root = (cache or project_cache(root)) / "undo"
    if not undo_root.is_dir():
        return []
    try:
        with locked(undo_root, root):
            return recover_locked(root, undo_root, set())
    except (OSError, ApplyError) as exc:
        log.warning("cannot check %s for interrupted writes: %s", undo_root, exc)
        return []
