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
    # Line 3 decides the branch only the failing test takes (line 4): it ranks with line 4,
    # after it only for the last-line evidence, and before line 2.
    assert [(loc.line, round(loc.score, 3)) for loc in locs] == [(4, 1.0), (3, 0.577), (2, 0.577)]
    assert locs[0].function == "f" and locs[0].last == 1
    assert locs[1].condition and locs[1].branch == 1.0 and "decides a branch of score 1.00" in locs[1].describe()


def test_ties_are_broken_by_frames_then_last_line():
    run = _run([
        ("t::a", "failed", {"m.py": [2, 3, 4]}, [Frame("m.py", 3, "f"), Frame("tests/t.py", 9, "a")], ("m.py", 4)),
    ])
    locs = localize(run, CoverageMap.from_run(run), lambda p: SOURCE)
    assert [loc.line for loc in locs] == [3, 4, 2]  # all score 1.0: frame, then last line


GUARDED = """\
def nth(pool, r, index):
    n = len(pool)
    if r < 0 or r > n:
        raise ValueError
    c = n * r
    result = [c]
    return result
"""


def test_a_raise_credits_the_if_that_let_it_run_and_the_traceback_outweighs_a_small_score_gap():
    # The failing test's last call raised at line 4; its earlier calls reached lines 5-7, which
    # fewer passing tests run than the guard at line 3 (so by the spectrum alone they rank first).
    frames = [Frame("tests/t.py", 9, "test_nth"), Frame("m.py", 4, "nth")]
    run = _run([
        ("t::a", "failed", {"m.py": [2, 3, 4, 5, 6, 7]}, frames, ("m.py", 4)),
        ("t::b", "passed", {"m.py": [2, 3, 4]}, [], None),
        ("t::c", "passed", {"m.py": [2, 3, 4]}, [], None),
        ("t::d", "passed", {"m.py": [2, 3, 5, 6, 7]}, [], None),
        ("t::e", "passed", {"m.py": [2, 3, 5, 6, 7]}, [], None),
    ])
    locs = localize(run, CoverageMap.from_run(run), lambda p: GUARDED)
    # The guard, which decides the raise (its branch) and shares its traceback evidence, then the
    # raise, then the rest.
    assert [loc.line for loc in locs][:3] == [3, 4, 5]
    guard = next(loc for loc in locs if loc.line == 3)
    assert (guard.guard_frames, guard.guard_last) == (1, 1) and guard.score < locs[2].score
    # Its own lines are not in the traceback, and the editor says so.
    assert (guard.frames, guard.last) == (0, 0) and "guards the raise" in guard.describe()
    assert "traceback frame" not in guard.describe()
    assert StatementMap(GUARDED).guard(4) == 3 and StatementMap(GUARDED).guard(5) is None


WRONG_CONDITION = """\
def tier(points):
    label = "basic"
    if points > 100:
        label = "gold"
    total = points * 2
    return label, total
"""


def test_a_condition_ranks_with_the_branch_it_wrongly_takes():
    # The bug is the condition (>= 100 was meant): only the failing test takes its branch, so
    # line 4 alone scores 1.0 by the spectrum, and the condition, which every test runs, scores
    # as low as the lines around it; credited with its branch, it ties with that branch and, a
    # condition, comes first.
    run = _run([
        ("t::edge", "failed", {"m.py": [2, 3, 4, 5, 6]}, [], ("m.py", 6)),
        ("t::low", "passed", {"m.py": [2, 3, 5, 6]}, [], None),
        ("t::mid", "passed", {"m.py": [2, 3, 5, 6]}, [], None),
    ])
    locs = localize(run, CoverageMap.from_run(run), lambda p: WRONG_CONDITION)
    assert [loc.line for loc in locs] == [3, 4, 6, 2, 5]
    assert StatementMap(WRONG_CONDITION).branches(3) == (4,) and StatementMap(WRONG_CONDITION).branches(4) == ()
    # Without the credit the condition would tie with lines 2 and 5 (0.577) and follow line 2.
    assert round(locs[0].score, 3) == 0.577 and locs[0].branch == 1.0


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


HELPERS = """\
def area(w, h):
    side = scale(w)
    return side * h


def scale(x):
    return x * 2
"""


def test_ties_go_to_the_function_the_failing_test_calls_before_its_helpers():
    test_src = "from m import area\n\n\ndef test_area():\n    assert area(2, 3) == 6\n"
    run = _run([("tests/test_m.py::test_area", "failed", {"m.py": [2, 3, 7]}, [], None)])
    locs = localize(run, CoverageMap.from_run(run), lambda p: test_src if p.startswith("tests/") else HELPERS)
    assert [(loc.line, loc.named) for loc in locs] == [(2, True), (3, True), (7, False)]
    # The helper first when the test calls it and not the other.
    test_src = test_src.replace("area(2, 3) == 6", "scale(2) == 4").replace("import area", "import scale")
    locs = localize(run, CoverageMap.from_run(run), lambda p: test_src if p.startswith("tests/") else HELPERS)
    assert [loc.line for loc in locs] == [7, 2, 3]


