"""Runs pytest for FrogNano inside the project's interpreter.

Two entry points, one code path for the run itself:

  python -m frognano_worker run REQUEST.json   one run in this (fresh) process
  python -m frognano_worker serve              warm fork server: JSON lines on stdin/stdout

The fork server imports pytest, its plugins and the project's third-party dependencies once,
then forks a child per request.  It never imports the project's own modules (the controller
checks that, see ``offenders``), so every child imports the project's code fresh from the
shadow copy and a candidate can never be validated against stale code.  Bytecode is never
written: the pyc header keys on whole-second mtimes and size, which a one-character edit made
and reverted within a second would fool.

Like the plugin, this file imports only the standard library and pytest.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import select
import signal
import sys
import traceback

import frognano_confine
import frognano_runsetup
from frognano_runsetup import EXIT_UNCONFINED, is_project_code, leaked, own_group, prepare_run, redirect, set_limit


def run_request(req: dict) -> int:
    """Run pytest once for ``req`` in this process; results stream to req['results']."""
    prepared = prepare_run(req)
    if prepared is None:
        return EXIT_UNCONFINED
    args, plugin, output = prepared
    import pytest

    before = set(sys.modules)
    output.start()
    try:
        code = int(pytest.main(args, plugins=[plugin]))
    except SystemExit as exc:  # a conftest that calls sys.exit
        code = exc.code if isinstance(exc.code, int) else 3
    finally:
        output.close()
    # Rewritten after the last test's check (in its teardown, at session finish): still no evidence.
    for what in plugin.tampering():
        plugin.emit("tampered", what=what)
    plugin.emit("end", exitstatus=code, leaks=leaked(req, before),
                denied=[[path, test] for path, test in frognano_confine.denied.items()])
    return code


# -- warm fork server ---------------------------------------------------------------------------

def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


_PYTEST_CLOSURE: set[str] = set()  # modules loaded by pytest and its default plugins


def preimport(names: list[str], roots: list[str], own: set[str]) -> tuple[list[str], dict[str, str], dict[str, list[str]]]:
    """Import pytest, its plugins and ``names``; returns what was imported, what failed, and
    what was left out because importing it pulled in the project's own modules.

    A dependency that imports the project (a pytest plugin of the project, a tool in a
    development venv that uses the library being developed) would make every child run the
    installed or real copy instead of the shadow's: such a name is imported, found out, and
    forgotten again with everything its import brought in, so the rest stays warm.
    """
    import pytest  # noqa: F401
    from _pytest.config import default_plugins

    import frognano_plugin  # noqa: F401

    for name in default_plugins:
        try:
            importlib.import_module("_pytest." + name)
        except Exception:  # noqa: BLE001 - some default plugins are optional
            pass
    _PYTEST_CLOSURE.update(sys.modules)
    wanted = list(names)
    # What pytest itself will load: the modules PYTEST_PLUGINS names, and the installed plugins
    # (pytest11 entry points) unless PYTEST_DISABLE_PLUGIN_AUTOLOAD turns them off.
    wanted += [m.strip() for m in os.environ.get("PYTEST_PLUGINS", "").split(",") if m.strip()]
    if not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        try:
            from importlib.metadata import entry_points

            wanted += [ep.module for ep in entry_points(group="pytest11")]
        except Exception:  # noqa: BLE001
            pass
    imported, failed, left_out = [], {}, {}
    for name in wanted:
        before = set(sys.modules)
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a broken package too
            failed[name] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        new = set(sys.modules) - before
        pulled = sorted(m for m in new if _projects(m, roots, own))
        if pulled:
            for module in new:
                sys.modules.pop(module, None)
            left_out[name] = pulled[:5]
        else:
            imported.append(name)
    return imported, failed, left_out


def _projects(name: str, roots: list[str], own: set[str]) -> bool:
    """Whether module ``name`` is the project's: its file in the project, or its top name one
    of the project's packages (an installed copy)."""
    path = getattr(sys.modules.get(name), "__file__", None)
    return bool(path and is_project_code(path, roots)) or name.split(".")[0] in own


