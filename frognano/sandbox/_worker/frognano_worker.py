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
import signal
import sys
import traceback

def _inside(path: str, roots: list[str]) -> bool:
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _vm_size_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _set_limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(which, (value, hard))


def apply_limits(limits: dict) -> None:
    """Memory (address space above what is already mapped), CPU seconds, file size, no cores."""
    memory_mb = limits.get("memory_mb")
    if memory_mb:
        # Above the current size: a warm server that imported numpy or torch has already
        # mapped hundreds of MiB, which must not count against the test's own budget.
        _set_limit(resource.RLIMIT_AS, (_vm_size_bytes() or 0) + int(memory_mb) * 1024 * 1024)
    if limits.get("cpu_seconds"):
        _set_limit(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    if limits.get("fsize_mb"):
        _set_limit(resource.RLIMIT_FSIZE, int(limits["fsize_mb"]) * 1024 * 1024)
    _set_limit(resource.RLIMIT_CORE, 0)


def _import_paths(real_root: str, shadow_root: str, extra: list[str]) -> list[str]:
    """The shadow first, then the shadow's image of every path that points into the project.

    Editable installs put the project's real ``src`` (or root) on sys.path through a .pth file;
    mapping those entries into the shadow makes ``import pkg`` load the shadow's code.
    """
    paths = [os.path.join(shadow_root, p) if not os.path.isabs(p) else p for p in extra]
    real = os.path.realpath(real_root)
    for entry in sys.path:
        if entry and _inside(entry, [real]):
            rel = os.path.relpath(os.path.realpath(entry), real)
            paths.append(os.path.normpath(os.path.join(shadow_root, rel)))
    seen: list[str] = []
    for p in [shadow_root, *paths]:
        if p not in seen:
            seen.append(p)
    return seen


def run_request(req: dict) -> int:
    """Run pytest once for ``req`` in this process; results stream to req['results']."""
    apply_limits(req.get("limits", {}))
    shadow = req["root"]
    os.chdir(shadow)
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.path[:0] = _import_paths(req.get("real_root", shadow), shadow, req.get("paths", []))
    importlib.invalidate_caches()

    import pytest
    from frognano_plugin import FrogNanoPlugin

    plugin = FrogNanoPlugin(
        req["results"],
        shadow,
        timeout=req.get("timeout"),
        timeouts=req.get("timeouts"),
        coverage=req.get("coverage") or False,
        reverse=bool(req.get("reverse")),
        stop_on_timeout=bool(req.get("stop_on_timeout")),
        max_output=int(req.get("max_output", 4000)),
    )
    args = [
        "-p", "no:cacheprovider",
        "--rootdir", shadow,
        "-q",
        # A broken test module must not hide the results of the others.
        "--continue-on-collection-errors",
        # Results come from the plugin; pytest's own long tracebacks would only cost time.
        "--tb=line",
        *req.get("args", []),
        # Every selected test must report, whatever -x or --maxfail the project's addopts say.
        "--maxfail", "2147483647",
        *req.get("nodeids", []),
    ]
    before = set(sys.modules)
    try:
        code = int(pytest.main(args, plugins=[plugin]))
    except SystemExit as exc:  # a conftest that calls sys.exit
        code = exc.code if isinstance(exc.code, int) else 3
    # Only what this run imported: the server's start-up check covered everything before it,
    # and resolving the paths of hundreds of numpy/pandas modules would cost ~40 ms a run.
    real = os.path.realpath(req.get("real_root", shadow))
    leaks = sorted(
        name
        for name in set(sys.modules) - before
        if getattr(sys.modules[name], "__file__", None)
        and _inside(sys.modules[name].__file__, [real])
        and not _inside(sys.modules[name].__file__, [os.path.realpath(shadow)])
    )
    plugin.emit("end", exitstatus=code, leaks=leaks)
    return code


# -- warm fork server ---------------------------------------------------------------------------

def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


_PYTEST_CLOSURE: set[str] = set()  # modules loaded by pytest and its default plugins


def preimport(names: list[str]) -> tuple[list[str], dict[str, str]]:
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
    try:
        from importlib.metadata import entry_points

        wanted += [ep.module for ep in entry_points(group="pytest11")]
    except Exception:  # noqa: BLE001
        pass
    imported, failed = [], {}
    for name in wanted:
        try:
            importlib.import_module(name)
            imported.append(name)
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a broken package too
            failed[name] = f"{type(exc).__name__}: {exc}"[:200]
    return imported, failed


def serve() -> None:
    # The terminal's Ctrl-C goes to the controller, which stops runs and closes this server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config = json.loads(sys.stdin.readline())
    roots = [os.path.realpath(r) for r in config.get("roots", [])]
    own = set(config.get("own", []))
    imported, failed = preimport(config.get("preimport", []))
    offenders = sorted(
        name
        for name, mod in list(sys.modules.items())
        if getattr(mod, "__file__", None) and _inside(mod.__file__, roots)
    )
    # An installed copy of the project itself (say more_itertools, which some plugin or
    # dependency imports) must not stand in for the shadow's code: each child forgets it, so the
    # tests import the shadow's.  pytest's own dependencies cannot be swapped under it: then
    # the controller runs fresh processes (offenders).
    installed = sorted(name for name in sys.modules if name.split(".")[0] in own and name not in offenders)
    pytest_needs = {name.split(".")[0] for name in _PYTEST_CLOSURE}
    offenders += [name for name in installed if name.split(".")[0] in pytest_needs]
    # Move everything imported so far out of the collector's reach: a forked child would
    # otherwise walk (and so copy) every inherited object at its first collection.
    gc.collect()
    gc.freeze()
    _reply({"ready": True, "imported": imported, "failed": failed, "offenders": offenders,
            "installed": installed, "pid": os.getpid()})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("cmd") == "exit":
            break
        pid = os.fork()
        if pid == 0:  # child: own process group so the controller can kill all it spawns
            code = 70
            try:
                os.setpgid(0, 0)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _redirect(req["log"])
                for name in installed:
                    sys.modules.pop(name, None)
                code = run_request(req)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code if isinstance(code, int) else 70)
        try:
            os.setpgid(pid, pid)  # also here: whichever of parent and child runs first wins
        except OSError:
            pass
        _reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _reply({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _redirect(log_path: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        serve()
        return 0
    if len(argv) == 2 and argv[0] == "run":
        with open(argv[1], encoding="utf-8") as fh:
            req = json.load(fh)
        return run_request(req)
    sys.stderr.write("usage: python -m frognano_worker run REQUEST.json | serve\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
