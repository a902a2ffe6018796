"""The warm session: import the project and collect its tests once, then one fork per run.

A child of the fork server (``frognano_worker serve``), confined like any run, runs
``pytest.main`` over the whole suite; once collection is done, its ``pytest_runtestloop``
answers run requests instead of running the tests.  Each request forks a child that

1. swaps the edited function bodies into the live modules (``frognano_swap``), or, when the
   edit needs more than that, exits ``EXIT_FALLBACK`` with the reason in its results, and the
   controller re-runs the request the ordinary way (a fresh import in a fork of the server);
2. runs the selected, already collected items through pytest's own runtest protocol, with a
   fresh FrogNano plugin writing to the request's results file.

So a candidate costs a fork, the swap and the selected tests' own bodies: no import of the
project, no collection of a 5,000-line test module.  Requests and replies are JSON lines on two
pipes that the fork server relays.

Standard library and pytest only: this runs in the project's interpreter.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

import frognano_confine
import frognano_swap
import pytest
from frognano_runsetup import apply_limits, confinement_record, leaked, own_group, prepare_run, redirect, vm_size_bytes

EXIT_FALLBACK = 75  # EX_TEMPFAIL: this request needs a full re-import


class _Lines:
    """JSON lines from a pipe fd."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer = fd, b""

    def read(self) -> dict | None:
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


