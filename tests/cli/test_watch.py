"""`frognano watch`: real watchdog, real files, in private copies of the examples.

``watch()`` runs on a thread with a ``stop`` event and a rich Console recording into a
StringIO, or as ``python -m frognano watch`` in a subprocess; every wait is bounded and polls.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import sigint_default
from rich.console import Console

from frognano.cli.watch import watch
from frognano.config import load_settings
from frognano.paths import project_cache
from frognano.sandbox.workspace import Workspace

STATUS = re.compile(r"^\d\d:\d\d:\d\d [✓✗] ", re.M)
DEBOUNCE = 0.1


class Watching:
    """``watch()`` on its own thread; ``stop`` ends it and ``code`` is what it returned."""

    def __init__(self, project: Path, *, apply: bool = False) -> None:
        self.project = project
        self.out = io.StringIO()
        console = Console(file=self.out, width=200, highlight=False, color_system=None)
        self.stop = threading.Event()
        self.code: int | None = None
        settings = load_settings(project)

        def run() -> None:
            self.code = watch(Workspace(project), settings, apply=apply, console=console,
                              stop=self.stop, debounce=DEBOUNCE)

        self.thread = threading.Thread(target=run, name="watch-under-test", daemon=True)

    def __enter__(self) -> "Watching":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> int | None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "watch() did not return after stop\n" + self.text
        return self.code

    @property
    def text(self) -> str:
        return self.out.getvalue()

    def statuses(self) -> list[str]:
        return [ln for ln in self.text.splitlines() if STATUS.match(ln)]

    def wait_for(self, check: Callable[[str], bool] | str, timeout: float = 60) -> str:
        """Poll the output until ``check`` holds (a string: until it appears)."""
        test = (lambda text: check in text) if isinstance(check, str) else check
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if test(self.text):
                return self.text
            assert self.thread.is_alive() or test(self.text), f"watch() ended early:\n{self.text}"
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {check!r}; output:\n{self.text}")

    def wait_status(self, n: int, timeout: float = 60) -> str:
        """The ``n``-th status line (1-based), once it is printed."""
        self.wait_for(lambda _: len(self.statuses()) >= n, timeout)
        return self.statuses()[n - 1]


def pytest_in(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=project, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def undo_records(project: Path) -> list[Path]:
    return sorted((project_cache(project) / "undo").glob("*/manifest.json"))


GREEN = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        testpaths = ["tests"]
        """,
    "pkg/__init__.py": "",
    "pkg/a.py": """
        def double(x):
            return 2 * x
        """,
    "pkg/b.py": """
        def inc(x):
            return x + 1
        """,
    "tests/test_a.py": """
        from pkg.a import double

        def test_double():
            assert double(2) == 4

        def test_double_zero():
            assert double(0) == 0
        """,
    "tests/test_b.py": """
        from pkg.b import inc

        def test_inc():
            assert inc(1) == 2
        """,
}


def test_saves_run_the_affected_tests_and_noise_is_ignored(make_project):
    project = make_project(GREEN)
    a, b = project / "pkg" / "a.py", project / "pkg" / "b.py"
    with Watching(project) as w:
        assert re.search(r"✓ 3 passed in [\d.]+ s · all tests$", w.wait_status(1)), w.text

        # Editor swap, backup and lock files, bytecode, other files, virtualenvs: no run.
        (project / "pkg" / ".a.py.swp").write_bytes(b"swap")
        (project / "pkg" / "a.py~").write_text("backup")
        (project / "pkg" / ".#a.py").write_text("lock")
        (project / "pkg" / "__pycache__").mkdir(exist_ok=True)
        (project / "pkg" / "__pycache__" / "cached.py").write_text("x = 1\n")
        (project / "notes.txt").write_text("edited\n")
        for venv in (project / ".venv", project / "env"):
            (venv / "lib").mkdir(parents=True)
            (venv / "pyvenv.cfg").write_text("home = /usr\n")
            (venv / "lib" / "site.py").write_text("x = 1\n")
        time.sleep(5 * DEBOUNCE)
        assert len(w.statuses()) == 1, w.text

        # A burst of saves is one run, of the tests covering the saved module.
        for i in range(4):
            a.write_text(f"def double(x):\n    return x + x  # save {i}\n")
            time.sleep(DEBOUNCE / 4)
        assert "✓ 2 passed" in w.wait_status(2) and "2 tests affected by pkg/a.py" in w.statuses()[1]
        time.sleep(5 * DEBOUNCE)
        assert len(w.statuses()) == 2, w.text

        b.write_text("def inc(x):\n    return x - 1\n")
        assert "✗ 1 failed, 0 passed" in w.wait_status(3) and "1 test affected by pkg/b.py" in w.statuses()[2]
        w.wait_for("✓ Verified fix")  # the search ran on the failure
        w.wait_for("Nothing was written")
        b.write_text("def inc(x):\n    return x + 1\n")
        assert "✓ 1 passed" in w.wait_status(4), w.text

        # A changed test module runs whole (as in the server); a new module or a broken one: every test.
        test_b = project / "tests" / "test_b.py"
        test_b.write_text(test_b.read_text() + "\n\ndef test_more():\n    assert inc(0) == 1\n")
        assert "✓ 2 passed" in w.wait_status(5) and "1 test module affected by tests/test_b.py" in w.statuses()[4]
        (project / "pkg" / "c.py").write_text("X = 1\n")
        assert "✓ 4 passed" in w.wait_status(6) and "all tests (pkg/c.py changed)" in w.statuses()[5]
        a.write_text("def double(x):\n    return x +\n")
        broken = w.wait_status(7)
        # reported at the source file's line, not against the test module that imported it
        assert "✗ pkg/a.py:2: SyntaxError" in broken and "collecting tests/test_a.py" in broken, broken
        a.write_text("def double(x):\n    return 2 * x\n")
        assert "✓ 4 passed" in w.wait_status(8) and "all tests (pkg/a.py changed)" in w.statuses()[7]
    assert w.code == 0
    assert "Traceback" not in w.text


