"""pytest plugin that streams structured per-test results as JSON lines.

This file runs inside the *project's* interpreter, so it imports nothing but the standard
library and pytest (never ``frognano``): the project's environment need not have FrogNano's
dependencies installed.  Each record is written and flushed as soon as it is known, so a run
that dies half way (a test that kills its process, a watchdog kill) still leaves every finished
result and the id of the test that was running.

Records (one JSON object a line, ``kind`` first):
  collected      {"nodeids": [...]}
  collect_error  {"nodeid", "message", "path" (relpath of a conftest that raised, optional)}
  start          {"nodeid"}
  result         {"nodeid", "outcome", "duration", "message", "frames", "stdout", "stderr",
                  "coverage" (relpath -> sorted lines, optional), "last" ([relpath, line] or null)}
  end            {"exitstatus", "leaks"}
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
import traceback

import pytest
from _pytest.outcomes import OutcomeException
from frognano_paths import is_test_file

# -- what the code under test must not rewrite ----------------------------------------------------
# Captured when this module is imported: in every kind of run that is before pytest collects,
# so before any project module is imported (the fork server imports this plugin with pytest).
# A project module that rewrites pytest's reports (``TestReport.__init__`` forcing "passed"),
# the hook machinery, the session's count of failures or this plugin's own reporting changes
# what pytest itself believes, so it would change the exit status too; these identities are
# checked after every test, and a run in which any changed is marked ``tampered``.  (Code that
# sets out to defeat this from inside the process still can, with ctypes or gc walks: the
# repair side refuses edits that reach for such means, see ``frognano.repair.tampering``.)
_WATCHED = (
    ("_pytest.reports", "TestReport", ("__init__", "from_item_and_call", "_to_json", "_from_json")),
    ("_pytest.reports", "BaseReport", ("passed", "failed", "skipped", "outcome")),
    ("_pytest.runner", "CallInfo", ("from_call", "__init__")),
    ("_pytest.runner", None, ("call_and_report", "runtestprotocol", "pytest_runtest_makereport",
                              "check_interactive_exception", "show_test_item")),
    ("_pytest.skipping", None, ("pytest_runtest_makereport", "evaluate_xfail_marks")),
    ("_pytest.main", "Session", ("pytest_runtest_logreport", "pytest_collectreport")),
    ("_pytest.main", None, ("pytest_runtestloop", "wrap_session")),
    ("_pytest.python", "Function", ("runtest",)),
    ("_pytest.python", None, ("pytest_pyfunc_call",)),
    ("pluggy._hooks", "HookCaller", ("__call__", "call_extra")),
    ("pluggy._callers", None, ("_multicall",)),
)
# What the records are written with, taken now: a project that swaps ``json.dumps`` (for a
# faster encoder, or to forge the records) changes nothing this plugin writes.
_DUMPS = json.dumps


def _capture() -> list[tuple[str, object, str, object]]:
    """(label, owner, attribute, object) of everything in ``_WATCHED`` that exists here."""
    import importlib

    captured: list[tuple[str, object, str, object]] = []
    for modname, cls, names in _WATCHED:
        try:
            module = importlib.import_module(modname)
        except ImportError:
            continue
        captured.append((modname, sys.modules, modname, module))
        owner = getattr(module, cls, None) if cls else module
        if owner is None:
            continue
        if cls:
            captured.append((f"{modname}.{cls}", module, cls, owner))
        space = vars(owner)
        for name in names:
            if name in space:
                captured.append((f"{modname}.{cls + '.' if cls else ''}{name}", owner, name, space[name]))
    return captured


_ORIGINALS = _capture()


def tampered(*, _watched: list = _ORIGINALS) -> list[str]:
    """What of ``_ORIGINALS`` is no longer what was captured (the list is bound here, so
    rebinding the module's name changes nothing this reads)."""
    found = []
    for label, owner, name, obj in _watched:
        now = owner.get(name) if isinstance(owner, dict) else vars(owner).get(name)
        if now is not obj:
            found.append(label)
    return found


def _tail(text: str | None, limit: int) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else "..." + text[-limit:]


# pytest's helpers that explain a failed `assert` (called by the rewritten assertion only once
# it failed): they call the operands' __repr__ and __eq__, which, in the project, ran only in
# failing tests, so the spectrum put a `Result.__repr__` (click) at the top of every ranking,
# and as the last line executed.  Their calls run untraced.
_REPORTING = ("_saferepr", "_format_assertmsg", "_call_reprcompare")


def _untrace_assertion_reports() -> None:
    try:
        from _pytest.assertion import rewrite
    except ImportError:
        return
    for name in _REPORTING:
        fn = getattr(rewrite, name, None)
        if fn is None or getattr(fn, "_frognano_untraced", False):
            continue
        setattr(rewrite, name, _untraced(fn))


def _untraced(fn):  # noqa: ANN001, ANN202
    def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        tracer = sys.gettrace()
        if tracer is None:
            return fn(*args, **kwargs)
        sys.settrace(None)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.settrace(tracer)

    call._frognano_untraced = True  # type: ignore[attr-defined]
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


class LineTracer:
    """Per-test line coverage of the files under ``root``, with the last executed source line.

    A ``sys.settrace`` tracer is enough here and works in any interpreter the project uses;
    frames outside the project return ``None`` from the global hook, so library code runs
    untraced and the overhead stays on the project's own lines.
    """

    def __init__(self, root: str) -> None:
        self.root = root.rstrip(os.sep) + os.sep
        self._files: dict[str, str | None] = {}  # co_filename -> relpath, or None when foreign
        self._is_test: dict[str, bool] = {}
        self._locals: dict[str, object] = {}  # relpath -> its per-line hook
        self.lines: dict[str, set[int]] = {}
        self.last: tuple[str, int] | None = None
        self.fresh = 0.0  # monotonic time of the first run of the latest line not run before
        # An fd, or None: each line a test runs for the first time is also written there at
        # once (emptied at each test's start), so a test killed in C code, which never reports,
        # still names the lines it ran (``results.unfinished_lines``).  A syscall per new line.
        self.sink: int | None = None

    def _relpath(self, filename: str) -> str | None:
        rel = self._files.get(filename, "")
        if rel == "":
            rel = None
            if filename.startswith(self.root) and filename.endswith(".py"):
                rel = filename[len(self.root):].replace(os.sep, "/")
                self._is_test[rel] = is_test_file(rel)
            self._files[filename] = rel
        return rel

    def _global(self, frame, event, arg):  # noqa: ANN001 - settrace signature
        rel = self._relpath(frame.f_code.co_filename)
        if rel is None:
            return None
        local = self._locals.get(rel)
        if local is None:
            local = self._locals[rel] = self._local_for(rel)
        return local

    def _local_for(self, rel: str):  # noqa: ANN202 - a settrace local hook
        """The per-line hook of one file.  It never reads ``frame.f_code``: that read raises the
        audit event ``object.__getattr__``, and once the sandbox's audit hook is installed a
        read per line tripled the cost of a coverage run (more-itertools: 11 s -> 22 s)."""
        is_test = self._is_test[rel]
        record = f"{int(is_test)}\t{rel}\t".encode()
        get_ident, main = threading.get_ident, threading.main_thread().ident

        def local(frame, event, arg):  # noqa: ANN001
            if event == "line":
                lines = self.lines.get(rel)
                if lines is None:
                    lines = self.lines[rel] = set()
                if frame.f_lineno not in lines:
                    lines.add(frame.f_lineno)
                    self.fresh = time.monotonic()
                    # The test's own thread only: a syscall in a thread the test races with
                    # changed who won (more-itertools' callback_iter test failed 3 runs in 3).
                    if self.sink is not None and get_ident() == main:
                        os.write(self.sink, record + b"%d\n" % frame.f_lineno)
                if not is_test:
                    self.last = (rel, frame.f_lineno)
            return local

        return local

    def start(self) -> None:
        _untrace_assertion_reports()
        self.lines = {}
        self.last = None
        self.fresh = time.monotonic()
        if self.sink is not None:
            os.ftruncate(self.sink, 0)
        threading.settrace(self._global)
        sys.settrace(self._global)

    def stop(self) -> dict[str, list[int]]:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        return {rel: sorted(lines) for rel, lines in self.lines.items()}


class FunctionTracer(LineTracer):
    """Per-test coverage good enough to tell *which functions* each test runs, at a fraction
    of ``LineTracer``'s cost (synthesis mode).

    Synthesis needs, per test, the functions it runs (to pick the tests a mutant can affect)
    and, over the whole suite, roughly which lines ever run (to skip mutants on dead lines).
    Tracing every line cost 3.5x a plain run of more-itertools' suite; this tracer samples:

    * test files are not traced at all (their lines are never mutated);
    * within one test, only the first ``CALLS`` calls of a code object trace their lines
      (later calls and generator resumptions still count as calls, costing one cheap hook);
    * a frame stops being traced after ``STALE`` line events in a row that added no new line
      (a hot loop).

    Every function a test enters has at least its first executed line recorded, so
    function-level questions get exact answers; lines reached only late in a long loop or only
    by a later call may be missing (a mutant there is skipped, never wrongly validated).
    ``last`` is not tracked (it is a line-level notion for localisation).
    """

    CALLS = 8
    STALE = 100

    def _global(self, frame, event, arg):  # noqa: ANN001 - settrace signature
        code = frame.f_code
        rel = self._relpath(code.co_filename)
        if rel is None or self._is_test[rel]:
            return None
        calls = self._calls.get(code, 0) + 1
        self._calls[code] = calls
        if calls > self.CALLS:
            return None
        lines = self.lines.get(rel)
        if lines is None:
            lines = self.lines[rel] = set()
        stale = 0
        limit = self.STALE

        def local(frame, event, arg):  # noqa: ANN001
            nonlocal stale
            if event == "line":
                line = frame.f_lineno
                if line in lines:
                    stale += 1
                    if stale > limit:
                        return None  # stop tracing this frame
                else:
                    stale = 0
                    lines.add(line)
            return local

        return local

    def start(self) -> None:
        self._calls: dict = {}
        super().start()


class _Timeout(BaseException):
    """A BaseException so that a test's own ``except Exception`` cannot swallow the timeout."""


class FrogNanoPlugin:
    def __init__(
        self,
        out_path: str,
        root: str,
        *,
        timeout: float | None = None,
        timeouts: dict[str, float] | None = None,
        coverage: bool | str = False,
        reverse: bool = False,
        stop_on_timeout: bool = False,
        max_output: int = 4000,
        output=None,  # noqa: ANN001 - a frognano_output.BoundedOutput, or None: pytest's capture
        stall: dict | None = None,
    ) -> None:
        self.root = os.path.realpath(root)
        self.reverse = reverse
        self.retarget(out_path, timeout=timeout, timeouts=timeouts, coverage=coverage,
                      stop_on_timeout=stop_on_timeout, max_output=max_output, output=output, stall=stall)
        self._phase: dict[str, dict] = {}
        self._timed_out = False
        self._conftests: dict[str, tuple[str, str]] = {}  # collector nodeid -> its failed conftest
        self._forged: list[str] = []  # reports seen contradicting their call (see makereport)
        self._seen_tampering: set[str] = set()

    def retarget(self, out_path: str, *, timeout: float | None = None, timeouts: dict[str, float] | None = None,
                 coverage: bool | str = False, stop_on_timeout: bool = False, max_output: int = 4000,
                 output=None, stall: dict | None = None) -> None:  # noqa: ANN001
        """Where and how this plugin reports from now on (a warm session's run reuses the
        plugin the session registered: registering a new one costs more than the tests).

        ``stall`` (``{"after": s, "factor": f}``, line coverage only; it marks a diagnosis run,
        whose new lines are also recorded as they run: see ``LineTracer.sink``) stops, before its timeout,
        a test that has run no line it had not run before for ``max(s, f x the slowest test
        that passed so far in this run)`` seconds while keeping the CPU busy (``BUSY``): it
        goes round a loop it will likely never leave.  A diagnosis run then learns of an endless
        loop in seconds, with its lines."""
        self.output = output
        previous = getattr(self, "out", None)
        if previous is not None and not previous.closed:
            # The session's own file, left open, would be collected during the run's first test
            # (a ResourceWarning, an error under the project's `filterwarnings = error`).
            previous.close()
        self.out = open(out_path, "a", encoding="utf-8")  # noqa: SIM115 - lives for the run
        self.timeout = timeout
        self.timeouts = timeouts or {}
        # coverage: False, True or "lines" (LineTracer), "functions" (FunctionTracer).
        tracer = FunctionTracer if coverage == "functions" else LineTracer
        self.tracer = tracer(self.root) if coverage else None
        self.stop_on_timeout = stop_on_timeout
        self.max_output = max_output
        line_traced = self.tracer is not None and not isinstance(self.tracer, FunctionTracer)
        self.stall = stall if stall and line_traced and stall.get("after") else None
        if getattr(self, "_sink", None) is not None:
            os.close(self._sink)  # the previous run's (a warm session's plugin is retargeted)
        self._sink = None
        if stall and line_traced:  # a diagnosis run: a test killed in C must still name its lines
            self._sink = self.tracer.sink = os.open(out_path + ".lines", os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                                    | os.O_TRUNC, 0o600)
        self._slowest = 0.0  # the slowest test that passed in this run, seconds
        self._stalls = 0  # tests of this run stopped as stalled

    # -- output ---------------------------------------------------------------------------
    def emit(self, kind: str, **fields) -> None:
        self.out.write(_DUMPS({"kind": kind, **fields}) + "\n")
        self.out.flush()

    def _rel(self, path: str) -> str:
        path = os.path.realpath(path)
        if path.startswith(self.root + os.sep):
            return path[len(self.root) + 1:].replace(os.sep, "/")
        return path

    def _frames(self, excinfo) -> list[dict]:  # noqa: ANN001
        frames = []
        for entry in excinfo.traceback:
            path = str(entry.path)
            frames.append({"path": self._rel(path), "line": entry.lineno + 1, "function": entry.name})
        inside = [f for f in frames if not os.path.isabs(f["path"])]
        # Frames in pytest or library code say little about where the bug is; keep the
        # project's own, or the last few when the failure never touched project code.
        return (inside or frames[-3:])[-30:]

    # -- collection -----------------------------------------------------------------------
    def _conftest_failure(self, exc) -> tuple[str, str] | None:  # noqa: ANN001
        """(relative path, message) of a conftest that raised at import, else None."""
        if type(exc).__name__ != "ConftestImportFailure":
            return None
        cause = getattr(exc, "cause", None)  # pytest >= 8; 7 keeps (type, value, tb) in excinfo
        if cause is None and isinstance(getattr(exc, "excinfo", None), tuple):
            cause = exc.excinfo[1]
        cause = cause or exc.__cause__ or exc
        path = self._rel(str(getattr(exc, "path", "conftest.py")))
        lines = traceback.format_exception(type(cause), cause, cause.__traceback__)
        exconly = "".join(traceback.format_exception_only(type(cause), cause)).strip()
        # Tracebacks keep their ``File "...", line N`` frames (the editor puts the error there);
        # the last line is pytest's "E   <exception>" form, which the summary shows.
        message = (f"ImportError while loading conftest {path!r}.\n" + "".join(lines)
                   + f"E   {exconly.splitlines()[-1] if exconly else type(cause).__name__}\n")
        return path, _tail(message, self.max_output)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_load_initial_conftests(self, early_config, parser, args):  # noqa: ANN001
        # The conftests pytest loads before collecting (the root's, tests/'s) fail outside any
        # collector: pytest prints the error and exits 4 (a usage error).  Report it here,
        # structured, as the collection error it is.
        outcome = yield
        found = self._conftest_failure(outcome.excinfo[1]) if outcome.excinfo else None
        if found is not None:
            self.emit("collect_error", nodeid=found[0], path=found[0], message=found[1])

    def pytest_exception_interact(self, node, call, report) -> None:  # noqa: ANN001
        # Called for a failed collector before its collect report: remember which conftest.
        if getattr(report, "when", None) == "collect" and call.excinfo is not None:
            found = self._conftest_failure(call.excinfo.value)
            if found is not None:
                self._conftests[report.nodeid] = found

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            found = self._conftests.pop(report.nodeid, None)
            self.emit(
                "collect_error",
                nodeid=report.nodeid,
                message=found[1] if found else _tail(str(report.longrepr), self.max_output),
                **({"path": found[0]} if found else {}),
            )

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items) -> None:  # noqa: ANN001
        # Reversed order (after any other plugin's reordering) exposes tests that only pass
        # because an earlier test left some state behind.
        if self.reverse:
            items.reverse()

    def pytest_collection_finish(self, session) -> None:  # noqa: ANN001
        self.emit("collected", nodeids=[item.nodeid for item in session.items])

    # -- running --------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session) -> None:  # noqa: ANN001
        if self.output is None:
            return
        self.output.begin_tests()
        import faulthandler

        if faulthandler.is_enabled():  # a crash's traceback goes to the log, not through the pipe
            faulthandler.enable(file=self.output.log_fd, all_threads=True)

    # The slowest-test rule never asks more than this share of the test's limit.  Past the
    # limit it switched the stall check off: on more-itertools a thread test takes 18.7 s under
    # tracing (1 s untraced), ten times that is over the 30 s timeout, and the CPU-bound tests
    # after it (the prime sieve: 8.9 s untraced) ran traced until the timeout stopped them, a
    # wait the untraced rerun then showed was for nothing.  A test stopped here gets that rerun
    # too (the engine's ``recheck_untraced``: at least 1.25 x its traced seconds), which is
    # enough for any test that would have passed traced within its limit and that tracing slows
    # 1.6x or more.
    STALL_CAP = 0.5

    def _stall_bound(self, limit: float) -> float:
        assert self.stall is not None
        after = float(self.stall["after"])
        if self._stalls:
            # The code under test loops, and the first test caught in it named its lines: the
            # tests after it that enter the same loop need not each cost the whole wait.
            after /= 5
        return max(after, min(float(self.stall.get("factor", 0)) * self._slowest, self.STALL_CAP * limit))

    # A stalled test spends at least this share of the wall-clock time on the CPU: one that
    # sleeps, or waits for a subprocess, a socket or a thread, is waiting, not looping, and
    # gets its whole timeout.  (A fifth, since a loop on a loaded machine gets less than a core.)
    BUSY = 0.2

    def _on_alarm(self, signum, frame):  # noqa: ANN001
        now, cpu = time.monotonic(), time.process_time()
        left = self._limit - (now - self._started)
        if self._stall_at is not None and left > 0:
            fresh = self.tracer.fresh
            idle = now - fresh
            # A loop that never ends ran all its lines at once and then went round them; a long
            # computation reaches new lines late (its next phase: 3.5 s into a 7 s test of
            # more-itertools, under coverage on a loaded machine).  So the quiet time asked
            # for grows with how late the last new line came.
            need = max(self._stall_at, float(self.stall.get("factor", 0)) * (fresh - self._started))
            if idle < need:  # it still reaches new lines: look again when it could stall
                self._window = (now, cpu)
                signal.setitimer(signal.ITIMER_REAL, max(0.01, min(need - idle, left)))
                return
            since, cpu_since = self._window
            if cpu - cpu_since < self.BUSY * (now - since):  # waiting: look again in a while
                self._window = (now, cpu)
                signal.setitimer(signal.ITIMER_REAL, max(0.01, min(1.0, left)))
                return
            self._stalled = idle
            self._stalls += 1
        self._timed_out = True
        raise _Timeout("test exceeded its time limit")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):  # noqa: ANN001
        nodeid = item.nodeid
        if self.output is not None:
            self.output.take()  # what came between tests (module-level prints) is no test's
        self.emit("start", nodeid=nodeid)
        self._phase[nodeid] = {"outcome": "passed", "duration": 0.0, "message": "", "frames": [],
                               "stdout": "", "stderr": ""}
        self._timed_out = False
        self._stalled: float | None = None
        limit = self.timeouts.get(nodeid, self.timeout)
        self._limit, self._started = limit or 0.0, time.monotonic()
        self._window = (self._started, time.process_time())  # (wall, CPU) when last looked at
        self._stall_at = self._stall_bound(limit) if self.stall is not None and limit else None
        if self._stall_at is not None and self._stall_at >= limit:
            self._stall_at = None  # the timeout comes first
        previous = None
        if limit and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self._stall_at or limit)
        if self.tracer is not None:
            self.tracer.start()
        try:
            yield
        finally:
            coverage = self.tracer.stop() if self.tracer is not None else None
            if previous is not None:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            record = self._phase.pop(nodeid)
            self._check_tampering(record)
            if self._timed_out:
                record["outcome"] = "timeout"
                record["message"] = f"Timeout: the test ran longer than {limit:g} s"
                if self._stalled is not None:
                    record["message"] = (f"Timeout: the test ran {self._stalled:.1f} s without reaching a line "
                                         f"it had not run before (an endless loop?), stopped before its "
                                         f"{limit:g} s timeout")
                if self.stop_on_timeout:  # pytest stops after this test (its teardown still runs)
                    item.session.shouldstop = f"{nodeid} timed out"
                # pytest keeps a failed test's traceback (and so the loop's locals: a list grown
                # for seconds) in sys.last_* until the next test's call, which then pays for
                # freeing it: 0.17 s of a 1 ms test, inflating the bounds learnt from it.
                for name in ("last_type", "last_value", "last_traceback", "last_exc"):
                    if hasattr(sys, name):
                        delattr(sys, name)
                gc.collect()  # and the frames' reference cycles, now rather than in the next test
            elif record["outcome"] == "passed":
                self._slowest = max(self._slowest, record["duration"])
            if coverage is not None:
                record["coverage"] = coverage
                record["last"] = list(self.tracer.last) if self.tracer.last else None
            self.emit("result", nodeid=nodeid, **record)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):  # noqa: ANN001
        outcome = yield
        report = outcome.get_result()
        record = self._phase.get(item.nodeid)
        if record is None:
            return
        record["duration"] += report.duration
        out, err = self.output.take() if self.output is not None else (report.capstdout, report.capstderr)
        if out:
            record["stdout"] = _tail(record["stdout"] + out, self.max_output)
        if err:
            record["stderr"] = _tail(record["stderr"] + err, self.max_output)
        if call.excinfo is not None and report.passed and not _OUTCOME(call.excinfo.value):
            # pytest never reports a test that raised as passed: its report was rewritten.
            self._forged.append(f"a report of {item.nodeid}, which raised, said passed")
        if hasattr(report, "wasxfail"):
            record["outcome"] = "xfailed" if report.skipped else "xpassed"
            if report.failed:  # strict xpass
                record["outcome"] = "failed"
                record["message"] = "XPASS(strict) " + str(report.wasxfail)
            return
        if report.skipped and record["outcome"] == "passed":
            record["outcome"] = "skipped"
            return
        if report.failed and record["outcome"] in ("passed", "skipped"):
            record["outcome"] = "error" if call.when == "setup" else "failed"
            if call.when == "teardown":
                record["outcome"] = "error"
            if call.excinfo is not None:
                record["message"] = _tail(call.excinfo.exconly(), self.max_output)
                record["frames"] = self._frames(call.excinfo)
            else:
                record["message"] = _tail(str(report.longrepr), self.max_output)

    def pytest_sessionfinish(self, session, exitstatus) -> None:  # noqa: ANN001
        self.exitstatus = int(exitstatus)

    # -- forged results -------------------------------------------------------------------
    def tampering(self) -> list[str]:
        """What the code under test rewrote of pytest's reporting or of this plugin so far."""
        overridden = [f"frognano_plugin.FrogNanoPlugin.{n} (on the instance)" for n in _OWN_NAMES if n in vars(self)]
        return [*tampered(), *overridden, *self._forged]

    def _check_tampering(self, record: dict) -> None:
        """After each test: a run whose reporting was rewritten reports every test from then on
        as an error naming what changed, and says so once in a ``tampered`` record."""
        changed = self.tampering()
        if not changed:
            return
        for what in changed:
            if what not in self._seen_tampering:
                self._seen_tampering.add(what)
                self.emit("tampered", what=what)
        record.update(outcome="error", frames=[],
                      message=_tail(f"FrogNano: the code under test rewrote pytest's reporting ({', '.join(changed[:3])}); "
                                    "this run proves nothing", self.max_output))


def _OUTCOME(exc: BaseException) -> bool:  # noqa: N802 - reads as the predicate it is
    """Whether ``exc`` is one of pytest's own outcomes (skip, xfail, fail, exit)."""
    return isinstance(exc, OutcomeException)


# This plugin's own methods and checks are watched with pytest's (captured at import, like them).
_OWN_NAMES = tuple(n for n, v in vars(FrogNanoPlugin).items() if callable(v) or isinstance(v, property))
_ORIGINALS.extend((f"frognano_plugin.FrogNanoPlugin.{n}", FrogNanoPlugin, n, vars(FrogNanoPlugin)[n]) for n in _OWN_NAMES)
_ORIGINALS.extend((f"frognano_plugin.{n}", sys.modules[__name__], n, globals()[n])
                  for n in ("tampered", "_OUTCOME", "FrogNanoPlugin", "_ORIGINALS"))
