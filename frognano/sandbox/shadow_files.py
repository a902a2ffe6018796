"""Writing a shadow copy's files, and knowing whether a run rewrote one since.

A test run of the code under test can leave anything in the shadow: a symlink where a file was,
a hard link to a file outside, a folder.  A file FrogNano writes there therefore replaces what
is there (``replace_bytes``), never writes through it; ``copy_file`` keeps sparse files sparse;
``shadow_signature`` is how a file looked when FrogNano last wrote it.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

__all__ = ["copy_file", "replace_bytes", "shadow_signature", "stat_signature"]


def replace_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` as a new file: whatever a run left there (a symlink to a file
    outside the shadow, a hard link, a folder) is replaced, never written through."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    tmp = path.with_name(f".{path.name}.frognano-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_file(src: Path, dest: Path) -> None:
    """``shutil.copyfile``, except that a sparse file stays sparse: only its data is copied and
    its holes stay holes (a 2 GB disk image with a few MB in it took 82 s and 2 GB fully
    allocated).  Files with no holes take the ordinary fast path."""
    st = os.stat(src)
    if not hasattr(os, "SEEK_DATA") or st.st_blocks * 512 >= st.st_size:
        shutil.copyfile(src, dest)
        return
    with open(src, "rb") as fin, open(dest, "wb") as fout:
        fd_in, fd_out = fin.fileno(), fout.fileno()
        offset = 0
        try:
            while offset < st.st_size:
                try:
                    start = os.lseek(fd_in, offset, os.SEEK_DATA)
                except OSError:  # ENXIO: no data after offset, only a hole to the end
                    break
                end = os.lseek(fd_in, start, os.SEEK_HOLE)
                os.lseek(fd_in, start, os.SEEK_SET)
                os.lseek(fd_out, start, os.SEEK_SET)
                left = end - start
                while left > 0:
                    chunk = os.read(fd_in, min(left, 1 << 20))
                    if not chunk:
                        break
                    os.write(fd_out, chunk)
                    left -= len(chunk)
                offset = end
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            fout.close()  # SEEK_DATA not supported here after all: the plain copy
            shutil.copyfile(src, dest)
            return
        fout.truncate(st.st_size)  # the trailing hole


def shadow_signature(path: Path) -> list[int] | None:
    """How a shadow file looks on disk, without reading it: any rewrite, replacement or chmod
    changes the status-change time (which, unlike mtime, no process can set back)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return stat_signature(st)


def stat_signature(st: os.stat_result) -> list[int]:
    # Stronger than project_paths.file_signature (size, mtime), which serves caches of the
    # user's files: here the code under test is the adversary, and it can set mtime back.
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]