@pytest.mark.slow
def test_a_failing_example_shows_its_fix_once(example):
    project = example("shapes")
    report_py = project / "src" / "shapes" / "report.py"
    with Watching(project) as w:
        first = w.wait_status(1)
        assert "✗ 4 failed, 8 passed" in first and "all tests" in first, first
        w.wait_for("Nothing was written")  # the fix is shown, not applied
        assert "✓ Verified fix" in w.text and "-        return self.width * self.width" in w.text
        # the failing tests and suspects are printed as soon as known, before the search starts
        assert w.text.index("Suspicious lines") < w.text.index("searching for a fix") < w.text.index("✓ Verified fix")
        report_py.write_text(report_py.read_text() + "\n# a comment\n")
        second = w.wait_status(2)
        assert "✗ 2 failed, 2 passed" in second and "4 tests affected by src/shapes/report.py" in second
        assert "2 other tests still failing" in second, second
        # The same fix again: one line, not the whole report.
        w.wait_for("the same verified fix as above: 4 failing tests now pass, 8 tests still pass")
    assert w.code == 0
    assert w.text.count("✓ Verified fix") == 1
    assert not undo_records(project), "without apply nothing is written"


@pytest.mark.slow
def test_apply_writes_the_verified_fix_with_undo(example):
    project = example("calc")
    stats = project / "calc" / "stats.py"
    original = stats.read_text()
    with Watching(project, apply=True) as w:
        w.wait_for("Applied to calc/stats.py")
        # Our own write is a change like any other: the tests of the changed function run
        # again (is_adult's 3 of the 7 that cover calc/stats.py), green.
        green = w.wait_for(lambda t: any("✓ 3 passed" in s and "3 tests affected by calc/stats.py" in s
                                         for s in w.statuses()))
    assert w.code == 0
    assert "Undo with: frognano undo" in green
    assert "return age >= 18" in stats.read_text()
    assert pytest_in(project).returncode == 0
    records = undo_records(project)
    assert len(records) == 1 and (records[0].parent / "0.before").read_text() == original


@pytest.mark.slow
@pytest.mark.parametrize("when", ["while confirming", "just before the write"])
def test_an_edit_made_while_the_fix_is_computed_is_never_overwritten(example, monkeypatch, when):
    """The user saves at the fix's last step, or after watch's own check, right before the
    write: either way the fix must not be written and the watch starts over."""
    import frognano.cli.watch as watch_module

    from frognano.repair.verify import Verifier

    project = example("calc")
    stats = project / "calc" / "stats.py"
    mine = stats.read_text().replace("return age > 18", "return not age < 18  # my own fix")
    if when == "while confirming":
        confirming, saved = threading.Event(), threading.Event()
        confirm = Verifier.confirm

        def held_confirm(self, patch):
            confirming.set()
            assert saved.wait(30)
            return confirm(self, patch)

        monkeypatch.setattr(Verifier, "confirm", held_confirm)
    else:
        apply_patch = watch_module.apply_patch

        def racing_apply(root, patch, **kw):
            stats.write_text(mine)
            return apply_patch(root, patch, **kw)

        monkeypatch.setattr(watch_module, "apply_patch", racing_apply)
    with Watching(project, apply=True) as w:
        if when == "while confirming":
            assert confirming.wait(60), w.text
            stats.write_text(mine)
            saved.set()
        w.wait_for("skipped: calc/stats.py changed while the fix was computed")
        # Then the watch starts over on the new state: the user's fix makes the tests of the
        # changed function (is_adult's 3) pass.
        w.wait_for(lambda t: any("✓ 3 passed" in s and "3 tests affected by calc/stats.py" in s
                                 for s in w.statuses()))
    assert w.code == 0
    assert stats.read_text() == mine
    assert "Applied" not in w.text and not undo_records(project)


