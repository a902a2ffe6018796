"""Whether FrogNano's cache can take a shadow copy and a run's results, and the named error
when it cannot (a full disk, a quota, a file size limit): exit 2 with one line that says what
to free or raise, never a run whose results were cut and so looked like a crashed test."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Iterator
from pathlib import Path

from ..errors import FrogNanoError

__all__ = ["MIN_FILE_SIZE_LIMIT", "MIN_FREE_SPACE", "StorageError", "check_file_size_limit", "check_free_space",
           "storage_error", "storage_errors"]


class StorageError(FrogNanoError):
    """FrogNano's cache cannot be written (a full disk, a quota, a file size limit): exit 2."""


MIN_FILE_SIZE_LIMIT = 16 << 20  # bytes: the shadow's files and a run's results must fit


def check_file_size_limit() -> None:
    """Refuse a file size limit (``ulimit -f``) too small for the shadow and the results files:
    with ``ulimit -f 1`` the results of a run were cut, a test seemed to crash, and a candidate
    then "fixed" it.  (Python ignores SIGXFSZ, so a write over it fails with EFBIG instead.)"""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and soft < MIN_FILE_SIZE_LIMIT:
        raise StorageError(f"the file size limit (ulimit -f) is {soft} bytes: FrogNano's shadow copy and "
                           f"test results need at least {MIN_FILE_SIZE_LIMIT >> 20} MiB; raise it "
                           "(ulimit -f unlimited)")


MIN_FREE_SPACE = 8 << 20  # bytes: a run's request, results and log, with room to spare


def check_free_space(cache: Path) -> None:
    """Refuse a cache disk that is (nearly) full before anything runs: a run whose results
    cannot be written looks like a test process that died, or a test that failed."""
    try:
        st = os.statvfs(cache)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_SPACE:
        raise StorageError(f"no space left on the disk of FrogNano's cache ({cache}: {free >> 10} KiB free, "
                           f"{MIN_FREE_SPACE >> 20} MiB needed): free some, or set FROGNANO_CACHE_DIR to a "
                           "folder on another disk")


def storage_error(exc: OSError, cache: Path) -> StorageError | None:
    """The named error of a write that failed for want of room, None for any other failure."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(f"no space left on the disk of FrogNano's cache ({cache}): free some, or set "
                            "FROGNANO_CACHE_DIR to a folder on another disk")
    if exc.errno == errno.EFBIG:
        return StorageError(f"a file in FrogNano's cache ({cache}) is over the file size limit "
                            "(ulimit -f): raise it (ulimit -f unlimited)")
    return None


@contextlib.contextmanager
def storage_errors(cache: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        error = storage_error(exc, cache)
        if error is None:
            raise
        raise error from exc
