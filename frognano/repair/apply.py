"""Writing a verified fix to the user's tree, and undoing it.

Keeps DESIGN.md invariants 1 and 5: a file is written only when its content is still exactly
what the fix was computed against -- the atomic exchange that puts the fix in place hands back
what was there, and that is what gets compared -- a patch goes in whole or not at all, the
displaced file itself is the undo copy, and a process killed at any instant leaves neither a
half-applied patch, nor a temp file in the project, nor an undo record of a fix never applied
(the next run finishes or rolls back what it finds).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import json
import logging
import os
import platform
import re
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ApplyError
from ..paths import project_cache
from ..sandbox.workspace import encode_source, read_source
from .patch import FileEdit, Patch, sha256

log = logging.getLogger(__name__)


# -- applying and undoing -----------------------------------------------------------------------
#
# A fix goes in by *exchanging* each file with a temp file beside it that holds the new text
# (Linux renameat2(RENAME_EXCHANGE), macOS renamex_np(RENAME_SWAP)): one atomic step puts the fix
# at the path and hands back, under the temp's name, exactly the file that was there.  That
# displaced file is compared with the text the fix was computed on; on any difference every file
# already exchanged is exchanged back.  The swap itself is the check, and the displaced file
# itself (its inode, not a copy) becomes the undo copy.  ``undo_last`` goes the same way back.
#
# Crash safety (kill -9 at any instant): under a per-project lock, a journal
# ``undo/<record>.journal.json`` naming every temp is written before the first temp exists, and is
# removed only once the record is complete (the manifest written) or gone (rolled back).  The next
# apply, undo or ``frognano fix`` of the project resolves a journal left behind from the files on
# disk: every file exchanged and every displaced file as expected -> the record is completed;
# otherwise the exchanged files are exchanged back, the temps removed and the record deleted.  So
# the project is never left half-patched, no temp stays in it, and ``frognano undo`` never
# "undoes" a fix that was never applied.

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.(?P<token>[0-9a-f]{8})\.frognano$")
_STALE_TEMP_SECONDS = 60.0  # a temp this old is stale even if its pid is alive (an apply takes ms)
_LOCK_SECONDS = 30.0

AT_FDCWD = -100
RENAME_EXCHANGE = 2  # linux/fs.h
RENAME_SWAP = 0x2  # macOS stdio.h, for renamex_np
_RENAMEAT2_SYSCALL = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}
# What renameat2 / renamex_np answer when the kernel or the filesystem cannot exchange (EPERM:
# a seccomp filter that blocks renameat2, as older container runtimes did).
_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM})


def _load_exchange() -> Callable[[bytes, bytes], int] | None:
    """The platform's call that atomically exchanges two paths (returns 0 on success), or None."""
    try:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            fn = getattr(libc, "renameat2", None)  # glibc >= 2.28
            if fn is not None:
                fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                fn.restype = ctypes.c_int
                return lambda a, b: fn(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
            nr = _RENAMEAT2_SYSCALL.get(platform.machine().lower())  # older glibc, musl
            if nr is None:
                return None
            syscall = libc.syscall
            syscall.restype = ctypes.c_long
            return lambda a, b: syscall(ctypes.c_long(nr), ctypes.c_long(AT_FDCWD), ctypes.c_char_p(a),
                                        ctypes.c_long(AT_FDCWD), ctypes.c_char_p(b),
                                        ctypes.c_ulong(RENAME_EXCHANGE))
        if sys.platform == "darwin":
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.dylib", use_errno=True)
            fn = libc.renamex_np  # macOS >= 10.12
            fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            return lambda a, b: fn(a, b, RENAME_SWAP)
    except (OSError, AttributeError):
        pass
    return None


_EXCHANGE = _load_exchange()


def _exchange(a: Path, b: Path) -> None:
    """Atomically exchange the files at ``a`` and ``b`` (both must exist).

    OSError with errno EINVAL, ENOSYS or ENOTSUP when the platform or filesystem cannot.
    """
    if _EXCHANGE is None:
        raise OSError(errno.ENOSYS, "atomic exchange is not available on this platform", str(a))
    if _EXCHANGE(os.fsencode(a), os.fsencode(b)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a), None, str(b))


class _Changed(Exception):
    """A file was not what the swap expected (that file is already as it was)."""


