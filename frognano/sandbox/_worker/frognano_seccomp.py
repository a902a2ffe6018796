"""A seccomp filter for a test run: the system calls Landlock and the namespaces cannot express.

Runs inside the project's interpreter (the standard library only, ``ctypes`` for ``prctl``).
``install(network_namespace)`` loads a classic-BPF filter into the calling process; it holds
for the process and everything it starts, for good, and answers EPERM to:

* changing another process's scheduling: ``setpriority``, ``prlimit64`` with a new limit,
  ``sched_setscheduler``/``setparam``/``setattr``/``setaffinity``, ``ioprio_set``, unless the
  target is pid 0 (the caller itself: ``os.nice``, ``resource.setrlimit``).  A caller naming its
  own pid is refused too: the filter is made once for a run's process and all it forks (the
  warm session's runs among them), so no one pid could stand for "itself" in all of them, and
  a test must get the same answer however it runs.  Landlock covers signals (ABI 6) and
  ptrace-style access to processes outside the run; these calls only check the user id.
* raw and packet sockets (``SOCK_RAW``, ``SOCK_PACKET``, ``AF_PACKET``), whatever the family.
* without a network namespace (``network_namespace`` false): netlink sockets (the host's
  interfaces and routes) and IPv4/IPv6 datagram sockets (UDP, ping): Landlock has no UDP right.
* changing the mount tree (``mount``, ``umount2``, ``pivot_root``, ``mount_setattr`` and the new
  mount API): in its own user namespace the run holds CAP_SYS_ADMIN over its mounts, and would
  otherwise make the read-only tree writable again.
* ``io_uring_setup``: io_uring opens sockets without the ``socket`` call the filter checks.
* every call of another architecture's table (i386 or x32 programs on x86_64): the filter
  knows the native numbers only, so a 32-bit program cannot run confined.

Calls whose answer depends only on their number are cached by the kernel (Linux 5.11+), so the
filter costs nothing for the calls a test run makes by the million (read, stat, mmap).
"""

from __future__ import annotations

import errno
import platform
import struct
import sys

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM

# BPF opcodes (linux/bpf_common.h)
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

# struct seccomp_data: nr, arch, instruction pointer, args[6] (little-endian halves)
_NR, _ARCH = 0, 4


def _arg(i: int, high: bool = False) -> int:
    return 16 + 8 * i + (4 if high else 0)


_AF_INET, _AF_INET6, _AF_NETLINK, _AF_PACKET = 2, 10, 16, 17
_SOCK_DGRAM, _SOCK_RAW, _SOCK_PACKET, _SOCK_TYPE_MASK = 2, 3, 10, 0xF
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1

# Per architecture: AUDIT_ARCH value, then the numbers of the calls the filter looks at.
_MOUNT_API = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
              "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467, "io_uring_setup": 425}
_TABLES = {
    "x86_64": (0xC000003E, {
        "socket": 41, "setpriority": 141, "prlimit64": 302, "sched_setparam": 142,
        "sched_setscheduler": 144, "sched_setaffinity": 203, "sched_setattr": 314,
        "ioprio_set": 251, "mount": 165, "umount2": 166, "pivot_root": 155, **_MOUNT_API}),
    "aarch64": (0xC00000B7, {
        "socket": 198, "setpriority": 140, "prlimit64": 261, "sched_setparam": 118,
        "sched_setscheduler": 119, "sched_setaffinity": 122, "sched_setattr": 274,
        "ioprio_set": 30, "mount": 40, "umount2": 39, "pivot_root": 41, **_MOUNT_API}),
}
_X32_BIT = 0x40000000  # x86_64's x32 calls: the same numbers with this bit set


