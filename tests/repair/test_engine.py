"""The engine's diagnosis on a real runner: which failing tests a fix answers for."""

from __future__ import annotations

from frognano.config import load_settings
from frognano.repair.engine import Engine
from frognano.sandbox.workspace import Workspace

from ..conftest import write_project


def test_a_test_that_fails_only_under_tracing_is_left_out_of_the_fix_and_the_ranking(tmp_path):
    # test_quiet fails only while a tracer is installed (as click's pager tests lose a race to
    # a child process under the diagnosis' line tracing) and passes in any plain run: no edit
    # is its fix, so it must neither block the fix of inc nor put probe's lines in the ranking.
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
        assert set(diagnosis.failing) == {"tests/test_calc.py::test_inc", "tests/test_calc.py::test_quiet"}
        assert engine.trace_only == {"tests/test_calc.py::test_quiet"}
        assert {loc.line for loc in diagnosis.locations} == {5}, diagnosis.locations
        report = engine.fix(diagnosis=diagnosis)
    assert report.status == "fixed", report.message
    assert report.failing == ["tests/test_calc.py::test_inc"]
    (note,) = [n for n in report.notes if "untraced" in n]
    assert note.startswith("tests/test_calc.py::test_quiet failed in the traced run but passes untraced")


def test_a_real_failure_alone_is_never_left_out(tmp_path):
    # Only a tracing-sensitive test fails: the diagnosis stays whole (nothing else to fix).
    root = write_project(tmp_path / "proj", {
        "calc.py": "import sys\n\n\ndef probe():\n    return sys.gettrace()\n",
        "tests/test_calc.py": "from calc import probe\n\ndef test_quiet():\n    assert probe() is None\n",
    })
    with Workspace(root) as ws, Engine(ws, load_settings(root, environ={})) as engine:
        diagnosis = engine.diagnose()
        assert engine.trace_only == {"tests/test_calc.py::test_quiet"}
        assert engine.without_refused(diagnosis.run) is diagnosis.run
        assert [loc.line for loc in diagnosis.locations][:1] == [5]