@pytest.mark.slow
def test_command_line_edit_during_search_then_ctrl_c(example, tmp_path):
    """`frognano watch --apply` as a user runs it: save while it searches, then Ctrl-C."""
    project = example("calc")
    stats = project / "calc" / "stats.py"
    mine = stats.read_text().replace("return age > 18", "return age >= 18 and age == age  # mine")
    out = tmp_path / "out.txt"
    with open(out, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "frognano", "watch", str(project), "--apply"],
                                stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy(),
                                start_new_session=True, preexec_fn=sigint_default)
    try:
        def wait_for(text: str, timeout: float = 60) -> str:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                got = out.read_text(encoding="utf-8")
                if text in got:
                    return got
                assert proc.poll() is None, got
                time.sleep(0.01)
            raise AssertionError(f"timed out waiting for {text!r}:\n{out.read_text()}")

        wait_for("searching for a fix")
        stats.write_text(mine)
        wait_for("✓ 3 passed")  # the tests of the changed function, is_adult
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out.read_text(encoding="utf-8")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert stats.read_text() == mine
    assert pytest_in(project).returncode == 0


def test_command_line_json_lines_with_k(example, tmp_path):
    """`frognano watch --json -k EXPR`: one JSON object per run on stdout, people's lines on stderr."""
    project = example("calc")
    stats = project / "calc" / "stats.py"
    out, err = tmp_path / "out.jsonl", tmp_path / "err.txt"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "frognano", "watch", str(project), "--json", "-k", "adult"],
                                stdout=fo, stderr=fe, env={**os.environ, "COLUMNS": "80"}, start_new_session=True,
                                preexec_fn=sigint_default)
    try:
        def records(n: int, timeout: float = 60) -> list[dict]:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                lines = out.read_text(encoding="utf-8").splitlines()
                if len(lines) >= n:
                    return [json.loads(ln) for ln in lines]
                assert proc.poll() is None, err.read_text()
                time.sleep(0.02)
            raise AssertionError(f"timed out waiting for {n} records:\n{out.read_text()}\n{err.read_text()}")

        (first,) = records(1)
        assert first["status"] == "fixed" and first["failing"] == ["tests/test_stats.py::test_is_adult[18-True]"]
        assert first["failures"][0]["message"] == "AssertionError: assert False is True"
        assert first["fix"]["verified"]["pass_to_pass"] == 2  # only the -k selection: test_is_adult's 3
        assert first["reason"] == "all tests"
        stats.write_text(stats.read_text().replace("return age > 18", "return age >= 18"))
        second = records(2)[1]
        assert second["status"] == "passing" and second["ran"] == second["passed"] == 3, second
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2  # JSON lines only on stdout
    assert "watching" in err.read_text(encoding="utf-8")


def test_a_path_without_tests_exits_2_with_one_line(make_project, tmp_path):
    project = make_project({"pkg/__init__.py": "", "pkg/mod.py": "x = 1\n"})
    out = io.StringIO()
    code = watch(Workspace(project), load_settings(project),
                 console=Console(file=out, width=200, color_system=None), debounce=DEBOUNCE)
    assert code == 2
    assert out.getvalue().splitlines() == [f"error: no tests found in {project} (pytest collected nothing)"]

    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "frognano", "watch", str(empty)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"error: {empty}: no Python files here; give the folder of a "
                                        "Python project"], proc.stderr


def test_stop_during_the_first_run_returns_0(example):
    with Watching(example("calc")) as w:
        w.wait_for(lambda _: True)
    assert w.code == 0


SLOW = {
    "pkg/__init__.py": "",
    "pkg/slow.py": """
        import time

        def answer():
            time.sleep(3)
            return 42
        """,
    "tests/test_slow.py": """
        from pkg.slow import answer

        def test_answer():
            assert answer() == 42
        """,
}


@pytest.mark.slow
def test_a_save_during_a_run_stops_it_and_runs_the_new_state(make_project):
    project = make_project(SLOW)
    module = project / "pkg" / "slow.py"
    with Watching(project) as w:
        assert "1 passed" in w.wait_status(1)
        module.write_text(module.read_text().replace("time.sleep(3)", "time.sleep(2.5)"))
        time.sleep(1.0)  # the affected test is running (it sleeps 2.5 s)
        module.write_text(module.read_text().replace("return 42", "return 41"))
        second = w.wait_status(2)
    assert "run stopped by a newer change" in w.text
    assert "1 failed" in second  # the state after the last save, not the one before it
    assert len(w.statuses()) == 2  # the stopped run printed no result of its own
