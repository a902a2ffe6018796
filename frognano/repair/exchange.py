"""Putting one file in place atomically, checking what it displaced, and putting that back.

A fix goes in by *exchanging* each file with a temp file beside it that holds the new text
(Linux renameat2(RENAME_EXCHANGE), macOS renamex_np(RENAME_SWAP)): one atomic step puts the fix
at the path and hands back, under the temp's name, exactly the file that was there.  That
displaced file is compared with the text the fix was computed on; on any difference the file is
exchanged back.  The swap itself is the check, and the displaced file itself (its inode, not a
copy) becomes the undo copy.  Where the filesystem cannot exchange, ``_fallback_swap_in`` comes
as close as renames allow.  Doing this for a whole patch, all or nothing and safe against a
crash, is ``journal``'s part.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import logging
import os
import platform
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..sandbox.workspace import read_source
from .patch import sha256

log = logging.getLogger(__name__)

# The temp beside a target (``_temp_beside``): recognisably ours, and whose owner can be checked.
TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.(?P<token>[0-9a-f]{8})\.frognano$")

AT_FDCWD = -100
RENAME_EXCHANGE = 2  # linux/fs.h
RENAME_SWAP = 0x2  # macOS stdio.h, for renamex_np
_RENAMEAT2_SYSCALL = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}
# What renameat2 / renamex_np answer when the kernel or the filesystem cannot exchange (EPERM:
# a seccomp filter that blocks renameat2, as older container runtimes did).
UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EPERM})


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


def exchange_files(a: Path, b: Path) -> None:
    """Atomically exchange the files at ``a`` and ``b`` (both must exist).

    OSError with errno EINVAL, ENOSYS or ENOTSUP when the platform or filesystem cannot.
    """
    if _EXCHANGE is None:
        raise OSError(errno.ENOSYS, "atomic exchange is not available on this platform", str(a))
    if _EXCHANGE(os.fsencode(a), os.fsencode(b)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a), None, str(b))


class Changed(Exception):
    """A file was not what the swap expected (that file is already as it was)."""


@dataclass
class Swap:
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
    def make(cls, root: Path, rel: str, data: bytes, expect: str | None, copy: str) -> "Swap":
        target = root / rel
        return cls(rel, target, _temp_beside(target), _temp_beside(target), _bytes_sha(data), expect,
                   copy, data)

    @classmethod
    def from_entry(cls, root: Path, f: dict) -> "Swap":
        target = root / f["path"]
        return cls(f["path"], target, target.with_name(f["temp"]), target.with_name(f["side"]),
                   f["new_sha256"], f["expect_sha256"], f["copy"])


def _bytes_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_beside(target: Path) -> Path:
    """``.NAME.<pid>.<hex8>.frognano``: recognisably ours, and whose owner can be checked."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.frognano")


def holds(path: Path, expect: str | None) -> bool:
    """Whether ``path`` is a regular file whose text has the sha256 ``expect`` (None: any file)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        return expect is None or sha256(read_source(path)) == expect
    except (OSError, UnicodeDecodeError):
        return False


def file_sha(path: Path) -> str | None:
    try:
        return _bytes_sha(path.read_bytes())
    except OSError:
        return None


def unlink_if_present(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        # A read-only mount answers EROFS even for a path that is not there: a temp never
        # created is as good as removed, and a rollback must not fail on it.
        if os.path.lexists(path):
            raise


def write_temp(s: Swap) -> None:
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


def swap_in(s: Swap) -> None:
    """Put ``s.temp`` at ``s.target``; ``s.temp`` then holds the displaced file, which must hold
    ``s.expect``, else Changed (with this file put back)."""
    try:
        exchange_files(s.temp, s.target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            if s.expect is not None or os.path.lexists(s.target):
                raise Changed from None
            os.link(s.temp, s.target)  # a forced undo of a deleted file; never over a new one
            os.unlink(s.temp)
            s.how = "created"
            return
        if exc.errno not in UNSUPPORTED:
            raise
        _fallback_swap_in(s)
        return
    s.how = "exchange"
    if not holds(s.temp, s.expect):
        swap_out(s)
        raise Changed


def _fallback_swap_in(s: Swap) -> None:
    """Where the filesystem cannot exchange: hard-link the current file aside (so it stays the
    undo copy), compare it, check the path still names that very file, then rename the fix over
    it.  A rename over the path in the microseconds between that last check and the rename is
    lost; a write before it is seen, a write into the old file after it lands in the undo copy."""
    try:
        os.link(s.target, s.side)
        linked = True
    except FileNotFoundError:
        raise Changed from None
    except OSError:  # no hard links on this filesystem: a copy
        shutil.copyfile(s.target, s.side)
        linked = False
    try:
        if not holds(s.side, s.expect):
            raise Changed
        now = os.lstat(s.target)
        same = (os.path.samestat(now, os.lstat(s.side)) if linked
                else file_sha(s.target) == file_sha(s.side))
        if not stat.S_ISREG(now.st_mode) or not same:
            raise Changed
        os.replace(s.temp, s.target)
    except BaseException:
        unlink_if_present(s.side)
        raise
    s.how = "fallback"
    os.rename(s.side, s.temp)


def swap_out(s: Swap) -> None:
    """Put back what ``s`` displaced, unless the user wrote to the path since: their write wins."""
    try:
        if s.how == "exchange":
            exchange_files(s.temp, s.target)
            if file_sha(s.temp) != s.new_sha:  # written to while the fix was there: keep that
                exchange_files(s.temp, s.target)
        elif s.how == "fallback" and file_sha(s.target) == s.new_sha:
            os.replace(s.temp, s.target)
        elif s.how == "created" and file_sha(s.target) == s.new_sha:
            os.unlink(s.target)
    except OSError as exc:  # e.g. deleted meanwhile: leave what the user did
        log.warning("could not put back %s: %s", s.target, exc)
    s.how = ""