def serve() -> None:
    # The terminal's Ctrl-C goes to the controller, which stops runs and closes this server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Orphans of a run (a daemon a test double-forked) come back here when the run's own
    # process is killed, and die with the run (see _supervise).
    frognano_confine.become_subreaper()
    frognano_confine.probe()  # loads ctypes and libc once, not in every child
    frognano_confine.probe_namespaces()  # likewise: a child tries them once, for all runs
    stdin = _Stdin()
    config = json.loads(stdin.readline() or "{}")
    roots = [os.path.realpath(r) for r in config.get("roots", [])]
    own = set(config.get("own", []))
    if config.get("cwd"):
        # Where a fresh run starts: what a dependency reads from the cwd at import (hypothesis:
        # its example database, `.hypothesis/` there) must name the project, not this folder.
        # sys.path[0] is this folder's absolute path (-m), so imports are unaffected.
        os.chdir(config["cwd"])
    imported, failed, left_out = preimport(config.get("preimport", []), roots, own)
    frognano_runsetup.PREIMPORTED = True  # every run from here on is a fork of this process
    # What is still the project's after that came with pytest itself (the project is one of
    # pytest's own dependencies, installed or editable): each child forgets it so the tests
    # import the shadow's; but pytest keeps the copy it imported, so only a fresh process
    # gives the shadow's code to both (offenders).
    installed = sorted(name for name in sys.modules if _projects(name, roots, own))
    offenders = [name for name in installed if name in _PYTEST_CLOSURE]
    # Move everything imported so far out of the collector's reach: a forked child would
    # otherwise walk (and so copy) every inherited object at its first collection.
    gc.collect()
    gc.freeze()
    _reply({"ready": True, "imported": imported, "failed": failed, "offenders": offenders,
            "installed": installed, "left_out": left_out, "pid": os.getpid()})
    session = None  # the warm session (frognano_session), while there is one
    try:
        while True:
            line = stdin.readline()
            if line is None:  # FrogNano went away
                break
            req = json.loads(line)
            if req.get("cmd") == "exit":
                break
            if req.get("cmd") in ("session", "srun", "end_session"):
                session = _session_command(req, session, installed, stdin)
                continue
            if not _fork_run(req, installed, stdin, session):
                return
    except _Gone:
        return
    finally:
        if session is not None:
            session.close(kill=True)


class _Gone(Exception):
    """FrogNano went away during a run: everything it started is killed."""


def _session_command(req: dict, session, installed: list[str], stdin: _Stdin):  # noqa: ANN001, ANN202
    """Start, use or end the warm session; returns the session there is afterwards."""
    import frognano_session

    try:
        if req["cmd"] == "end_session" or (req["cmd"] == "session" and session is not None):
            if session is not None:
                session.close()
            session = None
            if req["cmd"] == "end_session":
                _reply({"ended": True})
                return None
        if req["cmd"] == "session":
            session = frognano_session.start(req["req"], installed, _exit_with)
            _reply({"session": session.pid})
            ready = session.receive(stdin)
            if ready is None or not ready.get("ready"):
                session.close(kill=True)
                session = None
            _reply(ready or {"ready": False, "reason": "the session died while collecting"})
            return session
        # srun: one request, relayed: the run's pid, then its return code
        if session is None or not session.send(req["req"]):
            _reply({"lost": True})
            return None
        for _ in range(2):
            reply = session.receive(stdin)
            if reply is None:
                session.close(kill=True)
                _reply({"lost": True})
                return None
            _reply(reply)
        return session
    except frognano_session.Gone:
        raise _Gone from None