class _Program:
    """A BPF program with labels: ``jump(op, k, yes, no)`` names its targets, ``resolve`` fixes
    the offsets (forward only, as BPF requires)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self.code.append((_LD_ABS, 0, 0, offset))

    def mask(self, k: int) -> None:
        self.code.append((_AND, 0, 0, k))

    def jump(self, op: int, k: int, yes: str | int = 0, no: str | int = 0) -> None:
        self.code.append((op, yes, no, k))

    def ret(self, k: int) -> None:
        self.code.append((_RET, 0, 0, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def resolve(self) -> bytes:
        out = b""
        for pc, (op, yes, no, k) in enumerate(self.code):
            offsets = []
            for target in (yes, no):
                if isinstance(target, str):
                    target = self.labels[target] - pc - 1
                if not 0 <= int(target) <= 255:
                    raise ValueError(f"BPF jump out of range at {pc}")
                offsets.append(int(target))
            out += struct.pack("<HBBI", op, offsets[0], offsets[1], k & 0xFFFFFFFF)
        return out


def program(machine: str, network_namespace: bool) -> bytes | None:
    """The filter for ``machine`` (``platform.machine()``), or None for an unknown one."""
    table = _TABLES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine.lower()))
    if table is None:
        return None
    arch, nr = table
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ, arch, 0, "deny")
    p.load(_NR)
    if arch == _TABLES["x86_64"][0]:
        p.jump(_JGE, _X32_BIT, "deny", 0)
    p.jump(_JEQ, nr["socket"], "socket", 0)
    p.jump(_JEQ, nr["setpriority"], "setpriority", 0)
    p.jump(_JEQ, nr["prlimit64"], "prlimit", 0)
    p.jump(_JEQ, nr["ioprio_set"], "ioprio", 0)
    for name in ("sched_setparam", "sched_setscheduler", "sched_setaffinity", "sched_setattr"):
        p.jump(_JEQ, nr[name], "pid0", 0)
    for name in ("mount", "umount2", "pivot_root", *_MOUNT_API):
        p.jump(_JEQ, nr[name], "deny", 0)
    p.ret(_RET_ALLOW)

    # socket(domain, type, protocol)
    p.label("socket")
    p.load(_arg(0))
    p.jump(_JEQ, _AF_PACKET, "deny", 0)
    if not network_namespace:
        p.jump(_JEQ, _AF_NETLINK, "deny", 0)
    p.load(_arg(1))
    p.mask(_SOCK_TYPE_MASK)  # without SOCK_CLOEXEC and SOCK_NONBLOCK
    p.jump(_JEQ, _SOCK_RAW, "deny", 0)
    p.jump(_JEQ, _SOCK_PACKET, "deny", 0)
    if not network_namespace:
        p.jump(_JEQ, _SOCK_DGRAM, 0, "allow")
        p.load(_arg(0))
        p.jump(_JEQ, _AF_INET, "deny", 0)
        p.jump(_JEQ, _AF_INET6, "deny", 0)
    p.label("allow")
    p.ret(_RET_ALLOW)

    # setpriority(which, who, prio) / ioprio_set(which, who, prio): the caller's own process only
    # (PRIO_PGRP and PRIO_USER with who 0 mean its group and every process of its user).
    p.label("setpriority")
    p.load(_arg(0))
    p.jump(_JEQ, _PRIO_PROCESS, "who", "deny")
    p.label("ioprio")
    p.load(_arg(0))
    p.jump(_JEQ, _IOPRIO_WHO_PROCESS, "who", "deny")
    p.label("who")
    p.load(_arg(1))
    p.jump(_JEQ, 0, "allow2", "deny")

    # prlimit64(pid, resource, new, old): reading anyone's limits is harmless; setting, only ours
    p.label("prlimit")
    p.load(_arg(2))
    p.jump(_JEQ, 0, 0, "pid0")
    p.load(_arg(2, high=True))
    p.jump(_JEQ, 0, "allow2", 0)
    # sched_*(pid, ...): pid_t is an int, so the kernel reads only the low half
    p.label("pid0")
    p.load(_arg(0))
    p.jump(_JEQ, 0, "allow2", "deny")
    p.label("allow2")
    p.ret(_RET_ALLOW)

    p.label("deny")
    p.ret(_RET_EPERM)
    return p.resolve()


_PROGRAMS: dict[bool, bytes | None] = {}


def _program(network_namespace: bool) -> bytes | None:
    """The filter for this machine, made once per process (the fork server does it before it
    forks: building it in each run costs copy-on-write faults, ~0.3 ms)."""
    if network_namespace not in _PROGRAMS:
        _PROGRAMS[network_namespace] = program(platform.machine(), network_namespace)
    return _PROGRAMS[network_namespace]


def prepare() -> None:
    """Build what ``install`` needs ahead (the fork server does, before it forks any run)."""
    _program(True)
    _program(False)
    _libc()


def install(network_namespace: bool) -> tuple[bool, str]:
    """Load the filter into this process for good; (True, "") or (False, why not)."""
    if not sys.platform.startswith("linux"):
        return False, f"seccomp is Linux only ({sys.platform})"
    code = _program(network_namespace)
    if code is None:
        return False, f"no seccomp filter for {platform.machine()}"
    import ctypes

    libc, fprog = _libc()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = fprog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    zero = ctypes.c_ulong(0)
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), zero, zero, zero) != 0:
        return False, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {_errno_text()}"
    if libc.prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                  ctypes.byref(prog), zero, zero) != 0:
        return False, f"seccomp filter refused: {_errno_text()}"
    return True, ""


_LIBC: tuple | None = None


def _libc() -> tuple:
    """libc and the ``struct sock_fprog`` type, made once per process."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        _LIBC = (ctypes.CDLL(None, use_errno=True), Fprog)
    return _LIBC


def _errno_text() -> str:
    import ctypes
    import os

    code = ctypes.get_errno()
    return f"{os.strerror(code)} (errno {code})"
