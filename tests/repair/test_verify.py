"""How a verification reads a run whose parametrized test ids changed since the baseline."""

from __future__ import annotations

from frognano.repair.verify import _stand_in
from frognano.sandbox.results import RunResult, TestResult

OLD = "tests/test_t.py::test_when[03:48:40]"


def _run(**outcomes: str) -> RunResult:
    run = RunResult()
    for nodeid, outcome in outcomes.items():
        run.tests[nodeid] = TestResult(nodeid, outcome, message="" if outcome == "passed" else "AssertionError: no")
    return run


def test_a_lost_id_takes_the_verdict_of_its_functions_new_ids():
    run = _run(**{"tests/test_t.py::test_when[03:49:12]": "passed", "tests/test_t.py::test_other": "passed"})
    assert _stand_in(run, [OLD, "tests/test_t.py::test_other"]) == [OLD]
    assert run.tests[OLD].passed


def test_one_failing_new_id_fails_every_lost_id_it_stands_for():
    run = _run(**{"tests/test_t.py::test_when[03:49:12]": "passed", "tests/test_t.py::test_when[x]": "failed"})
    assert _stand_in(run, [OLD]) == [OLD]
    assert not run.tests[OLD].passed and run.tests[OLD].nodeid == OLD


def test_fewer_new_ids_than_lost_ones_leave_them_unrun():
    run = _run(**{"tests/test_t.py::test_when[03:49:12]": "passed"})
    assert _stand_in(run, [OLD, "tests/test_t.py::test_when[03:48:41]"]) == []
    assert OLD not in run.tests


def test_a_new_id_already_wanted_stands_for_nothing_else():
    # test_when[b] is wanted under its own id: it cannot also stand in for the lost one.
    run = _run(**{"tests/test_t.py::test_when[b]": "passed"})
    assert _stand_in(run, [OLD, "tests/test_t.py::test_when[b]"]) == []