def test_recently_changed_lines_rank_above_equally_suspicious_ones():
    from frognano.repair.recent import ALL_LINES

    run = _run([
        ("t::a", "failed", {"m.py": [2, 3, 4]}, [], None),
        ("t::b", "passed", {"m.py": [2, 5]}, [], None),
    ])
    cov = CoverageMap.from_run(run)
    assert [loc.line for loc in localize(run, cov, lambda p: SOURCE)] == [3, 4, 2]
    locs = localize(run, cov, lambda p: SOURCE, recent={"m.py": frozenset({4})})
    assert [(loc.line, loc.changed) for loc in locs] == [(4, True), (3, False), (2, False)]
    # A bonus, not a verdict: a changed line the passing tests also run (0.71) stays above
    # unchanged ones only up to RECENT_BONUS.
    locs = localize(run, cov, lambda p: SOURCE, recent={"m.py": frozenset({2})})
    assert [loc.line for loc in locs] == [2, 3, 4] and "changed recently" in locs[0].describe()
    assert all(loc.changed for loc in localize(run, cov, lambda p: SOURCE, recent={"m.py": ALL_LINES}))


def test_changed_lines_come_from_git_and_from_the_last_green_run(make_project):
    import git

    from frognano.repair.recent import ALL_LINES, GreenSnapshot, git_changes, hunk_lines, text_changes

    root = make_project({"pkg/__init__.py": "", "pkg/m.py": SOURCE, "tests/test_m.py": "def test_x():\n    pass\n"})
    assert git_changes(root) == {}  # no repository: no picture
    repo = git.Repo.init(root)
    repo.index.add(["pkg/__init__.py", "pkg/m.py", "tests/test_m.py"])
    repo.index.commit("first")
    (root / "pkg" / "m.py").write_text(SOURCE.replace("return 0", "return -1").replace("x + 1", "x + 2"))
    (root / "pkg" / "new.py").write_text("X = 1\n")
    assert git_changes(root) == {"pkg/m.py": frozenset({2, 5}), "pkg/new.py": ALL_LINES}
    assert git_changes(root / "pkg") == {"m.py": frozenset({2, 5}), "new.py": ALL_LINES}  # relative to the project
    assert hunk_lines("@@ -3,2 +2,0 @@\n-a\n-b\n") == frozenset({2, 3})  # a deletion marks where it was
    assert text_changes("a\nb\nc\n", "a\nB\nc\nd\n") == frozenset({2, 4})

    snap, texts = GreenSnapshot(), {"m.py": "a\nb\n"}
    assert snap.changes({"m.py": 1}, texts.get) == {}  # no green run yet
    snap.record({"m.py": 1}, texts.get)
    texts["m.py"], texts["n.py"] = "a\nc\n", "x\n"
    assert snap.changes({"m.py": 2, "n.py": 1}, texts.get) == {"m.py": frozenset({2}), "n.py": ALL_LINES}


def test_the_engine_ranks_what_changed_since_the_last_green_run_first(make_project):
    files = {
        "calc.py": "def f(x):\n    y = x + 1\n    z = y * 1\n    return z\n",
        "tests/test_calc.py": "from calc import f\n\n\ndef test_f():\n    assert f(1) == 2\n",
    }
    root = make_project(files)
    with Workspace(root) as ws, Engine(ws, Settings()) as engine:
        assert engine.diagnose().failing == []  # green: the engine keeps this picture
        (root / "calc.py").write_text(files["calc.py"].replace("y * 1", "y * 3"))
        diagnosis = engine.diagnose()
        assert diagnosis.failing == ["tests/test_calc.py::test_f"]
        top = diagnosis.locations[0]
        assert (top.line, top.changed) == (3, True), [loc.describe() for loc in diagnosis.locations]


REPORTED = {
    "pkg/__init__.py": "",
    "pkg/result.py": """
        class Result:
            def __init__(self, output):
                self.output = output

            def __repr__(self):
                return f"<Result {self.output!r}>"

            def __eq__(self, other):
                return isinstance(other, Result) and self.output == other.output


        def run(text):
            return Result(text.upper())
    """,
    "tests/test_result.py": """
        from pkg.result import Result, run

        def test_run_keeps_case():
            assert run("Hi") == Result("Hi")

        def test_repr_is_short():
            assert len(repr(Result(""))) < 20
    """,
}


def test_what_pytest_runs_to_explain_a_failed_assert_is_not_evidence(make_project):
    """The failing `assert` makes pytest call the operands' __repr__ (click's `Result`), only in
    failing tests: those lines are pytest's report, not the test's run, and must not top the
    ranking or be the last line executed."""
    with Workspace(make_project(REPORTED)) as ws, Engine(ws, Settings(lanes=1)) as engine:
        diagnosis = engine.diagnose()
    failing = diagnosis.run.tests["tests/test_result.py::test_run_keeps_case"]
    assert failing.last == ("pkg/result.py", 9)  # __eq__, the last line the test itself ran
    assert not [loc for loc in diagnosis.locations if loc.function == "Result.__repr__" and loc.score > 0.5]
    assert diagnosis.locations[0].function in ("run", "Result.__eq__")
