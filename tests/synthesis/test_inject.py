"""Candidate bugs: covered functions of non-test files only, cheap useless mutants dropped."""

from __future__ import annotations

import textwrap

import pytest

from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace
from frognano.synthesis.inject import candidate_bugs, function_spans

FILES = {
    "pkg/__init__.py": "",
    "pkg/core.py": '''
        """Core."""


        def grade(score):
            """Return 'pass' when score >= 50 (docstring: 50 < 60 is not code)."""
            if score < 0:
                raise ValueError("negative")
            if score >= 50:
                return "pass"
            return "fail"


        def unused(x):
            return x + 1 if x > 0 else x - 1
        ''',
    "tests/test_core.py": '''
        from pkg.core import grade


        def test_grade():
            assert grade(70) == "pass"
            assert grade(10) == "fail"
        ''',
}


@pytest.fixture
def covered(make_project):
    root = make_project(FILES)
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig()) as runner:
            run = runner.run(None, coverage=True)
        assert run.ok
        yield ws, CoverageMap.from_run(run)


def test_function_spans_docstring_and_body():
    src = textwrap.dedent('''
        def f(a=1):
            """Doc
            string."""
            return a

        class C:
            def m(self):
                return 2
        ''')
    spans = function_spans(src)
    assert set(spans) == {"f", "C.m"}
    assert list(spans["f"].docstring) == [3, 4]
    assert spans["f"].def_line == 2 and 5 in spans["f"].body


def test_candidates_only_in_covered_live_code(covered):
    ws, coverage = covered
    bugs = candidate_bugs(ws, coverage)
    assert bugs
    assert all(m.path == "pkg/core.py" for m in bugs)  # never the test file
    assert {m.function for m in bugs} == {"grade"}  # `unused` is never run
    src = ws.read("pkg/core.py")
    doc = function_spans(src)["grade"].docstring
    assert not [m for m in bugs if m.line in doc]  # nothing inside the docstring
    raise_line = src.splitlines().index('        raise ValueError("negative")') + 1
    assert not [m for m in bugs if m.line == raise_line]  # dead for this suite
    assert all(m.old != m.new for m in bugs)


def test_candidates_filter_operators_and_shuffle(covered):
    ws, coverage = covered
    only = candidate_bugs(ws, coverage, operators=["compare"])
    assert only and {m.operator for m in only} == {"compare"}
    a = candidate_bugs(ws, coverage, seed=3)
    b = candidate_bugs(ws, coverage, seed=3)
    key = lambda m: (m.start, m.old, m.new, m.operator)  # noqa: E731
    assert a == b and sorted(a, key=key) == sorted(candidate_bugs(ws, coverage), key=key)
