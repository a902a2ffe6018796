"""A failing test that hangs: diagnosed in seconds, candidates bounded by the suite's speed,
the fix that cures the loop offered like any other, and ``--timeout`` honoured throughout."""

import json
import subprocess
import sys

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.repair.patch import FileEdit, Patch
from frognano.repair.verify import CONFIRM_FLOOR, candidate_timeouts, hang_bound
from frognano.sandbox.results import RunResult, TestResult
from frognano.sandbox.workspace import Workspace

HANGING = {
    "pyproject.toml": """
        [project]
        name = "hanging"
        version = "0.1"
    """,
    "pkg/__init__.py": "",
    "pkg/stats.py": """
        def running_total(values):
            \"\"\"Prefix sums of values.\"\"\"
            out = []
            total = 0
            i = 0
            n = len(values)
            while i < n:
                total += values[i]
                out.append(total)
            return out


        def mean(values):
            if not values:
                raise ValueError("empty")
            return sum(values) / len(values)
    """,
    "tests/test_stats.py": """
        import pytest
        from pkg.stats import mean, running_total

        def test_mean():
            assert mean([1, 2, 3]) == 2

        def test_mean_empty():
            with pytest.raises(ValueError):
                mean([])

        def test_running_total():
            assert running_total([1, 2, 3]) == [1, 3, 6]

        def test_running_total_empty():
            assert running_total([]) == []
    """,
}
HUNG = "tests/test_stats.py::test_running_total"


def result(nodeid, outcome, duration):
    return TestResult(nodeid, outcome, duration=duration)


def test_a_test_that_hung_is_bounded_by_the_tests_that_passed():
    baseline = RunResult(tests={
        "a": result("a", "passed", 0.01), "b": result("b", "passed", 0.2),
        "c": result("c", "failed", 3.0), "hung": result("hung", "timeout", 30.0),
    })
    assert hang_bound(baseline, 30.0, 10.0) == pytest.approx(2.25)  # 10 x 0.2 + 0.25
    timeouts = candidate_timeouts(baseline, 30.0, 10.0)
    assert timeouts["hung"] == pytest.approx(2.25)
    assert timeouts["a"] == 0.5 and timeouts["c"] == 30.0  # their own durations: the floor, 10 x 3 s
    assert timeouts["b"] == pytest.approx(2.25)  # 10 x 0.2 + 0.25
    # A confirmation (once per fix, in a fresh interpreter) keeps a roomier floor.
    assert candidate_timeouts(baseline, 30.0, 10.0, CONFIRM_FLOOR)["a"] == 2.0
    # The user's timeout stays the ceiling; a fast suite gets the floor, not 10 x 30 s.
    assert hang_bound(baseline, 1.5, 10.0) == 1.5
    fast = RunResult(tests={"a": result("a", "passed", 0.001), "hung": result("hung", "timeout", 30.0)})
    assert hang_bound(fast, 30.0, 10.0) == pytest.approx(0.5)
    # The bound comes from the hung test's neighbours (its class, else its module), not from
    # the suite's slowest test.
    grouped = RunResult(tests={
        "t.py::Slow::test_fft": result("t.py::Slow::test_fft", "passed", 1.4),
        "t.py::Pad::test_basic": result("t.py::Pad::test_basic", "passed", 0.004),
        "t.py::Pad::test_loop": result("t.py::Pad::test_loop", "timeout", 5.0),
        "u.py::test_alone": result("u.py::test_alone", "timeout", 5.0),
        "u.py::test_quick": result("u.py::test_quick", "passed", 0.02),
    })
    assert hang_bound(grouped, 30.0, 10.0, "t.py::Pad::test_loop") == pytest.approx(0.5)
    assert hang_bound(grouped, 30.0, 10.0, "u.py::test_alone") == pytest.approx(0.5)  # 10 x 0.02 + 0.25 < floor
    assert hang_bound(grouped, 30.0, 10.0) == pytest.approx(14.25)  # the suite: 10 x 1.4 + 0.25
    # Nothing finished: nothing to learn from.
    alone = RunResult(tests={"hung": result("hung", "timeout", 30.0)})
    assert hang_bound(alone, 30.0, 10.0) == 2.0


