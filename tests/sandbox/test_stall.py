"""Stall detection in a diagnosis run: an endless loop is stopped long before the timeout,
with the lines it ran; a test that waits, or keeps reaching new lines, is left alone."""

import pytest

from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.workspace import Workspace

LOOPING = {
    "pkg/__init__.py": "",
    "pkg/stats.py": """
        import time


        def running_total(values):
            out, total, i = [], 0, 0
            while i < len(values):
                total += values[i]
                out.append(total)
            return out


        def countdown(seconds):
            # a long wait, not a loop: the test sleeps in C and runs no line at all
            time.sleep(seconds)
            return "done"


        def busy(seconds):
            # a busy test that reaches a new line every few hundredths of a second
            ns, start, n, fresh = {}, time.monotonic(), 0, 100
            while time.monotonic() - start < seconds:
                n += 1
                if n % 5000 == 0:  # code compiled as this file's line ``fresh``: a new line
                    fresh += 1
                    exec(compile("\\n" * fresh + "x = 1", __file__, "exec"), ns)
            return n
    """,
    "tests/test_stats.py": """
        from pkg.stats import busy, countdown, running_total

        def test_empty():
            assert running_total([]) == []

        def test_running_total():
            assert running_total([1, 2]) == [1, 3]

        def test_running_total_again():
            assert running_total([3]) == [3]

        def test_countdown():
            assert countdown(1.5) == "done"

        def test_busy():
            assert busy(1.5) > 0
    """,
}
PREFIX = "tests/test_stats.py::"


@pytest.fixture
def run(make_project):
    with Workspace(make_project(LOOPING)) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=30.0)) as runner:
            yield lambda **kw: runner.run(coverage=True, **kw)


def test_an_endless_loop_is_stopped_at_the_stall_bound_with_its_lines(run):
    result = run(stall=(0.5, 10.0))
    looped = result.tests[PREFIX + "test_running_total"]
    assert looped.outcome == "timeout"
    assert "without reaching a line it had not run before" in looped.message
    assert "30 s timeout" in looped.message
    assert looped.duration < 15  # the 30 s timeout did not stop it
    # Localisation needs the loop's lines from the test that was stopped.
    assert {5, 6, 7, 8} <= set(looped.coverage["pkg/stats.py"])
    assert 9 not in looped.coverage["pkg/stats.py"]
    assert looped.last in {("pkg/stats.py", n) for n in (6, 7, 8)}
    # Waiting in C (a sleep) is not looping, and a test that still reaches new lines is not
    # stalled: both run to the end.
    assert result.tests[PREFIX + "test_countdown"].outcome == "passed"
    assert result.tests[PREFIX + "test_busy"].outcome == "passed"
    assert result.tests[PREFIX + "test_empty"].outcome == "passed"
    # Once one test of the run stalled, the next one caught in a loop costs a fifth of the wait.
    again = result.tests[PREFIX + "test_running_total_again"]
    assert again.outcome == "timeout" and _stalled(again) < 0.5 <= _stalled(looped)


def _stalled(test) -> float:
    """How long ``test`` ran without a new line, from its timeout message."""
    return float(test.message.split("ran ")[1].split(" s")[0])


@pytest.mark.slow
def test_the_bound_grows_with_the_slowest_test_that_passed_before(run):
    # In reverse order two tests of 1.5 s pass before the loop: its bound is 4 x 1.5 s, not 0.5 s.
    result = run(nodeids=[PREFIX + n for n in ("test_empty", "test_running_total", "test_countdown", "test_busy")],
                 stall=(0.5, 4.0), reverse=True)
    looped = result.tests[PREFIX + "test_running_total"]
    assert looped.outcome == "timeout"
    assert 5.9 <= _stalled(looped) < 30


def test_without_stall_only_the_timeout_stops_a_loop(make_project):
    with Workspace(make_project(LOOPING)) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=2.0)) as runner:
            result = runner.run([PREFIX + "test_running_total"], coverage=True)
    looped = result.tests[PREFIX + "test_running_total"]
    assert looped.outcome == "timeout"
    assert looped.message == "Timeout: the test ran longer than 2 s"


SPINNING = {
    "pkg/__init__.py": "",
    "pkg/spin.py": """
        import itertools

        def spin():
            ones = itertools.repeat(1)
            return sum(ones)  # an endless loop in C: no signal handler runs until it returns
    """,
    "tests/test_spin.py": """
        from pkg.spin import spin

        def test_spin():
            spin()

        def test_after():
            pass
    """,
}


@pytest.mark.parametrize("stall", [(0.0, 10.0), None])
def test_a_test_killed_before_it_reports_keeps_the_lines_it_ran(make_project, stall):
    # The in-process alarm cannot stop it: the watchdog kills the run, and the test never
    # reports its coverage.  A diagnosis run (``stall`` given, even with detection off) has
    # recorded each new line as it ran, so localisation still sees the loop.
    with Workspace(make_project(SPINNING)) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=1.0)) as runner:
            result = runner.run(coverage=True, stall=stall)
    spun = result.tests["tests/test_spin.py::test_spin"]
    assert spun.outcome == "timeout" and "killed" in spun.message
    assert result.tests["tests/test_spin.py::test_after"].outcome == "passed"
    if stall is None:
        assert spun.coverage is None and spun.last is None
    else:
        assert spun.coverage == {"pkg/spin.py": [4, 5], "tests/test_spin.py": [4]}
        assert spun.last == ("pkg/spin.py", 5)


def test_a_slow_test_before_a_loop_never_turns_the_stall_check_off(make_project):
    # In reverse order a 1.5 s test passes before the loop: 10 x 1.5 s is past the 4 s timeout,
    # which had switched the stall check off (more-itertools: a thread test 18.7 s under
    # tracing, and the prime sieve after it traced to its timeout).  The bound stops at half
    # the limit.
    with Workspace(make_project(LOOPING)) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=4.0)) as runner:
            result = runner.run([PREFIX + n for n in ("test_running_total", "test_countdown")],
                                coverage=True, stall=(0.5, 10.0), reverse=True)
    assert result.tests[PREFIX + "test_countdown"].outcome == "passed"
    looped = result.tests[PREFIX + "test_running_total"]
    assert looped.outcome == "timeout"
    assert "without reaching a line it had not run before" in looped.message, looped.message
    assert 2.0 <= _stalled(looped) < 3.0