@dataclass
class _Swap:
    """One file to swap: ``temp`` (beside ``target``) holds ``data``; once swapped in it holds
    what was displaced.  ``side`` is a second temp name the fallback uses for a moment."""

    rel: str
    target: Path
    temp: Path
    side: Path
    new_sha: str  # sha256 of the bytes that go in
    expect: str | None  # sha256 of the text the displaced file must hold; None: anything
    copy: str  # the name, in the undo record, of the displaced file
    data: bytes = b""
    how: str = ""  # "exchange" | "fallback" | "created" once swapped in

    def entry(self) -> dict:
        return {"path": self.rel, "temp": self.temp.name, "side": self.side.name, "copy": self.copy,
                "new_sha256": self.new_sha, "expect_sha256": self.expect}

    @classmethod
    def make(cls, root: Path, rel: str, data: bytes, expect: str | None, copy: str) -> "_Swap":
        target = root / rel
        return cls(rel, target, _temp_beside(target), _temp_beside(target), _bytes_sha(data), expect,
                   copy, data)

    @classmethod
    def from_entry(cls, root: Path, f: dict) -> "_Swap":
        target = root / f["path"]
        return cls(f["path"], target, target.with_name(f["temp"]), target.with_name(f["side"]),
                   f["new_sha256"], f["expect_sha256"], f["copy"])


def _bytes_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_beside(target: Path) -> Path:
    """``.NAME.<pid>.<hex8>.frognano``: recognisably ours, and whose owner can be checked."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.frognano")


def _holds(path: Path, expect: str | None) -> bool:
    """Whether ``path`` is a regular file whose text has the sha256 ``expect`` (None: any file)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        return expect is None or sha256(read_source(path)) == expect
    except (OSError, UnicodeDecodeError):
        return False


