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
