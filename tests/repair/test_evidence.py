"""Localisation after the search: the search's edits rank the suspicious lines again."""

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.repair.evidence import UNTRIED, refine
from frognano.repair.localize import Location
from frognano.repair.patch import Patch
from frognano.repair.search import Candidate, Tried
from frognano.repair.verify import CandidateResult
from frognano.operators.mutation import Mutation

# Every line of describe() is run by the failing test alone, so the spectrum ties them all and
# falls back to the last executed line, then line order: the unused ``width`` ranks above the
# bug.  No single edit can make "five", so the search ends without a fix; but its edits at the
# bug change the failing assertion, and those at ``width`` leave it as it was.
UNFIXABLE = {
    "fmt/__init__.py": "",
    "fmt/core.py": """
        def describe(n):
            width = max(n, 1)
            text = str(n + 1)
            return text


        def other():
            return 1
    """,
    "tests/test_core.py": """
        from fmt.core import describe, other

        def test_describe():
            assert describe(5) == "five"

        def test_other():
            assert other() == 1
    """,
}


def test_edits_that_leave_the_failing_tests_as_they_were_rank_their_line_lower(make_project):
    from frognano.sandbox.workspace import Workspace

    project = make_project(UNFIXABLE)
    with Workspace(project) as ws, Engine(ws, Settings(max_pairs=0, lanes=1)) as engine:
        before = [loc.line for loc in engine.diagnose().locations]
        report = engine.fix()
    assert report.status == "unfixed"
    assert before[:3] == [4, 2, 3]  # the spectrum: the last executed line, then line order
    after = report.diagnosis.locations
    by_line = {loc.line: loc for loc in after}
    assert by_line[2].edits > 0 and by_line[2].moved == 0  # ``width``: nothing its edits did showed
    assert by_line[3].moved > 0 and by_line[4].moved > 0
    assert [loc.line for loc in after][:3] == [4, 3, 2]
    assert "here changed the failing tests" in by_line[3].describe()
    entry = report.to_json()["suspicious"][1]
    assert entry["line"] == 3 and entry["moved"] == by_line[3].moved and entry["edits"] == by_line[3].edits


def _tried(line: int, fixed=(), changed=(), broken=(), worse="", refused="", still=("t1", "t2")) -> Tried:
    m = Mutation("compare", "a.py", 0, "<", "<=", line, line, "f", "`<` -> `<=`")
    result = CandidateResult(fixed=list(fixed), still_failing=[t for t in still if t not in fixed],
                             broken=list(broken), changed=list(changed), worse=worse, refused=refused)
    return Tried(Candidate((m,), Patch([]), 0), result)


def _locs(*lines: int) -> list[Location]:
    return [Location("a.py", n, n, 1.0) for n in lines]


def test_refine_orders_by_the_share_of_failing_tests_moved_untried_between():
    locs = _locs(1, 2, 3, 4)
    tried = [_tried(1), _tried(2, changed=["t1"]), _tried(4, changed=["t1", "t2"])]
    ranked = refine(locs, tried, failing=2)
    # line 4 moved both (1.0), line 2 one of two (0.71), line 3 untried (UNTRIED), line 1 none
    assert [loc.line for loc in ranked] == [4, 2, 3, 1]
    assert UNTRIED < (1 / 2) ** 0.5
    assert [(loc.edits, loc.moved) for loc in ranked] == [(1, 1), (1, 1), (0, 0), (1, 0)]


def test_refine_puts_a_verified_fix_first_and_ignores_edits_that_could_not_count():
    locs = _locs(1, 2, 3)
    tried = [
        _tried(1, changed=["t1", "t2"]),
        _tried(3, fixed=["t1", "t2"], still=()),  # verified: every failing test passes, none broke
        _tried(2, worse="collection fails: SyntaxError"),  # the tests never ran
        _tried(2, refused="edits a test"),
    ]
    assert tried[1].result.verified
    ranked = refine(locs, tried, failing=2)
    assert [loc.line for loc in ranked] == [3, 1, 2]
    assert ranked[2].edits == 0  # neither of line 2's edits counted: still untried, not idle


def test_a_fix_that_breaks_passing_tests_weighs_less():
    """Metallaxis: moving the failing tests while breaking passing ones is weaker evidence."""
    locs = _locs(1, 2)
    tried = [_tried(1, fixed=["t1"], broken=["p1", "p2", "p3"], still=("t1",)), _tried(2, changed=["t1"], still=("t1",))]
    assert [loc.line for loc in refine(locs, tried, failing=1)] == [2, 1]


def test_the_spectrum_still_counts_beside_the_edits():
    """Idle edits lower a line only beside its equals: a line only the failing tests run (1.0)
    whose edits did nothing stays above one that passing tests run too (0.2) where an edit
    moved one of two failing tests (0.2 + 0.71), but not above an equal line's moved edit."""
    locs = [Location("a.py", 1, 1, 1.0), Location("a.py", 2, 2, 0.2), Location("a.py", 3, 3, 1.0)]
    tried = [_tried(1), _tried(2, changed=["t1"])]
    assert [loc.line for loc in refine(locs, tried, failing=2)] == [3, 1, 2]
    tried.append(_tried(3, changed=["t2"]))
    assert [loc.line for loc in refine(locs, tried, failing=2)] == [3, 1, 2]
    tried.append(_tried(1, changed=["t1", "t2"]))
    assert [loc.line for loc in refine(locs, tried, failing=2)] == [1, 3, 2]


def test_the_lines_of_a_verified_pair_come_first():
    """A fix by a pair of edits is not among the single edits; its lines are given."""
    locs = _locs(1, 2, 3)
    ranked = refine(locs, [_tried(1, changed=["t1"])], failing=2, fixed_at=[("a.py", 3), ("a.py", 2)])
    assert [loc.line for loc in ranked] == [2, 3, 1]
