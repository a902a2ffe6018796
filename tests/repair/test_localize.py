"""Localisation on hand-made spectra and on the bundled examples."""

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.repair.localize import StatementMap, localize
from frognano.sandbox.results import Frame, RunResult, TestResult
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace

SOURCE = """\
def f(x):
    y = x + 1
    if y > 3:
        return y
    return 0


def g(a,
      b):
    return a - b
"""


def _run(results):
    run = RunResult()
    for nodeid, outcome, cov, frames, last in results:
        run.tests[nodeid] = TestResult(nodeid, outcome, coverage=cov, frames=frames, last=last)
    return run


def test_ochiai_ranks_lines_only_failing_tests_run_first():
    run = _run([
        ("t::a", "failed", {"m.py": [2, 3, 4]}, [], ("m.py", 4)),
        ("t::b", "passed", {"m.py": [2, 3, 5]}, [], None),
        ("t::c", "passed", {"m.py": [2, 3, 5]}, [], None),
    ])
    locs = localize(run, CoverageMap.from_run(run), lambda p: SOURCE)
    assert [(loc.line, round(loc.score, 3)) for loc in locs] == [(4, 1.0), (2, 0.577), (3, 0.577)]
    assert locs[0].function == "f" and locs[0].last == 1


def test_ties_are_broken_by_frames_then_last_line():
    run = _run([
        ("t::a", "failed", {"m.py": [2, 3, 4]}, [Frame("m.py", 3, "f"), Frame("tests/t.py", 9, "a")], ("m.py", 4)),
    ])
    locs = localize(run, CoverageMap.from_run(run), lambda p: SOURCE)
    assert [loc.line for loc in locs] == [3, 4, 2]  # all score 1.0: frame, then last line


def test_statements_are_the_unit():
    smap = StatementMap(SOURCE)
    assert (smap.statement(3).line, smap.statement(3).end_line) == (3, 3)  # if header only
    assert (smap.statement(9).line, smap.statement(9).end_line) == (8, 9)  # a def spanning lines
    assert smap.statement(10).function == "g"
    assert list(smap.function_span("g")) == [8, 9, 10]
    run = _run([("t::a", "failed", {"m.py": [10]}, [], None), ("t::b", "failed", {"m.py": [10]}, [], None)])
    (loc,) = localize(run, CoverageMap.from_run(run), lambda p: SOURCE)
    assert loc.path == "m.py" and loc.line == 10 and loc.score == 1.0


def test_test_files_are_never_ranked():
    run = _run([("t::a", "failed", {"tests/test_m.py": [1, 2], "conftest.py": [3]}, [Frame("tests/test_m.py", 2, "a")], None)])
    assert localize(run, CoverageMap.from_run(run), lambda p: "x = 1\ny = 2\nz = 3\n") == []


def test_frames_of_code_compiled_from_text_are_not_locations():
    """A frame in "<string>" (exec'd code, a namedtuple's methods) or "<frozen ...>" names no file:
    it is never ranked, so the search never tries to read a file of that name."""
    run = _run([("t::a", "failed", {"m.py": [2]}, [Frame("<string>", 1, "<module>"), Frame("m.py", 2, "f")],
                 ("<frozen importlib._bootstrap>", 241))])
    locs = localize(run, CoverageMap.from_run(run), lambda p: SOURCE if p == "m.py" else None)
    assert [(loc.path, loc.line) for loc in locs] == [("m.py", 2)]


@pytest.mark.parametrize("name, path, line, top", [
    ("calc", "calc/stats.py", 15, 1),
    ("inventory", "inventory/ledger.py", None, 5),
    ("shapes", "src/shapes/geometry.py", None, 3),
])
def test_bug_is_among_the_top_locations_of_each_example(example, name, path, line, top):
    project = example(name)
    readme = (project / "README.md").read_text() if (project / "README.md").exists() else ""
    with Workspace(project) as ws, Engine(ws, Settings()) as engine:
        diagnosis = engine.diagnose()
    ranked = [(loc.path, loc.line) for loc in diagnosis.locations[:top]]
    assert any(p == path for p, _ in ranked), (ranked, readme)
    if line is not None:
        assert (path, line) in ranked
