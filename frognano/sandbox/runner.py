"""Run selected tests in the shadow copy: a warm fork server, or a fresh process per run.

Both strategies send the same request to the same worker code (``_worker/frognano_worker.py``)
and read the same streamed results, so they can only differ in speed.  The controller adds what a
run inside the project's interpreter cannot do for itself: a wall-clock watchdog that kills the
whole process group of a test that hangs in C code (``process``), and, here, relaunching the
remaining tests when one kills its own process.  The warm server's protocol is in ``forkserver``,
the reading of what the OS sandbox refused in ``denials``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ProjectError, UsageError
from ..project_paths import is_virtualenv
from ._worker import frognano_confine as confine
from .denials import denial_note, denied_writes
from .forkserver import ServerLost, WarmServerClient
from .process import POLL, Watch, describe_exit, kill_run, killpg, tail, test_environment, worker_env
from .results import CollectError, RunResult, TestResult, parse_results, unfinished_lines
from .runconfig import RunnerConfig  # defined apart (see runconfig); importers take it from here too
from .workspace import Workspace

__all__ = ["RunnerConfig", "TestRunner", "find_python", "probe_sandbox"]

log = logging.getLogger(__name__)

_MAX_RELAUNCHES = 25
_warned_unconfined: set[str] = set()  # "tests run unconfined" is said once per process and reason
_warned_partial: set[str] = set()  # "tests run without namespaces", likewise
_NAMESPACES = True  # runs enter their own user, mount and network namespaces where the kernel allows


def probe_sandbox() -> tuple[str, str]:
    """How this machine can confine test runs (``"landlock ABI 7"``), or "" and why not.

    The project's interpreter runs on the same kernel, so FrogNano asks here, before a run.
    """
    return confine.probe()


def _gap_warning(confinement: str, gap: str) -> str:
    """What a confined run lacks (``confinement``: the worker's layers, ``gap``: why), in words."""
    if "mount+net namespaces" not in confinement:
        seccomp = "denied by seccomp" if "seccomp" in confinement else "not denied either"
        return (f"tests run without their own mount and network namespaces ({gap}): metadata writes "
                f"outside the shadow copy (chmod, chown, utime, xattrs) are not denied; UDP, raw and "
                f"netlink sockets are {seccomp}")
    if "seccomp" not in confinement:
        return (f"tests run without the seccomp filter ({gap}): changing other processes' priorities "
                "and limits, raw sockets and mount changes are not denied")
    return f"the tests' confinement is incomplete: {gap}"


def find_python(root: Path, configured: str | None) -> str:
    """The interpreter that runs the project's tests."""
    if configured:
        found = shutil.which(configured) or (configured if Path(configured).exists() else None)
        if not found:
            raise UsageError(f"python = {configured!r}: no such interpreter")
        return found
    for venv in (".venv", "venv"):
        candidate = root / venv / "bin" / "python"
        if candidate.exists():
            return str(candidate)
    return sys.executable


class _Options(NamedTuple):
    """How one run goes, beyond which tests (see ``TestRunner.run``)."""

    coverage: bool | str = False
    reverse: bool = False
    stop_on_timeout: bool = False
    name_denials: bool = False
    stall: tuple[float, float] | None = None  # (seconds, factor): see ``TestRunner.run``


def _brief(rec: dict) -> TestResult:
    """A result record of a run in flight, as ``on_result`` is told it: outcome, duration and
    message; the coverage and frames come with the run's result."""
    return TestResult(rec["nodeid"], rec["outcome"], duration=float(rec.get("duration", 0.0)),
                      message=rec.get("message", ""))


class TestRunner(WarmServerClient):
    """Runs tests of one workspace.  ``warm`` tries the fork server first (``forkserver``)."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, workspace: Workspace, config: RunnerConfig | None = None) -> None:
        self.ws = workspace
        self.config = config or RunnerConfig()
        self.python = find_python(workspace.root, self.config.python)
        assert workspace.shadow is not None, "open and sync the workspace first"
        self.dir = workspace.shadow.with_name(workspace.shadow.name + ".runs")
        self.dir.mkdir(exist_ok=True)
        self._setup_sandbox()
        self._counter = itertools.count()
        self._init_server(self.config.warm)
        self.runs = 0
        # Set by the caller (the engine during a fix, the language server on a new save): a run
        # in flight is killed as soon as it is set, and its result comes back marked cancelled.
        self.cancel: threading.Event | None = None
        # Set by the caller (the search, for its candidates): no run outlives this moment
        # (time.monotonic()); a run in flight then is killed, and nothing is relaunched.
        self.deadline: float | None = None
        # Held while the warm session is prepared ahead of runs (``prewarm``, ``warm_up``): a
        # run, or closing, waits for it instead of racing it.
        self._prewarming = threading.Lock()

    # -- public ---------------------------------------------------------------------------
    def run(
        self,
        nodeids: Sequence[str] | None = None,
        *,
        args: Sequence[str] = (),
        coverage: bool | str = False,
        timeouts: dict[str, float] | None = None,
        cancel: threading.Event | None = None,
        reverse: bool = False,
        stop_on_timeout: bool = False,
        name_denials: bool = False,
        stall: tuple[float, float] | None = None,
        fresh: bool = False,
        on_result: Callable[[TestResult], None] | None = None,
    ) -> RunResult:
        """Run ``nodeids`` (all tests when None) and return every test's structured result.

        ``coverage``: False, True (every line each test runs, and its last line) or
        ``"functions"`` (cheaper: exact about which functions each test enters, lines sampled;
        see the worker's ``FunctionTracer``).  ``reverse`` runs the tests in reverse order.
        ``stop_on_timeout`` ends the run at the first test that times out (the tests after it
        are not run): for callers to whom one timeout settles the verdict.
        ``name_denials`` records (in ``denied``) every write outside the sandbox's writable
        paths that Python code attempts, even one whose error a test swallowed.  It costs an
        audit-hook call per Python function call under coverage (+37% on more-itertools), so
        the engine asks for it only in a short rerun of the tests that failed.
        ``stall`` (``(seconds, factor)``, with ``coverage=True``) ends a test early, as a
        timeout, once it has kept the CPU busy without running a line it had not run before for
        ``max(seconds, factor x the slowest test that passed before it)`` (a fifth of
        ``seconds`` once a test of the run stalled): an endless loop costs a diagnosis run
        seconds, not its timeout, and its coverage still names the loop's lines.  A test that
        waits (a sleep, a subprocess) is not stalled.  With ``stall`` (even ``seconds`` 0: no
        stall detection) a test killed before it reported (a loop in C code) keeps the lines it
        ran, as its coverage.

        ``cancel`` (default: ``self.cancel``) kills the run in flight when set; the result then
        has ``cancelled`` set and holds only the tests that finished.

        ``fresh`` runs in a new interpreter, never the warm server or its session: what the
        user's own ``pytest`` would do (the final confirmation of a fix).  The result's
        ``returncode`` is then that process's exit status, read outside the tests' process.

        ``on_result`` is called, in this thread, with each test's result (without its coverage)
        soon after the test finishes, and with the timeout of a test the run was killed in,
        while the run goes on: what a caller can start on before the run ends.
        """
        with self._prewarming:  # a warm-up in progress ends first (its session is this run's)
            pass
        started = time.monotonic()
        total = RunResult()
        cancel = cancel if cancel is not None else self.cancel
        if cancel is not None and cancel.is_set():
            total.cancelled = True
            return total
        pending = list(nodeids) if nodeids is not None else None
        for _ in range(_MAX_RELAUNCHES):
            options = _Options(coverage, reverse, stop_on_timeout, name_denials, stall)
            part, running, killed, code, unfinished = self._run_once(pending, args, options, timeouts or {}, cancel,
                                                                     fresh=fresh, on_result=on_result)
            total.merge(part)
            total.returncode = code
            if cancel is not None and cancel.is_set():
                total.cancelled = True  # the killed test is not a timeout or a crash: no verdict
                break
            if self.deadline is not None and time.monotonic() > self.deadline:
                total.cancelled = True  # the caller's time ran out mid-run: no verdict either
                break
            if running is not None:
                total.tests[running] = self._unfinished(running, killed, code, unfinished, timeouts or {})
                if on_result is not None:
                    on_result(total.tests[running])
                if killed and stop_on_timeout:
                    break
            elif killed and not part.tests:
                # Killed before any test started: a relaunch would do the same again (it once
                # did, 25 times at collect_timeout each, in a fresh process after the warm server
                # was lost).
                what = "collection" if not part.collected else "the run's start (collection, session set-up)"
                total.collect_errors.append(CollectError(
                    "", f"{what} took longer than {self.config.collect_timeout:g} s and was killed"))
                break
            if running is None and not killed:
                break
            wanted = pending if pending is not None else total.collected
            pending = [n for n in wanted if n not in total.tests]
            if not pending:
                break
            log.info("relaunching %d remaining tests after %s", len(pending), running or "a kill")
        total.duration = time.monotonic() - started
        total.warm = self.warm
        if not total.tests and not total.collect_errors and total.exitstatus is None and not total.cancelled:
            raise ProjectError(self._startup_failure())
        return total

    def _unfinished(self, running: str, killed: bool, code: int | None, unfinished: tuple,
                    timeouts: dict[str, float]) -> TestResult:
        """The result of the test a run was in when its process was killed (a timeout) or died
        (a crash), with the coverage it had reached (``unfinished``: coverage and last line)."""
        limit = timeouts.get(running, self.config.timeout)
        message = (
            f"Timeout: the test ran longer than {limit:g} s and was killed"
            if killed else f"the test process died while running this test ({describe_exit(code)})"
        )
        coverage, last = unfinished
        return TestResult(running, "timeout" if killed else "crashed", message=message, coverage=coverage, last=last)

    def prewarm(self) -> None:
        """Start the warm server and its session (the suite collected once, for swapped runs)
        for the sources as they are now, ahead of the first run that needs them.  A run started
        meanwhile (from another thread) waits for it.  A failure is left for that run to meet
        and report."""
        with self._prewarming:
            self._prewarm()

    def warm_up(self) -> threading.Thread:
        """``prewarm`` on a thread of its own, returned; the next run (or ``close``) waits for
        it.  The search warms its lanes so while it lists candidates: the collection (1.5-4 s
        on more-itertools) overlaps that."""
        self._prewarming.acquire()  # here, not on the thread: a run called next must wait

        def work() -> None:
            try:
                self._prewarm()
            finally:
                self._prewarming.release()

        thread = threading.Thread(target=work, name="frognano-prewarm", daemon=True)
        thread.start()
        return thread

    def ready(self) -> None:
        """Return once no warm-up is in progress.  Call it before editing the shadow copy for a
        run (``Workspace.edited``): a collection still going would import the edit, and the
        session would take the candidate's text for the original."""
        with self._prewarming:
            pass

    def _prewarm(self) -> None:
        if not (self.config.warm and self.config.swap) or self._server_failed:
            return
        try:
            if self._server is None:
                self._start_server()
            if self._server is not None:
                self._ensure_session(self._request(None, [], _Options(), {}))
        except Exception as exc:  # noqa: BLE001 - the next run starts them and says what failed
            log.debug("no warm session ahead of the run: %s", exc)

    def close(self) -> None:
        with self._prewarming:
            self._stop_server()
        shutil.rmtree(self.tmp, ignore_errors=True)  # made again if the runner is used again

    def __enter__(self) -> "TestRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sandbox ----------------------------------------------------------------------
    def _setup_sandbox(self) -> None:
        """Decide, once, whether runs are confined; the worker confirms it in every run."""
        self.sandbox = self.config.sandbox  # what the worker is asked for
        self.confinement = ""  # how the last run was confined ("landlock ABI 7"), "" when not
        self.unconfined = 'sandbox = "off"' if self.sandbox == "off" else ""  # why runs are not confined
        if self.sandbox != "off":
            how, why = probe_sandbox()
            if not how:
                self._unconfined(why)
                self.sandbox = "off"
        self.writable = [os.path.expanduser(p) for p in self.config.sandbox_writable]
        for path in self.writable:
            if not os.path.exists(path):
                log.warning("sandbox_writable: %s does not exist, so tests cannot write there", path)
        # The run's temp dir, TMPDIR of every run (pytest's tmp_path lands there): under the
        # system's temp dir, since unix socket paths in it must stay short.
        self.tmp = Path(tempfile.mkdtemp(prefix="frognano-tmp-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.tmp), True)
        # HOME of the tests: an empty folder of the run's temp dir, so that a tool writing its
        # ~/.cache or ~/.config stays inside the run and nothing of the user's home is found
        # there by name (it can still be read by its absolute path).
        self.home = self.tmp / "home"
        self.env = test_environment(self.config.test_env, str(self.home))
        venv = Path(self.python).parent.parent  # .venv/bin/python: not resolved, a venv's is a link
        if is_virtualenv(venv):
            self.env["VIRTUAL_ENV"] = str(venv)  # the project's, whichever FrogNano runs in

    def _unconfined(self, why: str) -> None:
        self.unconfined = why
        if self.config.sandbox == "required":
            raise UsageError(f'sandbox = "required", but the tests cannot be confined here: {why}')
        if why not in _warned_unconfined:
            _warned_unconfined.add(why)
            log.warning("tests run unconfined (no OS sandbox): %s", why)

    def _check_confinement(self, result: RunResult) -> None:
        """The worker's word on the run just finished: confined, or why not (refused if required)."""
        if result.confinement:
            if result.unconfined and result.unconfined not in _warned_partial:  # confined, with gaps
                _warned_partial.add(result.unconfined)
                log.warning("%s", _gap_warning(result.confinement, result.unconfined))
            self.confinement, self.unconfined = result.confinement, ""
        elif result.confinement is not None and self.sandbox != "off":
            self.confinement = ""
            self._unconfined(result.unconfined or "the test process could not confine itself")

    def _writable_roots(self) -> list[str]:
        shadow = self.ws.shadow
        assert shadow is not None
        return [os.path.realpath(p) for p in (shadow, self.dir, self.tmp, *self.writable)]

    def denied_writes(self, run: RunResult) -> dict[str, list[str]]:
        """Paths outside the shadow that ``run``'s failing tests (or its collection) could not
        write because of the sandbox, each with the failing tests that tried (see ``denials``)."""
        if not run.confinement:
            return {}
        return denied_writes(run, self._writable_roots())

    def denial_note(self, run: RunResult) -> str | None:
        """One line naming what the sandbox denied ``run``'s tests and the setting that allows it."""
        return denial_note(self.denied_writes(run))

    # -- one launch -----------------------------------------------------------------------
    def _request(self, nodeids: Sequence[str] | None, args: Sequence[str],
                 options: _Options, timeouts: dict[str, float]) -> dict:
        n = next(self._counter)
        results = self.dir / f"results-{n}.jsonl"
        results.unlink(missing_ok=True)
        shadow = self.ws.shadow
        assert shadow is not None
        self.tmp.mkdir(exist_ok=True)
        self.home.mkdir(exist_ok=True)
        paths = ["src"] if (shadow / "src").is_dir() else []
        cpu = None
        if nodeids:
            cpu = int(self.config.collect_timeout + sum(timeouts.get(t, self.config.timeout) for t in nodeids) * 2)
        return {
            "root": str(shadow),
            "real_root": str(self.ws.root),
            "paths": paths,
            "args": [*self.config.test_args, *args],
            "nodeids": list(nodeids or []),
            "results": str(results),
            "log": str(self.dir / f"log-{n % 4}.txt"),
            "timeout": self.config.timeout,
            "timeouts": timeouts,
            "coverage": options.coverage,
            "reverse": options.reverse,
            "stop_on_timeout": options.stop_on_timeout,
            "stall": {"after": options.stall[0], "factor": options.stall[1]} if options.stall else None,
            "max_output": self.config.max_output,
            "limits": {"memory_mb": self.config.memory_mb, "fsize_mb": self.config.fsize_mb,
                       "cpu_seconds": cpu},
            "sandbox": {"mode": self.sandbox, "tmp": str(self.tmp), "writable": self.writable,
                        "name_denials": options.name_denials, "env": self.env,
                        "namespaces": _NAMESPACES},
        }

    def _watch(self, req: dict, timeouts: dict[str, float], cancel: threading.Event | None,
               on_result: Callable[[TestResult], None] | None = None) -> Watch:
        watch = Watch(Path(req["results"]), self.config.timeout, timeouts, self.config.collect_timeout)
        watch.cancel, watch.deadline = cancel, self.deadline
        if on_result is not None:
            watch.on_result = lambda rec: on_result(_brief(rec))
        return watch

    def _run_once(self, nodeids, args, options, timeouts, cancel=None, *, fresh=False, on_result=None):
        req = self._request(nodeids, args, options, timeouts)
        watch = self._watch(req, timeouts, cancel, on_result)
        if not fresh and not self._server_failed and self._server is None:
            self._start_server()
        self.runs += 1
        fallback = ""
        if self._server is not None and not fresh:
            try:
                swapped = self._run_session(req, watch) if self._swappable(nodeids, args, options) else None
                if swapped is not None:
                    killed, code = swapped
                else:
                    fallback = parse_results(Path(req["results"]))[0].fallback
                    if fallback:
                        log.debug("this run re-imports the project: %s", fallback)
                    Path(req["results"]).unlink(missing_ok=True)
                    Path(req["results"] + ".lines").unlink(missing_ok=True)
                    req = self._request(nodeids, args, options, timeouts)
                    watch = self._watch(req, timeouts, cancel, on_result)
                    killed, code = self._run_warm(req, watch)
            except ServerLost as exc:
                log.warning("warm test server lost (%s); using fresh processes", exc)
                self._server, self._server_failed, self.warm_reason = None, True, str(exc)
                req = self._request(nodeids, args, options, timeouts)
                watch = self._watch(req, timeouts, cancel, on_result)
                killed, code = self._run_fresh(req, watch)
        else:
            killed, code = self._run_fresh(req, watch)
        result, running = parse_results(Path(req["results"]))
        result.fallback = result.fallback or fallback
        result.log_tail = tail(Path(req["log"]))
        result.relocate(req["root"], req["real_root"])  # messages name the project's files
        if result.leaks:
            log.warning("modules imported from the project instead of the shadow: %s",
                        ", ".join(result.leaks))
        Path(req["results"]).unlink(missing_ok=True)
        self._check_confinement(result)
        # A test that never reported (killed in C code, or its process died): what it ran.
        lines = Path(req["results"] + ".lines")
        unfinished = unfinished_lines(lines) if running is not None else (None, None)
        lines.unlink(missing_ok=True)
        return result, running, killed, code, unfinished

    def _swappable(self, nodeids: Sequence[str] | None, args: Sequence[str], options: _Options) -> bool:
        """Whether a run may use the warm session: a selection of collected tests, run as the
        session collected them (no extra arguments, no reversed order, no audit of writes)."""
        return bool(self.config.swap and nodeids and not args and not options.reverse
                    and not options.name_denials)

    def _run_fresh(self, req: dict, watch: Watch) -> tuple[bool, int | None]:
        req_path = self.dir / "request.json"
        req_path.write_text(json.dumps(req))
        with open(req["log"], "wb") as logf:
            # stdin: a pipe FrogNano never writes; its end tells the worker FrogNano died.
            proc = subprocess.Popen(
                [self.python, "-m", "frognano_worker", "run", str(req_path)],
                cwd=req["root"], env=worker_env(), stdin=subprocess.PIPE,
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            )
        fd = os.pidfd_open(proc.pid) if hasattr(os, "pidfd_open") else None
        try:
            while proc.poll() is None:
                if fd is not None:
                    select.select([fd], [], [], POLL)
                else:
                    time.sleep(POLL / 5)
                if proc.poll() is None and watch.overdue():
                    watch.killed = True
                    kill_run(proc.pid)
                    proc.wait()
        finally:
            if fd is not None:
                os.close(fd)
            killpg(proc.pid)  # the run and whatever its tests left behind
            proc.wait()
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
        return watch.killed, proc.returncode

    def _startup_failure(self) -> str:
        logs = sorted(self.dir.glob("log-*.txt"), key=lambda p: p.stat().st_mtime)
        text = tail(logs[-1]) if logs else ""
        last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        if "No module named pytest" in text or "No module named 'pytest'" in text:
            return f"pytest is not installed for {self.python}; install it or set [tool.frognano] python"
        return f"the test process failed before running any test: {last.strip()[:300]}"

