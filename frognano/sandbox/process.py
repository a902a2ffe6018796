"""A test worker process seen from the controller: how it is started, watched and killed.

The worker (``_worker/frognano_worker.py``) runs inside the project's interpreter; what it cannot
do for itself lives here: a wall-clock watchdog that follows its results file and says when a test
hangs (even in C code), and killing the whole run -- its process group and every descendant that
left it -- so that no process outlives its run (docs/ARCHITECTURE.md, invariant 7).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ._worker import frognano_confine as confine

WORKER_DIR = Path(__file__).with_name("_worker")
POLL = 0.05  # seconds between looks at a run in flight


# What the tests inherit of FrogNano's environment (README, "What a test can and cannot do"):
# finding programs and modules, the locale and the terminal, the user's name, how the
# interpreter runs and finds its libraries.  Nothing else: a token or a cloud key in
# FrogNano's environment never reaches code under test unless the project names it in
# ``test_env``.  pytest's own two plugin-loading variables pass too: they say how the user runs
# pytest (which plugins load), so FrogNano's runs load what a run in the user's shell loads.
ALLOWED_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM",
    "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "PYTHONPATH",
    "PYTHONHASHSEED", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONWARNINGS", "PYTHONDEVMODE",
    "PYTHONFAULTHANDLER", "PYTHONMALLOC", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS",
})
ALLOWED_PREFIXES = ("LC_",)


def allowed(name: str, extra: Sequence[str] = ()) -> bool:
    """Whether the variable ``name`` reaches the tests: the allow-list, or ``extra`` (names,
    or prefixes ending in ``*``)."""
    return (name in ALLOWED_ENV or name.startswith(ALLOWED_PREFIXES) or name in extra
            or any(e.endswith("*") and name.startswith(e[:-1]) for e in extra))


def test_environment(extra: Sequence[str] = (), home: str | None = None,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the tests get: the allow-listed part of ``environ`` (default: ours) and
    the names in ``extra``; HOME is ``home`` when given.  PYTHONUSERBASE keeps the user's own
    site-packages importable under that HOME."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if allowed(k, extra)}
    if home is not None:
        if "PYTHONUSERBASE" not in env and "HOME" in environ:
            env["PYTHONUSERBASE"] = os.path.join(environ["HOME"], ".local")
        env["HOME"] = home
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def worker_env() -> dict[str, str]:
    """The environment a worker starts in: the allow-listed part of ours (a process's start-up
    environment stays readable in /proc/self/environ, so nothing else may be in it), with the
    worker's folder importable.  Each run then sets the tests' own (the request's ``env``)."""
    env = test_environment()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(WORKER_DIR), env.get("PYTHONPATH")) if p)
    return env


def describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


class Watch:
    """Follows the results file while a run is in flight and says when it has hung."""

    def __init__(self, path: Path, timeout: float, timeouts: dict[str, float], collect_timeout: float):
        self.path = path
        self.timeout = timeout
        self.timeouts = timeouts
        self.collect_timeout = collect_timeout
        self.offset = 0
        self.buffer = b""
        self.current: str | None = None
        self.since = time.monotonic()
        self.killed = False  # set when the controller killed the run for hanging (or cancelled it)
        self.cancel: threading.Event | None = None
        # time.monotonic() past which the run is killed whatever it is doing (the search's end:
        # a candidate run must not outlive the budget that pays for it).
        self.deadline: float | None = None
        # Told each test's result record as soon as the run writes it (``TestRunner.run``'s
        # ``on_result``): the engine starts the untraced recheck of a test the diagnosis
        # stopped while the run goes on.
        self.on_result: Callable[[dict], None] | None = None

    def poll(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(chunk)
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            kind = rec.get("kind")
            if kind == "start":
                self.current, self.since = rec["nodeid"], time.monotonic()
            elif kind in ("result", "collected"):
                self.current, self.since = None, time.monotonic()
                if kind == "result" and self.on_result is not None:
                    self.on_result(rec)

    def overdue(self) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return True  # the caller gave up on this run: kill it like a hung one
        if self.deadline is not None and time.monotonic() > self.deadline:
            return True
        self.poll()
        if self.current is None:
            limit = self.collect_timeout
        else:
            per_test = self.timeouts.get(self.current, self.timeout)
            # The in-process alarm fires first; this is the backstop for a test the alarm cannot
            # interrupt (a loop inside C code: islice over an endless iterator).  A second past
            # the limit: such candidates are common, and each used to cost 1.5x its limit + 2 s.
            # Less for a short limit (a test that hung in the baseline gets half a second per
            # candidate): the margin only lets a test the alarm stopped finish its teardown.
            limit = per_test + min(1.0, max(0.25, per_test / 2))
        return time.monotonic() - self.since > limit


def killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def kill_run(pid: int) -> None:
    """Kill a live run: its descendants first (processes in new sessions escape its group; the
    run's process is their subreaper, so they stay below it while it lives), then its group.

    Only for a run not yet reaped, whose pid cannot have been reused.
    """
    killed: set[int] = set()
    for _ in range(50):  # until a walk finds no one new (killed ones linger as zombies)
        found = [p for p in confine.descendants(pid) if p not in killed]
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        killed.update(found)
    killpg(pid)


def tail(path: Path, limit: int = 4000) -> str:
    """The last ``limit`` bytes of a run's log, decoded; "" when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
