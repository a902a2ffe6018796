"""The engine's diagnosis on a real runner: which failing tests a fix answers for."""

from __future__ import annotations

from frognano.config import load_settings
from frognano.repair.engine import Engine
from frognano.sandbox.workspace import Workspace

from ..conftest import write_project


def test_a_test_that_fails_only_under_tracing_counts_as_passing(tmp_path):
    # test_quiet fails only while a tracer is installed (as click's pager tests lose a race to
    # a child process under the diagnosis' line tracing) and passes in any plain run: it counts
    # as passing, so it neither blocks the fix of inc nor puts probe's lines in the ranking, and
    # the fix must keep it passing.
    root = write_project(tmp_path / "proj", {
        "calc.py": """
            import sys


            def inc(x):
                return x + 2


            def probe():
                tracer = sys.gettrace()
                return tracer
        """,
        "tests/test_calc.py": """
            from calc import inc, probe

            def test_inc():
                assert inc(1) == 2

            def test_quiet():
                assert probe() is None
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        diagnosis = engine.diagnose()
        assert diagnosis.failing == ["tests/test_calc.py::test_inc"]
        assert diagnosis.run.tests["tests/test_calc.py::test_quiet"].coverage  # its traced lines still count
        assert {loc.line for loc in diagnosis.locations} == {5}, diagnosis.locations
        report = engine.fix(diagnosis=diagnosis)
    assert report.status == "fixed", report.message
    assert report.failing == ["tests/test_calc.py::test_inc"]
    assert report.fix.verified.pass_to_pass == 1  # test_quiet, kept passing and checked
    (note,) = [n for n in report.notes if "untraced" in n]
    assert note.startswith("tests/test_calc.py::test_quiet failed in the traced run but passes untraced")


def test_a_test_that_fails_only_under_tracing_alone_leaves_nothing_to_fix(tmp_path):
    root = write_project(tmp_path / "proj", {
        "calc.py": "import sys\n\n\ndef probe():\n    return sys.gettrace()\n",
        "tests/test_calc.py": "from calc import probe\n\ndef test_quiet():\n    assert probe() is None\n",
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        assert engine.diagnose().failing == []
        assert engine.fix().status == "passing"


def test_a_test_whose_id_changes_every_run_still_confirms_the_fix(tmp_path):
    # marshmallow parametrizes a test by datetime.now(): its id differs in every collection, so
    # pytest refused the baseline's id ("not found", exit 4) and ran nothing, and the confirmation
    # of every fix failed, the developers' own included.  The test now stands for its function's
    # new parametrizations, which must all pass: a fix that breaks them is still refused.
    root = write_project(tmp_path / "proj", {
        "calc.py": """
            def inc(x):
                return x + 2


            def double(x):
                return inc(x) + inc(x) - 2
        """,
        "tests/test_calc.py": """
            import time

            import pytest

            from calc import double, inc

            def test_inc():
                assert inc(1) == 2

            @pytest.mark.parametrize("stamp", [str(time.time_ns()), "fixed"])
            def test_double(stamp):
                assert double(3) >= 6
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        diagnosis = engine.diagnose()
        assert diagnosis.failing == ["tests/test_calc.py::test_inc"]
        report = engine.fix(diagnosis=diagnosis)
    assert report.status == "fixed", report.message
    assert "+    return x + 1" in report.fix.patch.diff()
    assert report.fix.verified.pass_to_pass == 2  # with the time-stamped parametrization, under its new id


def test_a_failure_that_runs_no_project_line_says_there_was_no_edit_to_try(tmp_path):
    # more-itertools' history: a test of a function the fixing commit adds fails inside the test
    # itself; the report said "none of the 0 single edits and 0 pairs of edits tried passed".
    root = write_project(tmp_path / "proj", {
        "calc.py": "def inc(x):\n    return x + 1\n",
        "tests/test_calc.py": """
            import calc

            def test_inc():
                assert calc.inc(1) == 2

            def test_dec():
                assert calc.dec(2) == 1
        """,
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        report = engine.fix()
    assert report.status == "unfixed"
    assert report.message.startswith("no verified fix: no edit to try: the failing tests ran no line of the "
                                     "project's own code"), report.message
