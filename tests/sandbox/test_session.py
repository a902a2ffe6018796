"""The warm session: collect once, swap edited function bodies per run, re-import otherwise.

Every check compares the session's outcome with the ordinary warm run (a fresh import in a fork
of the server) on the same shadow state: the swap must never change a verdict.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from frognano.operators import CATALOGUE, mutations
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.spectra import CoverageMap, is_test_file
from frognano.sandbox.workspace import Workspace

PROJECT = {
    "pkg/__init__.py": "",
    "pkg/core.py": """
        import functools

        LIMIT = 18


        def is_adult(age):
            return age >= LIMIT


        def double(x):
            return 2 * x


        def half(x):
            return x // 2


        class Account:
            rate = 2

            def __init__(self, balance):
                self.__balance = balance

            def grow(self):
                return self.__balance * self.rate

            @property
            def balance(self):
                return self.__balance

            @functools.lru_cache(maxsize=None)
            def tax(self):
                return self.__balance // 10


        def decorate(f):
            return f


        @decorate
        def triple(x):
            return 3 * x


        TABLE = [double(i) for i in range(3)]
        """,
    "tests/test_core.py": """
        import pytest

        from pkg.core import TABLE, Account, double, half, is_adult, triple

        def test_adult():
            assert is_adult(18)

        def test_double():
            assert double(2) == 4

        def test_half():
            assert half(4) == 2

        def test_table():
            assert TABLE == [0, 2, 4]

        def test_grow():
            assert Account(3).grow() == 6

        def test_balance_and_tax():
            assert Account(30).balance == 30 and Account(30).tax() == 3

        def test_triple():
            assert triple(2) == 6

        @pytest.mark.parametrize("n", [1, 2])
        def test_param(n):
            assert double(n) == 2 * n
        """,
}

TESTS = ["tests/test_core.py"]


def _outcomes(run):  # noqa: ANN001, ANN202
    return {n: t.outcome for n, t in run.tests.items()}


def _both(runner: TestRunner, ids: list[str]):  # noqa: ANN202
    """The same selection through the session and the ordinary warm way."""
    runner.config.swap = True
    swapped = runner.run(ids)
    runner.config.swap = False
    plain = runner.run(ids)
    runner.config.swap = True
    return swapped, plain


@pytest.fixture
def session_runner(make_project):
    root = make_project(PROJECT)
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig()) as runner:
            assert not runner.run(None).failing
            assert runner.run(TESTS).swapped == 0  # the session collects the pristine state
            yield ws, runner


EDITS = {
    # function bodies: swapped
    "a body": ("return x // 2", "return x // 3", None),
    "a method using a mangled name": ("return self.__balance * self.rate", "return self.__balance + self.rate", None),
    "a property": ("return self.__balance\n", "return self.__balance + 1\n", None),
    "a cached method": ("return self.__balance // 10", "return self.__balance // 5", None),
    "a decorated function": ("return 3 * x", "return 3 + x", None),
    "a body growing by a line": ("def is_adult(age):\n", "def is_adult(age):\n    age = age + 0\n", None),
    # anything else: the run re-imports
    "a module-level constant": ("LIMIT = 18", "LIMIT = 19", "outside function bodies"),
    "a class attribute": ("rate = 2", "rate = 3", "outside function bodies"),
    "a decorator": ("@decorate\n", "@functools.lru_cache(maxsize=None)\n", "outside function bodies"),
    "a new import": ("import functools\n", "import functools\nimport os\n", "outside function bodies"),
    "a default value": ("def decorate(f):", "def decorate(f=None):", "outside function bodies"),
    "a function run at import time": ("return 2 * x", "return 2 * x + 1", "import or collection time"),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_swap_or_reimport_gives_the_verdict_of_a_fresh_import(session_runner, what):
    ws, runner = session_runner
    old, new, fallback = EDITS[what]
    source = (ws.shadow / "pkg/core.py").read_text()
    assert old in source
    text = source.replace(old, new, 1)  # (double() runs at import time, for TABLE)
    with ws.edited({"pkg/core.py": text}):
        swapped, plain = _both(runner, TESTS)
    assert _outcomes(swapped) == _outcomes(plain), what
    assert plain.swapped is None and not plain.fallback
    if fallback is None:
        assert swapped.swapped and not swapped.fallback, (what, swapped.fallback)
    else:
        assert swapped.swapped is None and fallback in swapped.fallback, (what, swapped.fallback)


def test_a_line_added_above_moves_the_functions_below(session_runner):
    ws, runner = session_runner
    source = (ws.shadow / "pkg/core.py").read_text()
    text = source.replace("def is_adult(age):\n", "def is_adult(age):\n    age = age + 0\n\n", 1)
    text = text.replace("return 3 * x", "return 3 * x + 1", 1)  # a second body: the general path
    with ws.edited({"pkg/core.py": text}):
        runner.config.swap = True
        swapped = runner.run(TESTS, coverage=True)
        runner.config.swap = False
        plain = runner.run(TESTS, coverage=True)
    assert swapped.swapped and _outcomes(swapped) == _outcomes(plain)
    # Coverage and tracebacks name the lines of the edited file, as a fresh import would.
    for nodeid, t in plain.tests.items():
        assert swapped.tests[nodeid].coverage == t.coverage, nodeid
        assert [f.line for f in swapped.tests[nodeid].frames] == [f.line for f in t.frames], nodeid


def test_selection_of_node_ids_files_and_unknown_tests(session_runner):
    ws, runner = session_runner
    run = runner.run(["tests/test_core.py::test_param"])  # a parametrized function: all its items
    assert sorted(run.tests) == ["tests/test_core.py::test_param[1]", "tests/test_core.py::test_param[2]"]
    assert run.swapped == 0
    (ws.shadow / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    run = runner.run(["tests/test_new.py::test_new"])  # not collected by the session
    assert run.tests["tests/test_new.py::test_new"].passed and "not collected" in run.fallback


def test_a_changed_project_is_collected_again(session_runner):
    ws, runner = session_runner
    assert runner.sessions == 1
    (ws.root / "pkg" / "core.py").write_text((ws.root / "pkg" / "core.py").read_text().replace("LIMIT = 18", "LIMIT = 21"))
    ws.sync()  # the user's edit, outside any candidate: the next runs need a new session
    first = runner.run(TESTS)
    again = runner.run(TESTS)
    assert first.tests["tests/test_core.py::test_adult"].outcome == "failed" and "outside" in first.fallback
    assert again.tests["tests/test_core.py::test_adult"].outcome == "failed" and again.swapped == 0
    assert runner.sessions == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["calc", "inventory", "shapes"])
def test_every_operator_kind_on_the_examples_agrees_with_a_fresh_import(example, name):
    root = example(name)
    kinds: dict[str, int] = defaultdict(int)
    paths: dict[str, int] = defaultdict(int)
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig()) as runner:
            base = runner.run(None, coverage=True)
            coverage = CoverageMap.from_run(base)
            for rel in sorted(r for r in ws.python_files() if not is_test_file(r)):
                source = (ws.shadow / rel).read_text()
                ids = sorted(coverage.tests_covering(rel)) or sorted(base.tests)
                per_kind: dict[str, int] = defaultdict(int)
                for m in mutations(source, rel):
                    if per_kind[m.operator] >= 2:
                        continue
                    per_kind[m.operator] += 1
                    with ws.edited({rel: m.apply(source)}):
                        swapped, plain = _both(runner, ids)
                    assert _outcomes(swapped) == _outcomes(plain), (rel, m.line, m.operator, m.description)
                    kinds[m.operator] += 1
                    paths["swapped" if swapped.swapped is not None else "re-imported"] += 1
    assert set(kinds) <= set(CATALOGUE) and len(kinds) >= 8, dict(kinds)
    assert paths["swapped"] > 0, dict(paths)


STRICT = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        filterwarnings = ["error"]
        asyncio_default_fixture_loop_scope = "function"  # pytest-asyncio warns without it
    """,
    "calc.py": """
        def double(x):
            return 2 * x
    """,
    "tests/test_calc.py": """
        import gc

        from calc import double

        def test_double():
            gc.collect()  # whatever FrogNano's own process left unclosed is collected here
            assert double(2) == 4
    """,
}


def test_a_project_that_turns_warnings_into_errors_runs_warm_as_fresh(make_project, monkeypatch):
    """`filterwarnings = error` (dateutil's): nothing of FrogNano's may warn inside the tests'
    process (a results file left open collected as a ResourceWarning; pytest's warning that
    pre-imported plugins cannot be rewritten), or every warm run fails where pytest passes."""
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)  # this venv's plugins load
    with Workspace(make_project(STRICT)) as ws:
        ws.sync()
        with TestRunner(ws, RunnerConfig()) as runner:
            for _ in range(3):  # the session's first run, then its later ones
                run = runner.run(["tests/test_calc.py::test_double"], coverage=True)
                assert run.warm and _outcomes(run) == {"tests/test_calc.py::test_double": "passed"}, \
                    run.tests["tests/test_calc.py::test_double"].message
            assert runner.run(["tests/test_calc.py::test_double"], fresh=True).passing