def _fork_run(req: dict, installed: list[str], stdin: _Stdin, session) -> bool:  # noqa: ANN001
    """One ordinary run in a fork of the server (a fresh import); False when FrogNano went away."""
    pid = os.fork()
    if pid == 0:  # child: own process group so the controller can kill all it spawns
        def child(req: dict = req) -> int:
            os.setpgid(0, 0)
            frognano_confine.die_with_parent()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if session is not None:  # the session's pipes are the server's business
                for fd in (session.requests, session.replies.fd):
                    os.close(fd)
            redirect(req["log"])
            for name in installed:
                sys.modules.pop(name, None)
            return _run_child(req)

        _exit_with(child)
    own_group(pid)
    _reply({"pid": pid})
    returncode = _supervise(pid, stdin, spare=session.pid if session is not None else None)
    if returncode is None:
        return False
    _reply({"pid": pid, "returncode": returncode})
    return True


class _Stdin:
    """Lines from fd 0, read raw: select() on fd 0 then tells the truth (no hidden buffer)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.eof = False

    def fill(self) -> bool:
        """Read what is there; False at end of file (the writer, FrogNano, is gone)."""
        chunk = os.read(0, 65536)
        self.eof = not chunk
        self.buffer += chunk
        return bool(chunk)

    def readline(self) -> str | None:
        while b"\n" not in self.buffer:
            if self.eof or not self.fill():
                return None
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8")


def _run_child(req: dict) -> int:
    """The run itself, in a forked child: a subreaper, so nothing it starts outlives it."""
    frognano_confine.become_subreaper()
    try:
        return run_request(req)
    finally:
        frognano_confine.kill_descendants()


def _supervise(pid: int, stdin: _Stdin, spare: int | None = None) -> int | None:
    """Wait for the run ``pid`` and return its exit code, then kill whatever it left behind.

    Meanwhile stdin is watched: at its end FrogNano has died (even by ``kill -9``), and the run
    is killed with everything it started; then None.  This, not PR_SET_PDEATHSIG, ties the
    server to FrogNano: that signal follows the thread that started the server, and the
    language server starts runners on worker threads.  ``spare``: the warm session, which
    lives on between runs.
    """
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
    try:
        while True:
            watched = [0] if pidfd is None else [0, pidfd]
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.01)
            if 0 in ready and not stdin.fill():
                _kill_group(pid)
                os.waitpid(pid, 0)
                frognano_confine.kill_descendants(spare=spare)
                return None
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                frognano_confine.kill_descendants(spare=spare)  # orphans of a run the controller killed
                return os.waitstatus_to_exitcode(status)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _exit_with(body) -> None:  # noqa: ANN001 - () -> int
    """End a forked child with ``body()``'s exit code (70 when it raised; the traceback goes to
    the log).  ``os._exit``: the child must never return into its parent's code."""
    code = 70
    try:
        code = body()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 70)


def _kill_group(pid: int) -> None:
    for kill, sig in ((os.killpg, signal.SIGKILL), (os.kill, signal.SIGKILL)):
        try:
            kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run_supervised(req: dict) -> int:
    """A fresh process's run: the tests in a forked child, this process watching over it.

    This process stays unconfined and is the run's subreaper; the child confines itself and
    dies with it.  When FrogNano dies (stdin closes) the run is killed with all it started.
    The exit status is the child's; a child killed by a signal is mirrored by this process.
    """
    frognano_confine.become_subreaper()
    stdin = _Stdin()
    pid = os.fork()
    if pid == 0:
        def child() -> int:
            frognano_confine.die_with_parent()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)  # the tests read nothing of FrogNano's pipe
            os.close(devnull)
            return _run_child(req)

        _exit_with(child)
    code = _supervise(pid, stdin)
    if code is None:
        return 70
    if code < 0:
        set_limit(resource.RLIMIT_CORE, 0)
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP
            pass
        os.kill(os.getpid(), -code)
    return code


def main(argv: list[str]) -> int:
    # Run as ``python -m frognano_worker``, this module is ``__main__``; whatever imports it by
    # name must get this copy, not a second one.
    sys.modules.setdefault("frognano_worker", sys.modules[__name__])
    if argv[:1] == ["serve"]:
        serve()
        return 0
    if len(argv) == 2 and argv[0] == "run":
        with open(argv[1], encoding="utf-8") as fh:
            req = json.load(fh)
        return run_supervised(req)
    sys.stderr.write("usage: python -m frognano_worker run REQUEST.json | serve\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
