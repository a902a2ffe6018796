"""The incremental session: one selection of affected tests, shared by the server and watch."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine, NothingToTest
from frognano.repair.incremental import Selection, Session
from frognano.sandbox.workspace import Workspace
from tests.cli.test_watch import GREEN, Watching

# watch's own test project, plus the files whose saves the faces must agree on.
PROJECT = {
    **GREEN,
    "setup.py": "from setuptools import setup\n\nsetup(name='pkg')\n",
    "conftest.py": "",
    "tests/helpers.py": """
        def twice(f, x):
            return f(f(x))
        """,
    "tests/test_b.py": """
        from pkg.b import inc
        from tests.helpers import twice

        def test_inc():
            assert inc(1) == 2

        def test_inc_twice():
            assert twice(inc, 0) == 2
        """,
}

# The same saves for both faces, in order: (file, new text), and what each must re-run.
CHANGES = [
    ("pkg/a.py", "def double(x):\n    return x + x\n", "2 tests affected by pkg/a.py"),
    ("tests/test_b.py", None, "1 test module affected by tests/test_b.py"),
    ("tests/helpers.py", "def twice(f, x):\n    return f(f(x))  # helper\n", "1 test affected by tests/helpers.py"),
    ("setup.py", "from setuptools import setup\n\nsetup(name='pkg', version='1')\n", "all tests (setup.py changed)"),
    ("conftest.py", "# shared fixtures\n", "all tests (conftest.py changed)"),
]


def _new_text(root: Path, rel: str, text: str | None) -> str:
    if text is not None:
        return text
    return (root / rel).read_text() + "\n\ndef test_inc_zero():\n    assert inc(-1) == 0\n"


@pytest.fixture
def session(make_project):
    root = make_project(PROJECT)
    with Workspace(root) as ws, Engine(ws, Settings()) as engine:
        yield Session(engine)


def test_nothing_is_selected_before_the_whole_suite_ran(session):
    assert session.select({"pkg/a.py"}).everything
    assert session.select(None) == Selection.all()


def test_selection_rules(session):
    session.engine.sync()
    first = session.run(session.select(None))
    assert len(first.ran.tests) == 4 and not first.diagnosis.failing
    pick = session.select
    assert pick({"pkg/a.py"}).nodeids == ("tests/test_a.py::test_double", "tests/test_a.py::test_double_zero")
    assert pick({"tests/test_b.py"}).nodeids == ("tests/test_b.py",)  # a test module runs whole
    assert pick({"tests/test_b.py"}).modules == {"tests/test_b.py"}
    assert pick({"tests/helpers.py"}).nodeids == ("tests/test_b.py::test_inc_twice",)  # by coverage
    assert pick({"README.md"}).empty  # nothing depends on it: the picture stays
    for everything in ({"conftest.py"}, {"setup.py"}, {"setup.cfg"}, {"tox.ini"}, {"pkg/"},
                       {"pkg/new.py"}, {"pkg/a.py", "conftest.py"}):
        (session.engine.ws.root / "pkg" / "new.py").write_text("X = 1\n")
        assert pick(everything).everything, everything
    (session.engine.ws.root / "pkg" / "b.py").unlink()
    assert pick({"pkg/b.py"}).everything  # deleted: its importers fail


def test_partial_runs_merge_and_a_vanished_test_runs_everything(session):
    root = session.engine.ws.root
    session.engine.sync()
    session.run(Selection.all())
    (root / "pkg" / "a.py").write_text("def double(x):\n    return x * 3\n")
    session.engine.sync()
    update = session.run(session.select({"pkg/a.py"}))
    assert sorted(update.ran.tests) == ["tests/test_a.py::test_double", "tests/test_a.py::test_double_zero"]
    assert update.diagnosis.failing == ["tests/test_a.py::test_double"]
    assert len(update.diagnosis.run.tests) == 4  # the others kept their results
    # A test the selection names that no longer exists: the whole suite tells.
    (root / "tests" / "test_a.py").write_text("from pkg.a import double\n\ndef test_renamed():\n"
                                              "    assert double(3) == 9\n")
    session.engine.sync()
    stale = Selection(("tests/test_a.py::test_double",), frozenset(), "1 test affected by pkg/a.py")
    update = session.run(stale)
    assert update.selection.everything and sorted(update.diagnosis.run.tests) == [
        "tests/test_a.py::test_renamed", "tests/test_b.py::test_inc", "tests/test_b.py::test_inc_twice"]


def test_the_warm_session_is_collected_after_a_whole_run_not_on_the_next_save(session):
    """The whole run does not use the warm session; the partial runs of later saves do.  The
    faces collect it once the whole run's results are out (the editor's first save after it
    cost 2 s more on more-itertools), and the next save swaps the edit into it."""
    root, runner = session.engine.ws.root, session.engine.runner
    session.engine.sync()
    session.run(Selection.all())
    assert runner.sessions == 0
    session.prewarm()
    assert runner.sessions == 1
    session.prewarm()  # once per whole run
    (root / "pkg" / "a.py").write_text("def double(x):\n    return x * 3\n")
    session.engine.sync()
    update = session.run(session.select({"pkg/a.py"}))
    assert update.diagnosis.failing == ["tests/test_a.py::test_double"]
    assert (runner.sessions, runner.session_runs) == (1, 1)  # swapped into it, not collected again
    session.prewarm()  # after a partial run: nothing to do
    assert runner.sessions == 1


def test_a_cancelled_runs_changes_stay_unseen_and_refresh_runs_only_what_changed(session):
    import threading

    root = session.engine.ws.root
    session.engine.sync()
    session.run(Selection.all())
    assert session.current and session.refresh() is None  # nothing changed: nothing runs
    (root / "pkg" / "a.py").write_text("def double(x):\n    return x * 3\n")
    session.engine.sync()
    assert not session.current and session.unseen() == {"pkg/a.py"}
    cancel = threading.Event()
    cancel.set()  # a newer save took over before the run of pkg/a.py's tests ended
    assert session.run(session.select({"pkg/a.py"}), cancel).cancelled
    # The next save names another file; pkg/a.py's tests run too, or its failure stays hidden.
    selection = session.select({"README.md"})
    assert selection.nodeids == ("tests/test_a.py::test_double", "tests/test_a.py::test_double_zero")
    update = session.refresh()
    assert sorted(update.ran.tests) == list(selection.nodeids)
    assert update.diagnosis.failing == ["tests/test_a.py::test_double"]
    assert session.current and session.refresh() is None


def test_no_tests_is_nothing_to_test(make_project):
    root = make_project({"lib/core.py": "def f():\n    return 1\n"}, "notests")
    with Workspace(root) as ws, Engine(ws, Settings()) as engine:
        engine.sync()
        with pytest.raises(NothingToTest, match="no tests found"):
            Session(engine).run(Selection.all())
    empty = make_project({"README.md": "nothing\n"}, "empty")
    with Workspace(empty) as ws, Engine(ws, Settings()) as engine, pytest.raises(NothingToTest, match="no Python"):
        engine.sync()


# -- the two faces agree ------------------------------------------------------------------------

_WATCH_REASON = re.compile(r"· (.+?)$")
_SERVER_RAN = re.compile(r"^FrogNano: ran (\d+) tests? \((.+?)\) in ")


def _watch_selections(root: Path) -> list[tuple[int, str]]:
    seen = []
    with Watching(root) as w:
        w.wait_status(1)
        for i, (rel, text, _) in enumerate(CHANGES, start=2):
            (root / rel).write_text(_new_text(root, rel, text))
            line = w.wait_status(i)
            counts = [int(n) for n in re.findall(r"(\d+) (?:passed|failed)", line)]
            seen.append((sum(counts), _WATCH_REASON.search(line).group(1)))
    return seen


async def _server_selections(root: Path) -> list[tuple[int, str]]:
    from tests.server.lsp import save, serve, wait_for

    def ran() -> list[str]:
        return [m.message for m in client.log_messages if m.message.startswith("FrogNano: ran")]

    seen = []
    async with serve(root, {"debounceMs": 50}) as client:
        save(client, root / "pkg" / "b.py")  # nothing known yet: the whole suite
        await wait_for(lambda: len(ran()) == 1, 60, "the first run")
        for i, (rel, text, _) in enumerate(CHANGES, start=2):
            (root / rel).write_text(_new_text(root, rel, text))
            save(client, root / rel)
            await wait_for(lambda: len(ran()) == i, 60, f"the run after saving {rel}")
            n, reason = _SERVER_RAN.match(ran()[-1]).groups()
            seen.append((int(n), reason))
    return seen


@pytest.mark.slow
def test_server_and_watch_select_the_same_tests_for_the_same_saves(make_project):
    in_watch = _watch_selections(make_project(PROJECT, "watched"))
    in_server = asyncio.run(_server_selections(make_project(PROJECT, "served")))
    expected = [reason for _, _, reason in CHANGES]
    assert [reason for _, reason in in_watch] == expected, in_watch
    assert in_server == in_watch
    assert [n for n, _ in in_watch] == [2, 3, 1, 5, 5]


def test_a_function_edit_reruns_that_functions_tests_and_moves_the_others_coverage(make_project):
    files = {
        "pkg/__init__.py": "",
        "pkg/m.py": "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x * 2\n",
        "tests/test_m.py": "from pkg.m import f, g\n\ndef test_f():\n    assert f(1) == 2\n\n"
                           "def test_g():\n    assert g(2) == 4\n",
    }
    root = make_project(files)
    with Workspace(root) as ws, Engine(ws, Settings()) as engine:
        session = Session(engine)
        engine.sync()
        session.run(Selection.all())
        (root / "pkg" / "m.py").write_text("def f(x):\n    y = x\n    return y + 1\n\n\ndef g(x):\n    return x * 2\n")
        engine.sync()
        selection = session.select({"pkg/m.py"})
        assert selection.nodeids == ("tests/test_m.py::test_f",), selection
        session.run(selection)
        moved = session.diagnosis.coverage.by_test["tests/test_m.py::test_g"]["pkg/m.py"]
        fresh = session.run(Selection.all()).diagnosis.coverage.by_test["tests/test_m.py::test_g"]["pkg/m.py"]
    assert moved == fresh == frozenset({7})  # g's body line, one lower: as a fresh run records it
