"""Confinement of a test run by the operating system, and no process outliving it.

Runs inside the project's interpreter, like ``frognano_worker`` and ``frognano_plugin``: the
standard library only (``ctypes`` for the few system calls).  FrogNano imports it too, to probe
what the kernel offers before it starts a run (``probe``).

``confine(writable)`` restricts the calling process and everything it starts, for good:

* Linux, Landlock: writes (create, write, truncate, remove, rename, link, mknod, device ioctls)
  only beneath ``writable``; TCP ``bind`` and ``connect`` denied (ABI 4); from ABI 6 on, no
  signals to processes outside the run and no abstract unix sockets created outside it (the
  session bus, X11).  Reads and execution stay unrestricted.  Rights the kernel's ABI does not
  know are dropped: on ABI 1 a file cannot be renamed between directories at all (EXDEV); below
  ABI 3 ``truncate(2)`` of an existing file is not covered; below ABI 4 the network is open.
* macOS, Seatbelt (``sandbox_init``, the call behind ``sandbox-exec``): the same write rule and
  no IP traffic.  The profile is deliberately small; it is untested in FrogNano's own suite,
  which runs on Linux.

On Linux two more layers cover what Landlock has no right for (``frognano_namespace``,
``frognano_seccomp``): the run's own user, mount and network namespaces (the whole tree
read-only but the writable paths, so metadata writes elsewhere fail with EROFS; no network at
all), and a seccomp filter (no scheduling changes to other processes, no raw or packet sockets,
no mount changes; without a network namespace, no UDP and no netlink either).  Where the
namespaces are refused, the filter still holds and ``confine`` says what is missing.

Landlock restricts the calling thread and its future children only, so ``confine`` must run
while the process has a single thread: in the fork server's child, or before pytest starts.

The rest keeps a run's processes within the run: ``become_subreaper`` makes orphans of the run
(a daemon that double-forked into a new session) reparent to this process instead of init, and
``kill_descendants`` kills them all at the end; ``die_with_parent`` kills this process when the
one that forked it dies.
"""

from __future__ import annotations

import os
import signal
import sys
import time

try:  # in the worker: a top-level module beside this one
    import frognano_namespace
    import frognano_seccomp
except ImportError:  # in FrogNano: a module of its package
    from . import frognano_namespace, frognano_seccomp

# prctl(2) options
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38

# landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: one number on every
# architecture that uses the generic table (x86_64, aarch64, riscv, arm, i386 alike).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# Filesystem rights that change something (read, read-dir and execute are never handled: reads
# stay unrestricted), with the ABI that introduced each.
_FS_WRITE_FILE = 1 << 1
_FS_TRUNCATE = 1 << 14
_FS_IOCTL_DEV = 1 << 15
_FS_RIGHTS = (
    (1, _FS_WRITE_FILE | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10)
     | (1 << 11) | (1 << 12)),  # write, remove dir/file, make char/dir/reg/sock/fifo/block/sym
    (2, 1 << 13),  # REFER: rename and link between directories
    (3, _FS_TRUNCATE),
    (5, _FS_IOCTL_DEV),
)
_FS_FILE_ONLY = _FS_WRITE_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV  # the rights a rule on a file may hold
_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP, CONNECT_TCP (ABI 4); no rule allows any port
_SCOPES = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET, SIGNAL (ABI 6)

# Device files every run may write: pytest's capture and terminals, /dev/shm for POSIX
# semaphores and shared memory (multiprocessing's locks and queues need it).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/ptmx", "/dev/shm")


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _syscall(number: int, *args) -> int:
    import ctypes

    return _libc().syscall(ctypes.c_long(number), *(
        a if isinstance(a, ctypes._SimpleCData) or a is None or not isinstance(a, int) else ctypes.c_long(a)
        for a in args))


def _prctl(option: int, value: int) -> int:
    import ctypes

    zero = ctypes.c_ulong(0)
    return _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), zero, zero, zero)


def _errno_text() -> str:
    import ctypes

    code = ctypes.get_errno()
    return f"{os.strerror(code)} (errno {code})"


