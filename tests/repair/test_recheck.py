"""The untraced recheck of a test the traced diagnosis stopped runs on a lane while that run
goes on: a slow test gets the time the rest of the run takes anyway, an endless loop still
costs no more than its bound once the run is over."""

import time

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.sandbox.workspace import Workspace

from .test_hangs import SLOW_UNDER_TRACING

# ``test_slow`` stands for a test that waits on threads (more-itertools' ``TestSerialize``):
# under line tracing it keeps the CPU busy on lines it has run before, so the stall check stops
# it (stall_timeout 0.3: after a second or two, the check's own pace); untraced it takes 3.5 s,
# more than the serial recheck's bound (1.25 times what it ran traced).  The three tests after
# it sleep (not a stall) for 7.5 s in all: the time its lane rerun has to finish in.
SLOW_THEN_SLEEPY = {
    # test_hangs' package: a CPU-bound ``checksum`` and a buggy ``clamp``.
    "pkg/__init__.py": "",
    "pkg/mix.py": SLOW_UNDER_TRACING["pkg/mix.py"],
    "tests/test_a_slow.py": """
        import sys
        import time

        from pkg.mix import checksum

        def test_slow():
            if sys.gettrace() is not None:  # the diagnosis' traced run: looks stalled
                while True:
                    checksum(1000)
            time.sleep(3.5)
    """,
    "tests/test_b_sleepy.py": """
        import time

        import pytest

        from pkg.mix import clamp

        @pytest.mark.parametrize("i", range(3))
        def test_wait(i):
            time.sleep(2.5)

        def test_clamp():
            assert clamp(5, 0, 10) == 5
    """,
}

LOOP_THEN_SLEEPY = {
    **SLOW_THEN_SLEEPY,
    "tests/test_a_slow.py": """
        from pkg.mix import checksum

        def test_slow():
            while True:
                checksum(1000)
    """,
}

SLOW = "tests/test_a_slow.py::test_slow"


def _diagnose(root, lanes):
    settings = Settings(lanes=lanes, stall_timeout=0.3, timeout=20)
    with Workspace(root) as ws, Engine(ws, settings) as engine:
        started = time.monotonic()
        diagnosis = engine.diagnose()
        return diagnosis, time.monotonic() - started, len(engine._lanes)


@pytest.mark.slow
@pytest.mark.parametrize("lanes", [2, 1])
def test_a_slow_test_is_rechecked_while_the_traced_run_goes_on(make_project, lanes):
    """With a second lane the stopped test reruns during the sleeps and passes; one at a time,
    after the run, it has only its bound and counts as failing, as before."""
    diagnosis, _, opened = _diagnose(make_project(SLOW_THEN_SLEEPY), lanes)
    slow = diagnosis.run.tests[SLOW]
    if lanes == 2:
        assert opened == 1  # the recheck's lane, kept for the search
        assert slow.passed, slow.message
        assert slow.coverage  # the lines it ran traced still count for localisation
        assert diagnosis.failing == ["tests/test_b_sleepy.py::test_clamp"]
    else:
        assert opened == 0
        assert slow.outcome == "timeout"
        assert sorted(diagnosis.failing) == [SLOW, "tests/test_b_sleepy.py::test_clamp"]


@pytest.mark.slow
def test_an_endless_loop_is_bounded_once_the_traced_run_is_over(make_project):
    """The lane rerun of a loop may take the test timeout (20 s) only while the traced run goes
    on (7.5 s of sleeps); then it is held to its bound from its own start, and killed."""
    diagnosis, seconds, _ = _diagnose(make_project(LOOP_THEN_SLEEPY), 2)
    assert diagnosis.run.tests[SLOW].outcome == "timeout"
    assert SLOW in diagnosis.failing
    assert seconds < 20  # not the test timeout: the bound, long past when the run ended
