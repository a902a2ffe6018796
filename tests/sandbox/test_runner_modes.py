"""Runner modes used by synthesis: function-level coverage and reversed order, warm and fresh."""

import pytest

from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace

PROJECT = {
    "pkg/__init__.py": "",
    "pkg/core.py": """
        def total(items):
            out = 0
            for x in items:
                out += x
            return out


        def pairs(n):
            for i in range(n):
                yield i, i * i


        def rare(flag):
            if flag:
                return "yes"
            return "no"
    """,
    "tests/test_core.py": """
        from pkg.core import pairs, rare, total

        def test_total_long_loop():
            assert total(range(100000)) == sum(range(100000))

        def test_pairs():
            assert list(pairs(50))[-1] == (49, 2401)

        def test_rare_many_calls():
            # the branch taken only on the last call lies past the sampling limit
            for _ in range(20):
                assert rare(False) == "no"
            assert rare(True) == "yes"

        def test_no_project_code():
            assert 1 + 1 == 2
    """,
}


@pytest.fixture
def workspace(make_project):
    with Workspace(make_project(PROJECT)) as ws:
        ws.sync()
        yield ws


@pytest.mark.parametrize("warm", [True, False])
def test_function_coverage_is_exact_about_functions(workspace, warm):
    with TestRunner(workspace, RunnerConfig(warm=warm)) as runner:
        full = runner.run(coverage=True)
        fast = runner.run(coverage="functions")
    assert full.ok and fast.ok
    src = workspace.read("pkg/core.py").splitlines()
    spans = {"total": range(1, 6), "pairs": range(8, 11), "rare": range(13, 17)}
    full_map, fast_map = CoverageMap.from_run(full), CoverageMap.from_run(fast)
    for name, span in spans.items():
        lines = [i + 1 for i in span]
        assert full_map.tests_covering("pkg/core.py", lines) == fast_map.tests_covering("pkg/core.py", lines), name
    for nodeid, t in fast.tests.items():
        # never a line the full tracer did not see; test files are not traced
        assert "tests/test_core.py" not in (t.coverage or {})
        for path, lines in (t.coverage or {}).items():
            assert set(lines) <= set(full.tests[nodeid].coverage[path])
    assert fast.tests["tests/test_core.py::test_no_project_code"].coverage == {}
    assert src[14].strip() == 'return "yes"'
    # sampled: `rare`'s 21st call is past the per-test call limit, so its last branch is missing
    assert 15 in full.tests["tests/test_core.py::test_rare_many_calls"].coverage["pkg/core.py"]
    assert 15 not in fast.tests["tests/test_core.py::test_rare_many_calls"].coverage["pkg/core.py"]


@pytest.mark.parametrize("warm", [True, False])
def test_reverse_runs_the_tests_backwards(workspace, warm):
    with TestRunner(workspace, RunnerConfig(warm=warm)) as runner:
        forward = runner.run()
        backward = runner.run(reverse=True)
        some = ["tests/test_core.py::test_pairs", "tests/test_core.py::test_rare_many_calls"]
        part = runner.run(some, reverse=True)
    assert list(backward.tests) == list(reversed(list(forward.tests)))
    assert list(part.tests) == list(reversed(some))


@pytest.mark.parametrize("warm", [True, False])
def test_stop_on_timeout_ends_the_run_at_the_first_timeout(make_project, warm):
    root = make_project({"tests/test_hang.py": """
        def test_ok():
            pass

        def test_hang_1():
            while True:
                pass

        def test_hang_2():
            while True:
                pass
    """})
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(warm=warm)) as runner:
            limits = {f"tests/test_hang.py::{n}": 1.0 for n in ("test_ok", "test_hang_1", "test_hang_2")}
            every = runner.run(timeouts=limits)
            first = runner.run(timeouts=limits, stop_on_timeout=True)
    assert [t.outcome for t in every.tests.values()] == ["passed", "timeout", "timeout"]
    assert [t.outcome for t in first.tests.values()] == ["passed", "timeout"]


def test_a_run_waits_for_the_warm_up_in_progress_and_uses_its_session(workspace):
    """``warm_up`` collects the warm session on a thread; a run asked for meanwhile waits for
    it (never two requests to one server at once) and runs in that session."""
    with TestRunner(workspace) as runner:
        thread = runner.warm_up()
        result = runner.run(["tests/test_core.py::test_pairs"])  # at once, while it collects
        assert not thread.is_alive()
        assert result.ok and result.tests["tests/test_core.py::test_pairs"].passed
        session = runner._session
        assert session is not None  # the warm-up's session, used by the run
        runner.run(["tests/test_core.py::test_no_project_code"])
        assert runner._session == session