@pytest.mark.slow
def test_the_diagnosis_stops_the_loop_early_and_candidates_get_the_bound(make_project):
    with Workspace(make_project(HANGING)) as ws, Engine(ws, Settings(lanes=1)) as engine:
        diagnosis = engine.diagnose()
        hung = diagnosis.run.tests[HUNG]
        assert diagnosis.failing == [HUNG] and hung.outcome == "timeout"
        assert "without reaching a line it had not run before" in hung.message  # not the 30 s timeout
        assert diagnosis.locations[0].path == "pkg/stats.py"
        assert {loc.line for loc in diagnosis.locations[:3]} & {7, 8, 9}  # the loop is ranked first
        verifier = engine.verifier(diagnosis)
        bound = hang_bound(diagnosis.run, 30.0, 10.0, HUNG)
        assert verifier.timeouts[HUNG] == bound <= 1.0
        # A candidate that leaves the loop alone is stopped at the bound, not at 30 s.
        source = ws.read("pkg/stats.py")
        idle = Patch((FileEdit("pkg/stats.py", source, source.replace("Prefix sums", "Running sums")),))
        with ws.edited(idle.texts()):
            run = engine.runner.run([HUNG], timeouts=verifier.timeouts)
        assert run.tests[HUNG].outcome == "timeout"
        assert run.tests[HUNG].message == f"Timeout: the test ran longer than {bound:g} s"
        left = verifier.check(idle)
        assert left.still_failing == [HUNG]
        # Still hanging is no change, though the message names another limit: the pair
        # search leaves such an edit out.
        assert left.changed == [] and not left.worse
        # The cure turns the hang into a pass, and that counts as fixing the test.
        cure = Patch((FileEdit("pkg/stats.py", source,
                               source.replace("out.append(total)\n", "out.append(total)\n        i += 1\n")),))
        assert verifier.check(cure).verified
        verification = verifier.confirm(cure)
        assert verification is not None and verification.fail_to_pass == [HUNG]
        assert verification.pass_to_pass == 3


@pytest.mark.slow
def test_timeout_is_honoured_by_the_diagnosis_and_the_candidates(make_project):
    with Workspace(make_project(HANGING)) as ws, Engine(ws, Settings(timeout=3.0)) as engine:
        report = engine.fix()
        assert report.diagnosis.run.tests[HUNG].message == "Timeout: the test ran longer than 3 s"
        verifier = engine.verifier(report.diagnosis)
        assert max(verifier.timeouts.values()) <= 3.0 and verifier.timeouts[HUNG] <= 1.0
    assert report.status == "fixed", report.message
    assert report.fix.verified.fail_to_pass == [HUNG]


@pytest.mark.slow
def test_the_hanging_project_is_fixed_and_the_fix_offered_by_the_cli(make_project):
    project = make_project(HANGING)
    done = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--json"],
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    assert report["status"] == "fixed"
    assert report["failures"][0]["outcome"] == "timeout"
    assert report["fix"]["verified"]["fail_to_pass"] == [HUNG]
    assert "+        i += 1" in report["fix"]["diff"]
    assert "i += 1" not in (project / "pkg/stats.py").read_text()  # offered, not applied


def test_a_fix_validated_as_the_search_budget_runs_out_is_offered(make_project):
    # Validating a candidate can outlast the budget (one whose test hangs takes seconds): the
    # first candidate here is the fix, and its verdict arrives after the budget is spent.
    project = make_project({
        "age.py": """
            def is_minor(age):
                return age > 18
        """,
        "tests/test_age.py": """
            from age import is_minor

            def test_child():
                assert is_minor(17)

            def test_adult():
                assert not is_minor(30)
        """,
    })
    with Workspace(project) as ws, Engine(ws, Settings(search_seconds=0.001, lanes=1)) as engine:
        report = engine.fix()
    assert report.status == "fixed", report.message
    # Only verified candidates count past the budget (`<` and `<=` both fix it; `>=` does not).
    assert report.search.stopped is None and report.search.tried <= 2
    assert report.fix.notes[0].description in ("`>` -> `<`", "`>` -> `<=`")


SLOW_UNDER_TRACING = {
    "pkg/__init__.py": "",
    "pkg/mix.py": """
        def checksum(n):
            total = 0
            for i in range(n):
                total = (total * 31 + i) % 1000003
            return total


        def clamp(x, lo, hi):
            return max(lo, min(x, lo))
    """,
    "tests/test_mix.py": """
        from pkg.mix import checksum, clamp

        def test_checksum_of_many():
            assert 0 <= checksum(2_000_000) < 1000003

        def test_clamp():
            assert clamp(5, 0, 10) == 5
    """,
}


def test_a_slow_test_that_stalls_only_under_tracing_counts_as_passing(make_project):
    """Line tracing slows a CPU-bound loop several times: stopped as stalled in the diagnosis,
    the test runs once more untraced, passes, and is not part of what the fix must repair."""
    with Workspace(make_project(SLOW_UNDER_TRACING)) as ws, \
            Engine(ws, Settings(lanes=1, stall_timeout=0.3)) as engine:
        diagnosis = engine.diagnose()
    slow = diagnosis.run.tests["tests/test_mix.py::test_checksum_of_many"]
    assert slow.passed, slow.message
    assert slow.coverage  # the lines it ran traced still count for localisation
    assert diagnosis.failing == ["tests/test_mix.py::test_clamp"]
