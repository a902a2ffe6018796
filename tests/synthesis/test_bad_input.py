"""Bad input for synthesis (issue: each is skipped with a reason in the summary, never a task):
a red or hanging suite, tests that depend on their order, functions no test covers, non-Python
files, mutants that exhaust memory."""

from __future__ import annotations

import random
import shutil

import pytest
from click.testing import CliRunner

from frognano.errors import UsageError
from frognano.operators import Mutation
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap
from frognano.sandbox.workspace import Workspace
from frognano.synthesis.inject import CandidateStream
from frognano.synthesis.store import read_tasks
from frognano.synthesis.synth import synthesize
from frognano.synthesis.validate import Rejection, validate

from ..conftest import EXAMPLES
from .conftest import IGNORE as _IGNORE
from .test_synth import check_tasks

REGISTRY = '''_REGISTRY = {}


def register(name, value):
    _REGISTRY[name] = value


def lookup(name):
    return _REGISTRY[name]


def double(x):
    return x * 2


def never_called(x):
    return x + 1
'''
# test_lookup passes in file order only because test_register ran before it.
REGISTRY_TESTS = '''from pkg.reg import double, lookup, register


def test_register():
    register("a", 1)


def test_lookup():
    assert lookup("a") == 1


def test_double():
    assert double(3) == 6
    assert double(0) == 0
'''


@pytest.fixture
def registry(make_project):
    return make_project({"pkg/__init__.py": "", "pkg/reg.py": REGISTRY, "README.md": "# registry\n",
                         "data/table.csv": "a,b\n", "tests/test_reg.py": REGISTRY_TESTS}, name="registry")


def test_order_dependent_tests_never_make_tasks(registry, tmp_path):
    out = tmp_path / "tasks.jsonl"
    summary = synthesize([registry], out, n=100, seed=0)  # every candidate
    tasks = check_tasks(registry, out, tmp_path)
    assert tasks and all(t.FAIL_TO_PASS == ["tests/test_reg.py::test_double"] for t in tasks)
    assert all("test_lookup" not in " ".join(t.PASS_TO_PASS) for t in tasks)
    assert summary.order_dependent[str(registry.resolve())] == ["tests/test_reg.py::test_lookup"]
    assert summary.skips["only order-dependent tests cover it"] >= 1  # bugs in lookup
    over = summary.passed_over[str(registry.resolve())]
    assert over["no test covers it"] == 1  # never_called
    assert over["non-Python file"] == 2  # README.md, data/table.csv


# Both neighbours set the state, so reversing the whole suite cannot reveal test_victim.
TWO_SETTERS = REGISTRY_TESTS.replace("def test_lookup", "def test_victim").replace(
    "def test_double", 'def test_register_again():\n    register("a", 1)\n\n\ndef test_double')


def test_order_dependent_failing_test_is_rejected(make_project):
    root = make_project({"pkg/__init__.py": "", "pkg/reg.py": REGISTRY, "tests/test_reg.py": TWO_SETTERS})
    source = REGISTRY
    old = "return _REGISTRY[name]"
    m = Mutation("constant", "pkg/reg.py", source.index(old), old, "return _REGISTRY[name] + 1",
                 source[:source.index(old)].count("\n") + 1, source[:source.index(old)].count("\n") + 1,
                 "lookup", "hand-made")
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=20)) as runner:
            baseline = runner.run(None, coverage="functions")
            assert baseline.ok and runner.run(None, reverse=True).ok  # invisible to a reversed run
            got = validate(ws, runner, baseline, CoverageMap.from_run(baseline), m, timeouts={},
                           rng=random.Random(0))
    assert isinstance(got, Rejection) and got.reason == "order-dependent test", got
    assert got.detail == "tests/test_reg.py::test_victim"


def test_candidate_stream_is_lazy_deterministic_and_spread(registry):
    with Workspace(registry) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig()) as runner:
            coverage = CoverageMap.from_run(runner.run(None, coverage="functions"))
        stream = CandidateStream(ws, coverage, seed=5)
        assert sorted(stream.functions) == [("pkg/reg.py", f) for f in ("double", "lookup", "register")]
        assert stream._prepared == {}  # nothing parsed by libcst before the first draw
        drawn = list(stream)
        again = list(CandidateStream(ws, coverage, seed=5))
        assert drawn == again
        key = lambda m: (m.start, m.old, m.new, m.operator)  # noqa: E731
        assert sorted(drawn, key=key) == sorted(CandidateStream(ws, coverage), key=key)
        # round robin: the first three candidates are in three different functions
        assert len({m.function for m in drawn[:3]}) == 3


def test_red_and_green_repos_together(calc, tmp_path):
    red = tmp_path / "red"
    shutil.copytree(EXAMPLES / "calc", red, ignore=_IGNORE)  # is_adult(18) fails as shipped
    out = tmp_path / "t.jsonl"
    summary = synthesize([red, calc], out, n=1, seed=0)
    assert "fail before any mutation" in summary.refused[str(red.resolve())]
    assert summary.per_repo[str(calc.resolve())] == 1
    assert {t.repo for t in read_tasks(out)} == {str(calc.resolve())}

    from frognano.cli.synth import synth_command

    result = CliRunner().invoke(synth_command, [str(red), str(calc), "-o", str(tmp_path / "u.jsonl"), "-n", "1"])
    assert result.exit_code == 0, result.output
    assert "refused: 1 test(s) fail before any mutation" in result.output
    assert "passed over:" in result.output


def test_cli_reports_order_dependent_tests(registry, tmp_path):
    from frognano.cli.synth import synth_command

    result = CliRunner().invoke(synth_command, [str(registry), "-o", str(tmp_path / "t.jsonl"), "-n", "1"])
    assert result.exit_code == 0, result.output
    assert "1 test(s) depend on their order, not used: tests/test_reg.py::test_lookup" in result.output


def test_hanging_suite_is_refused(make_project, tmp_path):
    root = make_project({"pkg/__init__.py": "", "pkg/m.py": "def f():\n    return 1\n",
                         "tests/test_m.py": "from pkg.m import f\n\n\ndef test_f():\n    assert f() == 1\n\n\n"
                                            "def test_hangs():\n    while True:\n        pass\n"})
    with pytest.raises(UsageError, match="hang before any mutation"):
        synthesize([root], tmp_path / "t.jsonl", n=1, config=RunnerConfig(timeout=2))
    assert not list(read_tasks(tmp_path / "t.jsonl"))


VALUE = "def value():\n    return 1\n"


def test_memory_exhausting_mutant_is_rejected(make_project):
    root = make_project({"pkg/__init__.py": "", "pkg/core.py": VALUE,
                         "tests/test_core.py": "from pkg.core import value\n\n\ndef test_value():\n"
                                               "    assert value() == 1\n"})
    m = Mutation("constant", "pkg/core.py", VALUE.index("return 1"), "return 1",
                 "return len(bytearray(1 << 44))", 2, 2, "value", "hand-made")
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig(timeout=20, memory_mb=512)) as runner:
            baseline = runner.run(None, coverage="functions")
            got = validate(ws, runner, baseline, CoverageMap.from_run(baseline), m, timeouts={},
                           rng=random.Random(0))
    assert isinstance(got, Rejection) and got.reason == "exhausts memory", got
