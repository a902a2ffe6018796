"""The run's own user, mount and network namespaces: a read-only tree and no network.

Runs inside the project's interpreter (the standard library only, ``ctypes`` for the calls).
``enter(writable)`` moves the calling process, and everything it starts, into new namespaces:

* a user namespace that maps the caller's own user and group ids to themselves (files keep
  their owners; other users' files show as ``nobody``), so no privilege is needed;
* a mount namespace whose whole tree is read-only (``mount_setattr(AT_RECURSIVE,
  MOUNT_ATTR_RDONLY)``, Linux 5.12+) except ``writable``, each bind-mounted onto itself first
  and made writable again: a ``chmod``, ``chown``, ``utime`` or ``setxattr`` anywhere else
  fails with EROFS, which Landlock (no right for metadata) cannot say.  Device files (/dev/null,
  terminals) stay writable: a read-only mount does not cover them.  The new mounts never reach
  the host: mounts copied into a less privileged namespace propagate to it, never back;
* a network namespace with nothing but a loopback that is down: no UDP, raw or TCP packet
  leaves the run, a netlink dump shows nothing of the host, and abstract unix sockets (a
  network namespace's own) reach no process outside.

It must run while the process has one thread, before Landlock (which forbids mount changes to
a confined process).  Where unprivileged user namespaces are refused (a container without
them) it fails at the first step and changes nothing.  Where they are half refused (Ubuntu
24.04's AppArmor rule lets ``unshare`` succeed, then refuses the id maps: a process left there
could create no file), ``enter`` must not be tried at all: ``available`` tries it once in a
throwaway child first.
"""

from __future__ import annotations

import os

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_BIND, _MS_REC = 4096, 16384
_SYS_MOUNT_SETATTR = 442  # the generic number: the same on x86_64 and aarch64
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_MOUNT_ATTR_RDONLY = 1


def enter(writable: list[str]) -> tuple[str, str]:
    """Enter the namespaces; returns what holds (``"mount+net namespaces"``) and, when something
    could not be done, why ("" when all of it holds)."""
    import ctypes

    libc, MountAttr = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(ctypes.c_int(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET)) != 0:
        return "", f"unshare(CLONE_NEWUSER) failed: {_errno_text()}"
    try:
        # setgroups must be denied before an unprivileged process may write its gid_map.
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
    except OSError as exc:
        return "net namespace", f"cannot map the user id into the new namespace: {exc}"
    roots = _mountable(writable)
    for path in roots:
        raw = path.encode()
        if libc.mount(raw, raw, None, ctypes.c_ulong(_MS_BIND | _MS_REC), None) != 0:
            return "net namespace", f"bind mount of {path} failed: {_errno_text()}"

    def setattr_(path: bytes, flags: int, attr: MountAttr) -> bool:
        return libc.syscall(ctypes.c_long(_SYS_MOUNT_SETATTR), ctypes.c_int(_AT_FDCWD), path,
                            ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0

    if not setattr_(b"/", _AT_RECURSIVE, MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)):
        return "net namespace", f"mount_setattr(MOUNT_ATTR_RDONLY) failed: {_errno_text()}"
    # Each writable root is a mount of its own now: only that mount becomes writable again (a
    # mount below it, read-only before, stays so).
    for path in roots:
        if not setattr_(path.encode(), 0, MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0)):
            return "mount+net namespaces", f"{path} stays read-only: mount_setattr failed: {_errno_text()}"
    return "mount+net namespaces", ""


_AVAILABLE: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """Whether ``enter`` works here, and why not: tried once per process in a forked child
    (the fork server asks before it forks any run, so its runs inherit the answer)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = _try_in_child()
    return _AVAILABLE


def _try_in_child() -> tuple[bool, str]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            layers, gap = enter([])
            os.write(write, (gap or ("" if "mount" in layers else "no mount namespace") or "ok").encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = b""
        while chunk := os.read(read, 4096):
            answer += chunk
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    text = answer.decode(errors="replace")
    return (True, "") if text == "ok" else (False, text or "the namespace probe died")


_LIBC: tuple | None = None


def _libc() -> tuple:
    """libc and the ``struct mount_attr`` type, made once per process (the fork server does it
    before it forks: making them in each run costs copy-on-write faults)."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        class MountAttr(ctypes.Structure):
            _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                        ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

        _LIBC = (ctypes.CDLL(None, use_errno=True), MountAttr)
    return _LIBC


prepare = _libc


def _mountable(writable: list[str]) -> list[str]:
    """The existing writable paths, resolved, each once, parents before children (a child's
    bind must land on top of its parent's)."""
    seen: dict[str, None] = {}
    for path in writable:
        if not path:
            continue
        real = os.path.realpath(path)
        if os.path.exists(real):
            seen.setdefault(real, None)
    return sorted(seen, key=lambda p: p.count(os.sep))


def _errno_text() -> str:
    import ctypes

    code = ctypes.get_errno()
    return f"{os.strerror(code)} (errno {code})"