def landlock_abi() -> tuple[int, str]:
    """The kernel's Landlock ABI version, or 0 and why it cannot be used."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is Linux only ({sys.platform})"
    try:
        abi = _syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    except (OSError, AttributeError, ImportError) as exc:
        return 0, f"cannot make system calls through ctypes ({exc})"
    if abi > 0:
        return int(abi), ""
    import ctypes

    code = ctypes.get_errno()
    if code == 38:  # ENOSYS
        return 0, "this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"
    if code == 95:  # EOPNOTSUPP
        return 0, "Landlock is disabled in this kernel (add landlock to the lsm= boot parameter)"
    return 0, f"Landlock is unavailable: {os.strerror(code)}"


def probe() -> tuple[str, str]:
    """How runs can be confined here (``"landlock ABI 7"``, ``"seatbelt"``), or "" and why not."""
    if sys.platform == "darwin":
        try:
            _libc().sandbox_init  # noqa: B018 - only its presence matters here
        except (OSError, AttributeError, ImportError) as exc:
            return "", f"Seatbelt is unavailable ({exc})"
        return "seatbelt", ""
    abi, why = landlock_abi()
    if abi:  # what a run's confine needs, made here once (the fork server probes before forking)
        _landlock_structs()
        frognano_namespace.prepare()
        frognano_seccomp.prepare()
    return (f"landlock ABI {abi}", "") if abi else ("", why)


def probe_namespaces() -> None:
    """Find out, once, whether runs can have their own namespaces (``frognano_namespace.available``):
    the fork server does before it forks any run, and each run inherits the answer."""
    if sys.platform.startswith("linux") and landlock_abi()[0]:
        frognano_namespace.available()


def confine(writable: list[str], namespaces: bool = True) -> tuple[str, str]:
    """Confine this process and its future children for good (see the module's doc).

    Returns how (``"landlock ABI 7 + mount+net namespaces + seccomp"``) and ``""``; or how and
    what is missing (the namespaces were refused: ``"landlock ABI 7 + seccomp"``, why); or
    ``""`` and the reason it could not confine at all.  A failure of Landlock leaves the
    process unconfined.  ``namespaces`` false skips them (as if the kernel refused them).
    """
    if sys.platform == "darwin":
        return _seatbelt(writable)
    abi, why = landlock_abi()
    if not abi:
        return "", why
    layers, gaps = [], []
    netns = False
    works, gap = frognano_namespace.available() if namespaces else (False, "namespaces turned off")
    if works:  # before Landlock, which forbids a confined process to change its mounts
        entered, gap = frognano_namespace.enter([*writable, "/dev/shm"])
        netns = "net" in entered
        if entered:
            layers.append(entered)
        if gap:
            gaps.append(gap)
    else:
        gaps.append(gap)
    how, why = _landlock(abi, writable)
    if not how:
        return "", why
    ok, gap = frognano_seccomp.install(network_namespace=netns)
    if ok:
        layers.append("seccomp")
    else:
        gaps.append(gap)
    return " + ".join([how, *layers]), "; ".join(gaps)


_STRUCTS: tuple | None = None


def _landlock_structs() -> tuple:
    """``struct landlock_ruleset_attr`` and ``landlock_path_beneath_attr``, made once per process
    (in the fork server, by ``probe``: making them in each run costs copy-on-write faults)."""
    global _STRUCTS
    if _STRUCTS is None:
        import ctypes

        class RulesetAttr(ctypes.Structure):
            _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                        ("scoped", ctypes.c_uint64)]

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        _STRUCTS = (RulesetAttr, PathBeneath)
    return _STRUCTS


def _landlock(abi: int, writable: list[str]) -> tuple[str, str]:
    import ctypes

    RulesetAttr, PathBeneath = _landlock_structs()
    fs = 0
    for since, rights in _FS_RIGHTS:
        if abi >= since:
            fs |= rights
    attr = RulesetAttr(fs, _NET_TCP if abi >= 4 else 0, _SCOPES if abi >= 6 else 0)
    # The struct grew with the ABI; give the kernel the size it knows.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return "", f"landlock_create_ruleset failed: {_errno_text()}"
    try:
        for path in dict.fromkeys([*writable, *DEVICES]):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not there (no /dev/tty without a terminal): nothing to allow
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                rule = PathBeneath(fs if is_dir else fs & _FS_FILE_ONLY, fd)
                if _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return "", f"landlock_add_rule({path}) failed: {_errno_text()}"
            finally:
                os.close(fd)
        # Required to restrict oneself without CAP_SYS_ADMIN; setuid programs then run
        # without their privileges (sudo inside a test will not work).
        if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
            return "", f"prctl(PR_SET_NO_NEW_PRIVS) failed: {_errno_text()}"
        if _syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return "", f"landlock_restrict_self failed: {_errno_text()}"
    finally:
        os.close(ruleset)
    return f"landlock ABI {abi}", ""


def seatbelt_profile(writable: list[str]) -> str:
    """The Seatbelt profile of a run: everything allowed but writes elsewhere and IP traffic."""
    def quote(path: str) -> str:
        return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'

    # Seatbelt matches resolved paths (/tmp is /private/tmp on macOS).
    paths = [os.path.realpath(p) for p in writable if p]
    allow = " ".join(f"(subpath {quote(p)})" for p in paths)
    return (
        "(version 1)\n"
        "(allow default)\n"
        "(deny file-write*)\n"
        f"(allow file-write* {allow}\n"
        '  (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty") (literal "/dev/ptmx")\n'
        '  (regex #"^/dev/ttys[0-9]+$") (subpath "/dev/fd") (literal "/dev/dtracehelper"))\n'
        "(deny network-outbound (remote ip))\n"
        "(deny network-bind (local ip))\n"
        "(deny network-inbound (local ip))\n"
    )


def _seatbelt(writable: list[str]) -> tuple[str, str]:
    import ctypes

    try:
        init = _libc().sandbox_init
    except (OSError, AttributeError) as exc:
        return "", f"Seatbelt is unavailable ({exc})"
    init.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_char_p)]
    error = ctypes.c_char_p()
    if init(seatbelt_profile(writable).encode(), 0, ctypes.byref(error)) != 0:
        text = error.value.decode(errors="replace") if error.value else "unknown error"
        return "", f"sandbox_init failed: {text}"
    return "seatbelt", ""


# -- what the sandbox denied -------------------------------------------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.mkdir": 0, "os.remove": 0, "os.rmdir": 0, "os.truncate": 0,
                "os.rename": 1, "os.replace": 1, "os.symlink": 1, "os.link": 1,
                # metadata: denied by the read-only mount namespace (EROFS)
                "os.chmod": 0, "os.chown": 0, "os.utime": 0, "os.setxattr": 0, "os.removexattr": 0}
_MAX_DENIED = 50
denied: dict[str, str] = {}  # path a write was attempted to, outside the writable roots -> test id


def watch_denials(writable: list[str]) -> None:
    """Record, in ``denied``, each path outside ``writable`` that Python code tries to write.

    Under ``confine`` every such attempt fails, so this names what a failing test wanted to
    write (the test may well report some other error).  An audit hook: it sees writes made by
    Python code in this process, not by programs the test runs.  Irrevocable: call it in the
    process that runs the tests, never in the fork server.
    """
    roots = [os.path.realpath(p) for p in [*writable, *DEVICES] if p]
    prefixes = tuple(r.rstrip(os.sep) + os.sep for r in roots)
    exact = frozenset(roots)

    def inside(path: str) -> bool:
        return path in exact or path.startswith(prefixes)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, flags = args[0], args[2]
            if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
                return
        elif event in _PATH_EVENTS:
            path = args[_PATH_EVENTS[event]]
        else:
            return
        if len(denied) >= _MAX_DENIED or isinstance(path, int):
            return
        try:
            path = os.path.abspath(os.fsdecode(path))
            if inside(path) or path.startswith(("/proc/", "/dev/fd/", "/dev/std")):
                return
            real = os.path.realpath(path)
            if inside(real) or (event == "os.mkdir" and os.path.isdir(real)):
                return  # a symlink into the shadow; makedirs(exist_ok=True) of a folder that exists
        except (TypeError, ValueError, OSError):
            return
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        denied.setdefault(path, test)

    sys.addaudithook(hook)


# -- processes ----------------------------------------------------------------------------------

def become_subreaper() -> bool:
    """Orphaned descendants reparent to this process instead of init (Linux; else False)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux).  Call it right after ``fork``.

    The signal follows the *thread* that forked: right for a single-threaded parent (the fork
    server, the fresh run's supervisor), wrong for FrogNano itself, which watches stdin instead.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(70)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, parents before children (Linux /proc; else [])."""
    found: list[int] = []
    todo = [pid]
    while todo:
        kids = _children(todo.pop())
        if kids is None:
            return _descendants_by_scan(pid)
        found.extend(kids)
        todo.extend(kids)
    return found


def _children(pid: int) -> list[int] | None:
    """Children of ``pid`` from /proc/PID/task/*/children; None when the kernel lacks the file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return [] if os.path.isdir("/proc/self/task") else None
    except OSError:
        return []
    kids: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread just ended
            return None  # CONFIG_PROC_CHILDREN is off
        except (OSError, ValueError):
            continue
    return kids


def _descendants_by_scan(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def reap(spare: int | None = None) -> None:
    """Collect every child of this process that has exited (never blocks); ``spare`` is left to
    whoever waits for it."""
    if spare is not None:
        for pid in descendants(os.getpid()):
            if pid != spare:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # a grandchild: not ours to reap
                    pass
        return
    while True:
        try:
            done, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not done:
            return


def kill_descendants(seconds: float = 5.0, spare: int | None = None) -> None:
    """SIGKILL every descendant of this process and reap them (call it as a subreaper).

    Killing a process reparents its children to the nearest subreaper (this process), so the
    sweep repeats until nothing is left, or ``seconds`` pass (an unkillable process in D state).
    ``spare``: a child that lives on with its own descendants (the fork server's warm session).
    """
    me = os.getpid()
    deadline = time.monotonic() + seconds
    while True:
        reap(spare)
        found = descendants(me)
        if spare is not None and spare in found:
            kept = {spare, *descendants(spare)}
            found = [pid for pid in found if pid not in kept]
        if not found or time.monotonic() > deadline:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.001)
