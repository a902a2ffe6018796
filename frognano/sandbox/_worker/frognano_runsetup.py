"""How a run is set up around ``pytest.main``: limits, confinement, the shadow first on
``sys.path``, the plugin and pytest's arguments; afterwards, which project modules leaked in.

Both kinds of run use it: an ordinary one (``frognano_worker``: a fresh process or a fork of the
warm server) and a warm session's (``frognano_session``).  It is a file of its own so that the
two share it without importing each other: the server starts sessions, so the session must not
take these helpers from the server.  This process's confinement record lives here, once.

Like the other worker files, this one imports only the standard library, pytest (through the
plugin, once a run is prepared) and its sibling worker files by bare name.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys

import frognano_confine


def _inside(path: str, roots: list[str]) -> bool:
    path = os.path.realpath(path)
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


# The interpreter's own environment: a project that keeps its virtualenv inside its folder
# (``.venv/``, the common case) still never counts pytest or its dependencies as its own code.
_ENVIRONMENT = sorted({os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)})


def is_project_code(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is the project's code: inside ``roots`` and not in the interpreter's environment."""
    return _inside(path, roots) and not _inside(path, _ENVIRONMENT)


def vm_size_bytes() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def set_limit(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    if soft == resource.RLIM_INFINITY or value < soft:
        resource.setrlimit(which, (value, hard))


def apply_limits(limits: dict, mapped: int | None = None) -> None:
    """Memory (address space above what is already mapped), CPU seconds, file size, no cores.

    ``mapped``: the size already mapped, when the caller knows it (a forked run has its
    parent's: reading /proc/self/status again would cost a millisecond a run)."""
    memory_mb = limits.get("memory_mb")
    if memory_mb:
        # Above the current size: a warm server that imported numpy or torch has already
        # mapped hundreds of MiB, which must not count against the test's own budget.
        base = mapped if mapped is not None else (vm_size_bytes() or 0)
        set_limit(resource.RLIMIT_AS, base + int(memory_mb) * 1024 * 1024)
    if limits.get("cpu_seconds"):
        set_limit(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    if limits.get("fsize_mb"):
        set_limit(resource.RLIMIT_FSIZE, int(limits["fsize_mb"]) * 1024 * 1024)
    set_limit(resource.RLIMIT_CORE, 0)


def _import_paths(real_root: str, shadow_root: str, extra: list[str]) -> list[str]:
    """The shadow first, then the shadow's image of every path that points into the project.

    Editable installs put the project's real ``src`` (or root) on sys.path through a .pth file;
    mapping those entries into the shadow makes ``import pkg`` load the shadow's code.
    """
    paths = [os.path.join(shadow_root, p) if not os.path.isabs(p) else p for p in extra]
    real = os.path.realpath(real_root)
    for entry in sys.path:
        if entry and is_project_code(entry, [real]):
            rel = os.path.relpath(os.path.realpath(entry), real)
            paths.append(os.path.normpath(os.path.join(shadow_root, rel)))
    seen: list[str] = []
    for p in [shadow_root, *paths]:
        if p not in seen:
            seen.append(p)
    return seen


EXIT_UNCONFINED = 78  # EX_CONFIG: sandbox = "required" and this process could not be confined


def confine_run(req: dict) -> bool:
    """Apply ``req['sandbox']`` to this process and record how in the results (``sandbox``).

    The run's temp dir becomes TMPDIR (pytest's tmp_path lands there).  False: the sandbox is
    required and could not be applied, so the tests must not run.
    """
    box = req.get("sandbox") or {}
    mode = box.get("mode", "off")
    tmp = box.get("tmp")
    if box.get("env") is not None:  # the allow-listed environment of the tests, exactly
        os.environ.clear()
        os.environ.update(box["env"])
    if tmp:
        for name in ("TMPDIR", "TEMP", "TMP"):
            os.environ[name] = tmp
        import tempfile

        tempfile.tempdir = None  # forget the directory the fork server chose
    how, why = "", 'sandbox = "off"'
    if mode != "off":
        writable = [req["root"], os.path.dirname(req["results"]), *([tmp] if tmp else []),
                    *box.get("writable", [])]
        how, why = frognano_confine.confine(writable, namespaces=box.get("namespaces", True))
        if how and box.get("name_denials"):
            frognano_confine.watch_denials(writable)
    refused = mode == "required" and not how
    _CONFINEMENT.update({"kind": "sandbox", "confined": how, "reason": why, "refused": refused})
    with open(req["results"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(_CONFINEMENT) + "\n")
    return not refused


_CONFINEMENT: dict = {}  # this process's confinement, as its "sandbox" record


def confinement_record() -> dict:
    """The "sandbox" record of this process (a warm session's runs inherit its confinement)."""
    return dict(_CONFINEMENT)


def prepare_run(req: dict):  # noqa: ANN201 - (args, plugin, output), or None: must not run
    """Everything before ``pytest.main``: limits, confinement, the shadow on sys.path, the
    plugin, the bounded output and pytest's arguments."""
    apply_limits(req.get("limits", {}))
    if not confine_run(req):
        return None
    shadow = req["root"]
    os.chdir(shadow)
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.path[:0] = _import_paths(req.get("real_root", shadow), shadow, req.get("paths", []))
    importlib.invalidate_caches()
    __import__("frognano_reads").install(shadow, req["results"])  # the data the tests read

    from frognano_output import BoundedOutput
    from frognano_plugin import FrogNanoPlugin

    # fds 1 and 2 go through bounded pipes for the run (see frognano_output): a test that
    # prints gigabytes passes, and neither memory nor the run log grows with it.
    output = BoundedOutput(limit=4 * int(req.get("max_output", 4000)))
    plugin = FrogNanoPlugin(
        req["results"],
        shadow,
        timeout=req.get("timeout"),
        timeouts=req.get("timeouts"),
        coverage=req.get("coverage") or False,
        reverse=bool(req.get("reverse")),
        stop_on_timeout=bool(req.get("stop_on_timeout")),
        max_output=int(req.get("max_output", 4000)),
        output=output,
        stall=req.get("stall"),
    )
    user_args = [str(a) for a in req.get("args", [])]
    args = [
        "-p", "no:cacheprovider",
        "--rootdir", shadow,
        "-q",
        # A broken test module must not hide the results of the others.
        "--continue-on-collection-errors",
        # Results come from the plugin; pytest's own long tracebacks would only cost time.
        "--tb=line",
        *user_args,
        # A fork of the warm server imported pytest's plugins before pytest could mark them for
        # assertion rewriting (a fresh pytest never does): its "Module already imported so
        # cannot be rewritten" warning is ours, not the project's, and under the project's
        # `filterwarnings = error` (dateutil, with hypothesis installed) it stopped every run.
        *(["-W", f"ignore:{_ALREADY_IMPORTED}:pytest.PytestAssertRewriteWarning"] if PREIMPORTED else []),
        # Every selected test must report, whatever -x or --maxfail the project's addopts say.
        "--maxfail", "2147483647",
        # pytest's capture would keep a test's whole output (a temp file read back into
        # memory): the bounded pipes capture instead, whatever -s or --capture the project says.
        *([] if any(a.endswith("no:capture") for a in user_args) else ["--capture=no"]),
        # Node ids as plain positionals, never after "--": pytest < 9 on Python < 3.12.8 parses
        # with parse_intermixed_args, which rejects "--" once a positional came before it (the
        # project's own `test_args = ["tests"]`: "unrecognized arguments: -- tests/..."). An id
        # that argparse would read as an option or an @file gets "./", which pytest resolves.
        *(_positional(n) for n in req.get("nodeids") or []),
    ]
    return args, plugin, output


# Set by the fork server (frognano_worker.serve) once it has imported pytest and its plugins.
PREIMPORTED = False
_ALREADY_IMPORTED = "Module already imported so cannot be rewritten"


def _positional(nodeid: str) -> str:
    return f"./{nodeid}" if nodeid[:1] in ("-", "@") else nodeid


def leaked(req: dict, before: set[str]) -> list[str]:
    """Project modules this run imported from outside the shadow (the real project)."""
    # Only what this run imported: the server's start-up check covered everything before it,
    # and resolving the paths of hundreds of numpy/pandas modules would cost ~40 ms a run.
    shadow = req["root"]
    real = os.path.realpath(req.get("real_root", shadow))
    return sorted(
        name
        for name in set(sys.modules) - before
        if getattr(sys.modules[name], "__file__", None)
        and is_project_code(sys.modules[name].__file__, [real])
        and not _inside(sys.modules[name].__file__, [os.path.realpath(shadow)])
    )


def own_group(pid: int) -> None:
    """Put a forked child in a process group of its own, from the parent too: whichever of the
    two runs first wins, and the controller can kill the group at once."""
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass


def redirect(log_path: str) -> None:
    """fds 0, 1, 2 and sys.std* of a forked run: no input, output to its log."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