def _file_sha(path: Path) -> str | None:
    try:
        return _bytes_sha(path.read_bytes())
    except OSError:
        return None


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _write_temp(s: _Swap) -> None:
    """Create ``s.temp`` holding ``s.data``, with the target's mode, flushed to disk."""
    try:
        mode = stat.S_IMODE(os.stat(s.target).st_mode)
    except FileNotFoundError:  # a forced undo of a file deleted since
        mode = 0o644
    fd = os.open(s.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode) if hasattr(os, "fchmod") else os.chmod(s.temp, mode)
        view = memoryview(s.data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _swap_in(s: _Swap) -> None:
    """Put ``s.temp`` at ``s.target``; ``s.temp`` then holds the displaced file, which must hold
    ``s.expect``, else _Changed (with this file put back)."""
    try:
        _exchange(s.temp, s.target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            if s.expect is not None or os.path.lexists(s.target):
                raise _Changed from None
            os.link(s.temp, s.target)  # a forced undo of a deleted file; never over a new one
            os.unlink(s.temp)
            s.how = "created"
            return
        if exc.errno not in _UNSUPPORTED:
            raise
        _fallback_swap_in(s)
        return
    s.how = "exchange"
    if not _holds(s.temp, s.expect):
        _swap_out(s)
        raise _Changed


def _fallback_swap_in(s: _Swap) -> None:
    """Where the filesystem cannot exchange: hard-link the current file aside (so it stays the
    undo copy), compare it, check the path still names that very file, then rename the fix over
    it.  A rename over the path in the microseconds between that last check and the rename is
    lost; a write before it is seen, a write into the old file after it lands in the undo copy."""
    try:
        os.link(s.target, s.side)
        linked = True
    except FileNotFoundError:
        raise _Changed from None
    except OSError:  # no hard links on this filesystem: a copy
        shutil.copyfile(s.target, s.side)
        linked = False
    try:
        if not _holds(s.side, s.expect):
            raise _Changed
        now = os.lstat(s.target)
        same = (os.path.samestat(now, os.lstat(s.side)) if linked
                else _file_sha(s.target) == _file_sha(s.side))
        if not stat.S_ISREG(now.st_mode) or not same:
            raise _Changed
        os.replace(s.temp, s.target)
    except BaseException:
        _unlink(s.side)
        raise
    s.how = "fallback"
    os.rename(s.side, s.temp)


def _swap_out(s: _Swap) -> None:
    """Put back what ``s`` displaced, unless the user wrote to the path since: their write wins."""
    try:
        if s.how == "exchange":
            _exchange(s.temp, s.target)
            if _file_sha(s.temp) != s.new_sha:  # written to while the fix was there: keep that
                _exchange(s.temp, s.target)
        elif s.how == "fallback" and _file_sha(s.target) == s.new_sha:
            os.replace(s.temp, s.target)
        elif s.how == "created" and _file_sha(s.target) == s.new_sha:
            os.unlink(s.target)
    except OSError as exc:  # e.g. deleted meanwhile: leave what the user did
        log.warning("could not put back %s: %s", s.target, exc)
    s.how = ""


def _move_into(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``: the same file when on one filesystem, else a copy."""
    try:
        os.replace(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    part = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fin, open(part, "wb") as fout:
        shutil.copyfileobj(fin, fout)
        fout.flush()
        os.fsync(fout.fileno())  # the original goes next: its copy must be on disk first
    os.replace(part, dst)
    os.unlink(src)


def _write_json(path: Path, data: dict) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data, indent=1))
    os.replace(part, path)


@contextlib.contextmanager
def _locked(undo_root: Path, root: Path) -> Iterator[None]:
    """The project's undo folder (created if need be), held by one apply, undo or recovery at a
    time, threads and processes alike."""
    try:
        undo_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(undo_root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ApplyError(f"cannot write the undo record in {undo_root}: {exc.strerror or exc}; "
                         "nothing was written") from exc
    try:
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the swap's own check still holds
            fcntl = None
        deadline = time.monotonic() + _LOCK_SECONDS
        while fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ApplyError(f"another frognano is writing to {root}; nothing was written") from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the lock


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would terminate it there: age alone decides
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sweep(folders: set[Path]) -> None:
    """Remove temps a killed apply left in ``folders``: only names ``.NAME.<pid>.<hex8>.frognano``
    whose process is gone or that are older than a minute."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            m = _TEMP.match(entry.name)
            if m is None:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and (not _pid_alive(int(m["pid"]))
                                                 or time.time() - st.st_mtime > _STALE_TEMP_SECONDS):
                    os.unlink(entry.path)
                    log.info("removed a stale temp file %s", entry.path)


def _commit(journal_path: Path, journal: dict, swaps: list[_Swap]) -> None:
    """Every file is swapped in and checked: the displaced files go into the record, then the
    record is marked (apply: its manifest; undo: the manifest renamed undone), then the journal
    goes."""
    record = journal_path.parent / journal["record"]
    for s in swaps:
        if s.how != "created" and s.temp.exists():
            _move_into(s.temp, record / s.copy)
        _unlink(s.side)
    if journal["op"] == "apply":
        _write_json(record / "manifest.json", journal["manifest"])
    else:
        with contextlib.suppress(FileNotFoundError):
            os.replace(record / "manifest.json", record / "manifest.undone.json")
    os.unlink(journal_path)


def _discard(journal_path: Path, journal: dict, swaps: list[_Swap]) -> None:
    """Nothing was swapped in (or all of it was put back): remove every trace."""
    record = journal_path.parent / journal["record"]
    for s in swaps:
        _unlink(s.temp)
        _unlink(s.side)
        if journal["op"] == "undo":
            _unlink(record / s.copy)
            _unlink(record / (s.copy + ".part"))
    if journal["op"] == "apply":
        shutil.rmtree(record, ignore_errors=True)
    _unlink(journal_path)


def _resolve(journal_path: Path) -> str:
    """Finish or roll back the apply or undo that ``journal_path`` describes, judging from the
    files on disk (its process is gone).  Returns "completed" or "rolled back"."""
    journal = json.loads(journal_path.read_text())
    root, record = Path(journal["root"]), journal_path.parent / journal["record"]
    swaps = [_Swap.from_entry(root, f) for f in journal["files"]]
    for s in swaps:  # the fallback's second name: a link to the target, or the displaced file
        if os.path.lexists(s.side):
            if os.path.lexists(s.temp):
                _unlink(s.side)
            else:
                os.rename(s.side, s.temp)
    displaced: list[Path] = []
    if journal["ready"]:  # every temp was complete: a temp not holding the new bytes was swapped
        for s in swaps:
            if s.temp.exists() and _file_sha(s.temp) != s.new_sha:
                s.how = "exchange"
                displaced.append(s.temp)
            elif not s.temp.exists() and (record / s.copy).exists():
                s.how = "moved"  # already moved into the record: all were swapped and checked
                displaced.append(record / s.copy)
    if len(displaced) == len(swaps) and all(_holds(p, s.expect) for s, p in zip(swaps, displaced)):
        _commit(journal_path, journal, swaps)
        return "completed"
    for s in reversed(swaps):
        if s.how == "exchange":
            try:
                _exchange(s.temp, s.target)
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    log.warning("could not put back %s: %s", s.target, exc)
                    continue
                s.how = "fallback"  # it went in by the fallback: put it back the same way
            _swap_out_after(s)
    _discard(journal_path, journal, swaps)
    return "rolled back"


def _swap_out_after(s: _Swap) -> None:
    """The second half of putting back a file in ``_resolve``."""
    if s.how == "exchange":
        if _file_sha(s.temp) not in (s.new_sha, None):  # written to while the fix was there
            with contextlib.suppress(OSError):
                _exchange(s.temp, s.target)
    elif _file_sha(s.target) == s.new_sha:
        os.replace(s.temp, s.target)


def _recover_locked(root: Path, undo_root: Path, folders: set[Path]) -> list[str]:
    notes = []
    with os.scandir(undo_root) as entries:
        names = sorted(e.name for e in entries)
    for part in (n for n in names if n.endswith(".part")):  # a JSON write that was killed
        _unlink(undo_root / part)
    for journal_path in (undo_root / n for n in names if n.endswith(".journal.json")):
        try:
            journal = json.loads(journal_path.read_text())
            folders |= {(Path(journal["root"]) / f["path"]).parent for f in journal["files"]}
            outcome = _resolve(journal_path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cannot resolve the interrupted write %s: %s", journal_path, exc)
            continue
        note = f"an interrupted {'fix --apply' if journal['op'] == 'apply' else 'undo'} was {outcome}"
        log.warning("%s (%s)", note, ", ".join(f["path"] for f in journal["files"]))
        notes.append(note)
    _sweep(folders)
    return notes


def recover(root: Path, *, cache: Path | None = None) -> list[str]:
    """Resolve what a killed ``apply_patch``/``undo_last`` left for the project at ``root``: an
    interrupted write is completed when every file was swapped and checked, else rolled back;
    stray temps are removed.  Returns one note per resolved write.  Never raises for I/O."""
    root = Path(root).resolve()
    undo_root = (cache or project_cache(root)) / "undo"
    if not undo_root.is_dir():
        return []
    try:
        with _locked(undo_root, root):
            return _recover_locked(root, undo_root, set())
    except (OSError, ApplyError) as exc:
        log.warning("cannot check %s for interrupted writes: %s", undo_root, exc)
        return []


def _swap_all(undo_root: Path, journal: dict, swaps: list[_Swap], changed: str) -> None:
    """Swap every file in, or none (see the comment at the top of this section)."""
    journal_path = undo_root / f"{journal['record']}.journal.json"
    journal["files"] = [s.entry() for s in swaps]
    journal["ready"] = False
    current = str(journal_path)  # what an OSError is about
    try:
        _write_json(journal_path, journal)
        if journal["op"] == "apply":
            (undo_root / journal["record"]).mkdir()
        for s in swaps:
            current = s.rel
            _write_temp(s)
        journal["ready"] = True
        _write_json(journal_path, journal)
        done: list[_Swap] = []
        for s in swaps:
            current = s.rel
            try:
                _swap_in(s)
                done.append(s)
            except _Changed:
                changed_path = s.rel
                break
        else:
            # Once more, after the last exchange: a write that straddled an earlier file's
            # exchange (its open came first) has landed in that displaced file by now.
            changed_path = next((s.rel for s in swaps if s.how != "created" and not _holds(s.temp, s.expect)),
                                None)
        if changed_path is not None:
            for d in reversed(done):
                _swap_out(d)
            _discard(journal_path, journal, swaps)
            raise ApplyError(changed.format(path=changed_path))
        _commit(journal_path, journal, swaps)
    except ApplyError:
        raise
    except BaseException as exc:
        try:
            outcome = _resolve(journal_path) if journal_path.exists() else "rolled back"
        except Exception:  # noqa: BLE001 - the next run resolves it; say so
            log.exception("cannot finish or roll back %s", journal_path)
            outcome = "left"
        if not isinstance(exc, OSError):
            raise
        if outcome == "completed":
            return
        what = f"{exc.strerror or exc}"
        if outcome == "left":
            raise ApplyError(f"cannot write {current}: {what}; the next frognano run in this project "
                             "finishes or rolls back this write") from exc
        raise ApplyError(f"cannot write {current}: {what}; nothing was written") from exc


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
    undo_root = (cache or project_cache(root)) / "undo"
    changed = "{path} changed since the fix was computed; nothing was written (run frognano fix again)"
    with _locked(undo_root, root):
        _recover_locked(root, undo_root, {(root / e.path).parent for e in patch.edits})
        for e in patch.edits:  # the early, cheap refusal; the swap below is the real check
            if _current_text(root / e.path) != e.before:
                raise ApplyError(changed.format(path=e.path))
        swaps = [_Swap.make(root, e.path, _encode(root, e), sha256(e.before), f"{i}.before")
                 for i, e in enumerate(patch.edits)]
        record = _record_name()
        manifest = {"root": str(root), "time": time.time(),
                    "files": [{"path": e.path, "copy": s.copy, "after_sha256": sha256(e.after)}
                              for e, s in zip(patch.edits, swaps)]}
        _swap_all(undo_root, {"op": "apply", "root": str(root), "record": record, "manifest": manifest},
                  swaps, changed)
    log.info("applied %d file(s); undo record %s", len(patch.edits), undo_root / record)
    return undo_root / record


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
    with _locked(base, root):
        _recover_locked(root, base, set())
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
        swaps = [_Swap.make(root, f["path"], (record / f["copy"]).read_bytes(),
                            None if force else f["after_sha256"], f"{i}.undone")
                 for i, f in enumerate(manifest["files"])]
        _swap_all(base, {"op": "undo", "root": str(root), "record": record.name}, swaps, changed)
    return UndoResult(record, [f["path"] for f in manifest["files"]])
