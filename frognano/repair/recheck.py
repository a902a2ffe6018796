"""The untraced second look at tests a traced diagnosis run stopped, started while it goes on.

Line tracing slows a CPU-bound test several times, and a test that waits on threads under
tracing can look stalled, so a test the diagnosis stopped (the stall check, or its timeout)
runs once more untraced before it counts as failing (``Engine._recheck_untraced``).  On a real
suite those reruns were a second, serial phase after the traced run: on more-itertools (701
tests, 2 CPUs) 46 s after an 83 s traced run, while the second CPU sat idle through both.

``Rechecks`` runs them on a second shadow copy (one of the engine's lanes) as soon as the traced
run reports each one, so they overlap the rest of that run.  While the traced run goes on, a
rerun may take the whole test timeout: it costs no wall-clock time then, and a slow thread test
(more-itertools' ``TestSerialize::test_concurrent_calls``: 12 s untraced, stopped at 8.6 s
traced) gets to finish.  Once the traced run is over, a rerun still going is held to the serial
recheck's bound (``bound``: a multiple of its traced seconds, from its own start), so an endless
loop costs no more than it did; reruns not yet started go back to the caller, who runs them on
its own runner at the same time.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence

from ..sandbox.results import TestResult
from ..sandbox.runner import TestRunner

log = logging.getLogger(__name__)


class Rechecks:
    """Untraced reruns of stopped tests on a lane of their own, fed while the traced run goes on.

    ``open_lane`` gives the runner of a second shadow copy holding what the traced run tests
    (called once, in the rechecks' thread, at the first stopped test; an exception there leaves
    every rerun to the caller).  ``bound(traced_seconds)``: how long a rerun may take once the
    traced run is over.  ``submit`` is ``TestRunner.run``'s ``on_result``; ``finish`` ends it.
    """

    def __init__(self, open_lane: Callable[[], TestRunner], *, args: Sequence[str], timeout: float,
                 bound: Callable[[float], float]) -> None:
        self._open_lane = open_lane
        self._args = list(args)
        self._timeout = timeout
        self._bound = bound
        self._lock = threading.Condition()
        self._queue: collections.deque[tuple[str, float]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._done = False  # the traced run is over: no more submissions, reruns are bounded
        self._aborted = False
        # The rerun in flight: its test, start, bound and the event that kills it.
        self._current: tuple[str, float, float, threading.Event] | None = None
        self._timers: list[threading.Timer] = []
        self.results: dict[str, TestResult] = {}  # reruns that finished: their untraced result
        self.started: set[str] = set()  # tests whose rerun began here, finished or not

    def submit(self, result: TestResult) -> None:
        """A result of the traced run: a stopped test (a timeout) is queued for its rerun."""
        if result.outcome != "timeout":
            return
        with self._lock:
            if self._done:
                return
            self._queue.append((result.nodeid, result.duration))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="frognano-recheck", daemon=True)
                self._thread.start()
            self._lock.notify()

    def finish(self) -> list[str]:
        """The traced run is over: bound the rerun in flight, and hand back the queued tests that
        have not started (the caller reruns those, and any it never submitted, itself).  Call
        ``wait`` after the caller's own reruns."""
        with self._lock:
            self._done = True
            left = [n for n, _ in self._queue]
            self._queue.clear()
            if self._current is not None:
                _, started, bound, kill = self._current
                self._arm(kill, started + bound - time.monotonic())
            self._lock.notify()
        return left

    def wait(self) -> dict[str, TestResult]:
        """Wait for the rerun in flight (now bounded); the untraced results, by test."""
        if self._thread is not None:
            self._thread.join()
        for timer in self._timers:
            timer.cancel()
        return self.results

    def abort(self) -> None:
        """The diagnosis was cancelled: kill the rerun in flight, start no other."""
        with self._lock:
            self._done = self._aborted = True
            self._queue.clear()
            if self._current is not None:
                self._current[3].set()
            self._lock.notify()
        self.wait()

    # -- the rechecks' thread --------------------------------------------------------------
    def _arm(self, kill: threading.Event, seconds: float) -> None:
        if seconds <= 0:
            kill.set()
            return
        timer = threading.Timer(seconds, kill.set)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _work(self) -> None:
        try:
            lane = self._open_lane()
        except Exception as exc:  # noqa: BLE001 - no second shadow: the caller reruns them all
            log.info("rechecking stopped tests after the run instead: %s", exc)
            with self._lock:
                self._queue.clear()
            return
        while True:
            with self._lock:
                while not self._queue and not self._done:
                    self._lock.wait()
                if not self._queue:
                    return
                nodeid, traced = self._queue.popleft()
                kill = threading.Event()
                self._current = (nodeid, time.monotonic(), self._bound(traced), kill)
                self.started.add(nodeid)
            try:
                again = lane.run([nodeid], args=self._args, timeouts={nodeid: self._timeout}, cancel=kill)
            except Exception as exc:  # noqa: BLE001 - a lost lane: the test keeps its traced verdict
                log.info("untraced recheck of %s failed to run: %s", nodeid, exc)
                again = None
            with self._lock:
                self._current = None
                if self._aborted:
                    return
            t = again.tests.get(nodeid) if again is not None else None
            if t is not None:
                self.results[nodeid] = t