class SessionLoop:
    """The pytest plugin that turns the run loop into a request loop."""

    def __init__(self, req: dict, requests: int, replies: int) -> None:
        self.req = req
        self.plugin = None  # the session's FrogNano plugin, retargeted by each run
        self.requests = _Lines(requests)
        self.replies = replies
        self.errors = 0
        self.started = time.monotonic()
        self._exited: list[int] = []  # runs that said their exit code and are exiting

    def reply(self, obj: dict) -> None:
        os.write(self.replies, (json.dumps(obj) + "\n").encode())

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            self.errors += 1

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session) -> bool:  # noqa: ANN001
        tracked = frognano_swap.track(sys.modules, self.req["root"])
        import_time = frognano_swap.prepare(tracked)
        index = {item.nodeid: item for item in session.items}
        gc.collect()
        gc.freeze()  # a forked child must not walk (and so copy) everything collected
        self.mapped = vm_size_bytes()
        self.reply({"ready": not self.errors and bool(session.items), "items": len(session.items),
                    "errors": self.errors, "modules": len(tracked),
                    "seconds": round(time.monotonic() - self.started, 3)})
        while True:
            req = self.requests.read()
            if req is None:
                return True
            done_r, done_w = os.pipe()
            sys.stdout.flush()  # nothing buffered here may come out again in the run
            sys.stderr.flush()
            self.forking = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                os.close(done_r)
                code = 70
                try:
                    code = self.child(session, req, tracked, import_time, index)
                except BaseException:  # noqa: BLE001 - the traceback goes to the run's log
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    code = code if isinstance(code, int) else 70
                    # Said before exiting: tearing down a big address space takes milliseconds
                    # that the run's answer need not wait for.
                    os.write(done_w, bytes([code & 0xFF]))
                    os._exit(code)
            os.close(done_w)
            own_group(pid)
            self.reply({"pid": pid})
            said = os.read(done_r, 1)  # the exit code, or b"" when the run died (a signal, a kill)
            os.close(done_r)
            if said:
                returncode = said[0]
                self._exited.append(pid)  # reaped before the next run
            else:
                _, status = os.waitpid(pid, 0)
                returncode = os.waitstatus_to_exitcode(status)
                frognano_confine.kill_descendants()
            self.reply({"pid": pid, "returncode": returncode})
            self._reap()

    def _reap(self) -> None:
        """Wait for the runs that said their code, and kill what they left behind."""
        for pid in self._exited:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self._exited.clear()
        frognano_confine.kill_descendants()

    # -- one run, in a forked child ------------------------------------------------------------
    def child(self, session, req: dict, tracked, import_time, index) -> int:  # noqa: ANN001
        marks = [time.perf_counter()]  # forked; then set up, swapped, output ready, tests ran
        os.setpgid(0, 0)
        frognano_confine.die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.close(self.requests.fd)
        os.close(self.replies)
        redirect(req["log"])
        apply_limits(req.get("limits", {}), self.mapped)
        with open(req["results"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(confinement_record()) + "\n")
        marks.append(time.perf_counter())
        try:
            swaps = frognano_swap.plan(tracked, sys.modules, import_time)
            items = _select(index, session.items, req.get("nodeids") or [])
        except frognano_swap.CannotSwap as exc:
            with open(req["results"], "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"kind": "fallback", "reason": str(exc)}) + "\n")
            return EXIT_FALLBACK
        frognano_swap.apply(swaps)
        marks.append(time.perf_counter())
        plugin = self.plugin
        output = _retarget(plugin, req)
        before = set(sys.modules)
        plugin.emit("collected", nodeids=[item.nodeid for item in items])
        plugin.emit("swapped", functions=len(swaps))
        output.start()
        output.begin_tests()
        marks.append(time.perf_counter())
        failed = session.testsfailed
        try:
            for i, item in enumerate(items):
                nextitem = items[i + 1] if i + 1 < len(items) else None
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
                if session.shouldstop or session.shouldfail:
                    break
        finally:
            output.close()
        marks.append(time.perf_counter())
        code = 1 if session.testsfailed > failed else 0
        # Where a run's time goes, for benchmarks/validation.py: fork, set-up (log, limits),
        # swap (read, plan, apply), output capture, the tests themselves.
        steps = zip(("fork", "setup", "swap", "output", "tests"), [self.forking, *marks], marks)
        plugin.emit("timing", **{name: round((end - start) * 1000, 3) for name, start, end in steps})
        plugin.emit("end", exitstatus=code, leaks=leaked(req, before), denied=[])
        return code


def _select(index: dict, items: list, wanted: list[str]) -> list:
    """The collected items ``wanted`` names (node ids, or files and classes: their items), in
    collection order; ``CannotSwap`` for a name the session did not collect (a new test)."""
    chosen: set[str] = set()
    for name in wanted:
        if name in index:
            chosen.add(name)
            continue
        base = name.rstrip("/")
        prefixes = (base + "::", base + "[") if "::" in base or base.endswith(".py") else (base + "/",)
        found = [n for n in index if n.startswith(prefixes)]
        if not found:
            raise frognano_swap.CannotSwap(f"{name} was not collected by the session")
        chosen.update(found)
    return [item for item in items if item.nodeid in chosen]


def _retarget(plugin, req: dict):  # noqa: ANN001, ANN202
    """The session's FrogNano plugin, writing this run's results file with this run's options."""
    from frognano_output import BoundedOutput

    output = BoundedOutput(limit=4 * int(req.get("max_output", 4000)))
    plugin.retarget(req["results"], timeout=req.get("timeout"), timeouts=req.get("timeouts"),
                    coverage=req.get("coverage") or False, stop_on_timeout=bool(req.get("stop_on_timeout")),
                    max_output=int(req.get("max_output", 4000)), output=output, stall=req.get("stall"))
    return output


def run(req: dict, requests: int, replies: int) -> int:
    """The session itself (in the fork server's child): collect, then serve until the requests
    pipe closes."""
    frognano_confine.become_subreaper()
    loop = SessionLoop(req, requests, replies)
    prepared = prepare_run(req)
    if prepared is None:
        loop.reply({"ready": False, "reason": "the session could not be confined"})
        return 78
    args, plugin, _output = prepared
    plugin.output = None  # the session's own output is its log; each run bounds its own
    loop.plugin = plugin
    # pytest's terminal reporter keeps the sys.stdout it finds: make that the log, on an fd of
    # its own, so that a run's reports never land in fd 1, which each run points at its tests'
    # bounded output.  (Prints at import time go there too, as in an ordinary run's log.)
    sys.stdout = open(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
    try:
        pytest.main(args, plugins=[plugin, loop])
    except SystemExit:  # a conftest that calls sys.exit
        loop.reply({"ready": False, "reason": "a conftest exited"})
    return 0


# -- the fork server's side ---------------------------------------------------------------------

class Gone(Exception):
    """FrogNano went away (the fork server's stdin ended): everything is killed."""


class Handle:
    """A running session, as the fork server holds it: its pid and both ends of its pipes."""

    def __init__(self, pid: int, requests: int, replies: int) -> None:
        self.pid = pid
        self.requests = requests
        self.replies = _Lines(replies)

    def send(self, req: dict) -> bool:
        try:
            os.write(self.requests, (json.dumps(req) + "\n").encode())
            return True
        except OSError:
            return False

    def receive(self, stdin) -> dict | None:  # noqa: ANN001 - frognano_worker._Stdin
        """The session's next reply; None when it died; ``Gone`` when FrogNano did."""
        import select

        while b"\n" not in self.replies.buffer:
            ready, _, _ = select.select([0, self.replies.fd], [], [])
            if 0 in ready and not stdin.fill():
                raise Gone
            if self.replies.fd in ready:
                chunk = os.read(self.replies.fd, 65536)
                if not chunk:
                    return None
                self.replies.buffer += chunk
        return self.replies.read()

    def close(self, kill: bool = False) -> None:
        """End the session: its requests pipe closes (it finishes), or it is killed."""
        for fd in (self.requests, self.replies.fd):
            try:
                os.close(fd)
            except OSError:
                pass
        if kill:
            for sig_target in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, signal.SIGKILL)):
                try:
                    sig_target()
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def start(req: dict, installed: list[str], exit_with) -> Handle:  # noqa: ANN001 - frognano_worker._exit_with
    """Fork the session (its own process group, dying with the server)."""
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(requests_w)
        os.close(replies_r)

        def body() -> int:
            os.setpgid(0, 0)
            frognano_confine.die_with_parent()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            redirect(req["log"])
            for name in installed:
                sys.modules.pop(name, None)
            return run(req, requests_r, replies_w)

        exit_with(body)
    os.close(requests_r)
    os.close(replies_w)
    own_group(pid)
    return Handle(pid, requests_w, replies_r)
