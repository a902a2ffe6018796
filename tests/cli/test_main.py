"""`frognano fix` and `frognano undo` end to end, as a user runs them (real subprocesses)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import snapshot, write_project

EXAMPLES = ["calc", "inventory", "shapes"]


def frognano(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=os.environ.copy())


def pytest_in(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                          cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_is_fixed_and_verified(example, name):
    project = example(name)
    assert pytest_in(project).returncode == 1, "the example must ship with its bug"
    before = snapshot(project)
    proc = frognano("fix", str(project), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "fixed"
    assert out["failing"] and set(out["fix"]["verified"]["fail_to_pass"]) == set(out["failing"])
    assert isinstance(out["fix"]["verified"]["pass_to_pass"], int) and out["fix"]["verified"]["pass_to_pass"] > 0
    assert out["fix"]["source"] == "search"
    assert out["fix"]["diff"].startswith("--- a/") and "+++ b/" in out["fix"]["diff"]
    assert all((project / f).is_file() for f in out["fix"]["files"])
    assert snapshot(project) == before, "fix without --apply must not touch the project"

    applied = frognano("fix", str(project), "--apply")
    assert applied.returncode == 0, applied.stderr
    assert "Applied" in applied.stdout
    assert pytest_in(project).returncode == 0

    again = frognano("fix", str(project), "--json")
    assert json.loads(again.stdout)["status"] == "passing" and again.returncode == 0

    undone = frognano("undo", str(project))
    assert undone.returncode == 0, undone.stderr
    assert snapshot(project) == before


def test_human_report_shows_failures_suspects_diff_and_verification(example):
    proc = frognano("fix", str(example("calc")))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "1 failing test" in out and "test_is_adult[18-True]" in out
    assert "Suspicious lines" in out and "calc/stats.py:15" in out
    assert "-    return age > 18" in out and "+    return age >= 18" in out
    assert "1 failing test now passes, 6 tests still pass" in out
    assert "Nothing was written" in out


def test_apply_refuses_when_files_changed_since_the_fix(example):
    """Fix computed, then the user edits the file before --apply writes: nothing is written."""
    from frognano.config import load_settings
    from frognano.errors import ApplyError
    from frognano.repair.engine import Engine
    from frognano.repair.apply import apply_patch
    from frognano.sandbox.workspace import Workspace

    project = example("calc")
    with Workspace(project) as ws, Engine(ws, load_settings(ws.root)) as engine:
        report = engine.fix()
    assert report.status == "fixed"
    target = project / "calc" / "stats.py"
    target.write_text(target.read_text() + "\n# user edit\n")
    edited = target.read_bytes()
    with pytest.raises(ApplyError, match="changed since the fix was computed"):
        apply_patch(project, report.fix.patch)
    assert target.read_bytes() == edited


def test_undo_refuses_after_later_edits_unless_forced(example):
    project = example("calc")
    original = (project / "calc" / "stats.py").read_bytes()
    assert frognano("fix", str(project), "--apply").returncode == 0
    target = project / "calc" / "stats.py"
    target.write_text(target.read_text() + "# later\n")
    refused = frognano("undo", str(project))
    assert refused.returncode == 2 and "changed since the fix was applied" in refused.stderr
    assert frognano("undo", str(project), "--force").returncode == 0
    assert target.read_bytes() == original
    nothing = frognano("undo", str(project))
    assert nothing.returncode == 2 and "nothing to undo" in nothing.stderr


def test_settings_from_pyproject_and_bad_settings(example):
    project = example("calc")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '\n[tool.frognano]\ntest_args = ["-k", "adult"]\n')
    out = json.loads(frognano("fix", str(project), "--json").stdout)
    assert out["fix"]["verified"]["pass_to_pass"] == 2  # only the selected tests ran

    pyproject.write_text(pyproject.read_text() + "max_candidatez = 3\n")
    bad = frognano("fix", str(project))
    assert bad.returncode == 2 and "unknown setting [tool.frognano] max_candidatez" in bad.stderr
    pyproject.write_text(pyproject.read_text().replace("max_candidatez = 3", 'timeout = "soon"'))
    bad = frognano("fix", str(project), "--json")
    assert bad.returncode == 2 and json.loads(bad.stdout)["status"] == "error"


def test_keyword_selection(example):
    project = example("calc")
    proc = frognano("fix", str(project), "-k", "mean", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "passing"
    none = frognano("fix", str(project), "-k", "nothing_matches_this")
    assert none.returncode == 2 and "no tests match -k" in none.stderr
    assert "exists, but pytest does not collect it" not in none.stderr
    # -k naming a file that pytest's python_files does not collect: said, not just "no tests".
    (project / "tests" / "checks_stats.py").write_text("def test_x():\n    assert True\n")
    uncollected = frognano("fix", str(project), "-k", "checks_stats.py")
    assert uncollected.returncode == 2, uncollected.stderr
    assert "tests/checks_stats.py exists, but pytest does not collect it" in uncollected.stderr
    assert "python_files" in uncollected.stderr


# -- bad input: a clear one-line message, the right exit code, nothing written ------------------

def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_path_that_is_not_a_project(tmp_path):
    missing = frognano("fix", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such directory" in _one_line_error(missing)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    empty = frognano("fix", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no Python files" in _one_line_error(empty)


def test_directory_with_no_tests(make_project):
    root = make_project({"mod.py": "def f():\n    return 1\n"})
    before = snapshot(root)
    proc = frognano("fix", str(root), "--json")
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["status"] == "error" and "no tests found" in out["message"]
    assert snapshot(root) == before


@pytest.mark.parametrize("source, needles", [
    # A syntax error is the source file's, at its line, not the test module's that imported it.
    ("def clamp(x):\n    return x\n\ndef broken(x:\n    return x\n",
     ["error: m.py:4: SyntaxError", "while collecting tests/test_m.py"]),
    # A missing package is most often the wrong interpreter: the hint names the setting.
    ("import not_installed_anywhere\n\ndef clamp(x):\n    return x\n",
     ["cannot collect tests/test_m.py", "ModuleNotFoundError", "lacks not_installed_anywhere",
      'set python = "', "[tool.frognano]"]),
    (b"NAME = 'caf\xe9'\n\ndef clamp(x):\n    return x\n",
     ["error: m.py:1: SyntaxError", "'utf-8' codec can't decode"]),
    # A missing module the project handles, then one it does not: the hint names the second.
    ("try:\n    import handled_missing_speedup\nexcept ImportError:\n    import really_missing_dependency\n\n"
     "def clamp(x):\n    return x\n",
     ["lacks really_missing_dependency", 'set python = "']),
], ids=["syntax-error", "collection-error", "non-utf8-imported", "missing-after-a-handled-one"])
def test_project_that_cannot_be_collected(make_project, source, needles):
    root = make_project({"tests/test_m.py": "from m import clamp\n\ndef test_c():\n    assert clamp(1) == 1\n"})
    (root / "m.py").write_bytes(source if isinstance(source, bytes) else source.encode())
    before = snapshot(root)
    proc = frognano("fix", str(root))
    assert proc.returncode == 1
    line = _one_line_error(proc)
    assert all(n in line for n in needles), line
    if not any("python =" in n for n in needles):
        assert "python =" not in line  # the hint is for missing modules only
    assert snapshot(root) == before


BUGGY = {
    "steps.py": """
        def count_down(n):
            steps = 0
            while n != 0:
                n -= 2
                steps += 1
            return steps
    """,
    "tests/test_steps.py": """
        from steps import count_down

        def test_even():
            assert count_down(4) == 4

        def test_odd():
            assert count_down(3) == 3

        def test_zero():
            assert count_down(0) == 0
    """,
}


@pytest.mark.slow
def test_hanging_tests_are_bounded_and_fixed(make_project):
    root = make_project(BUGGY)
    proc = frognano("fix", str(root), "--timeout", "1", "--json", timeout=120)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert set(out["failing"]) == {"tests/test_steps.py::test_even", "tests/test_steps.py::test_odd"}
    assert "`2` -> `1`" in out["fix"]["notes"][0]


def test_the_projects_compile_warnings_stay_out_of_json_mode(make_project):
    """Compiling the project's code (the syntax check of every candidate) raised its
    SyntaxWarnings in FrogNano's process, onto a stderr that --json keeps clean."""
    root = make_project({
        "m.py": "def is_one(x):\n    return x is 1\n\ndef add(a, b):\n    return a - b\n",
        "tests/test_m.py": "from m import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    })
    proc = frognano("fix", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "fixed"
    assert "SyntaxWarning" not in proc.stderr, proc.stderr


def test_test_that_kills_its_own_process(make_project):
    root = make_project({
        "m.py": "def one():\n    return 1\n",
        "tests/test_m.py": """
            import os, signal
            from m import one

            def test_kill():
                os.kill(os.getpid(), signal.SIGKILL)

            def test_one():
                assert one() == 1
        """,
    })
    proc = frognano("fix", str(root), "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "unfixed"
    assert out["failing"] == ["tests/test_m.py::test_kill"]
    human = frognano("fix", str(root))
    assert "the test process died while running this test (killed by SIGKILL)" in human.stdout


def test_non_utf8_file_that_tests_do_not_import(make_project):
    root = make_project({"calc.py": "def inc(x):\n    return x + 2\n",
                         "tests/test_calc.py": "from calc import inc\n\ndef test_inc():\n    assert inc(1) == 2\n"})
    (root / "legacy.py").write_bytes(b"NAME = '\xe9'\n")
    proc = frognano("fix", str(root))
    assert proc.returncode == 0
    assert "note: legacy.py is not valid UTF-8 and declares no encoding" in proc.stderr


def test_symlink_leading_out_of_the_project_is_never_edited(tmp_path):
    outside = write_project(tmp_path / "outside", {"shared.py": "def double(x):\n    return x * 3\n"})
    root = write_project(tmp_path / "proj", {
        "tests/test_shared.py": "from shared import double\n\ndef test_double():\n    assert double(2) == 4\n",
    })
    os.symlink(outside / "shared.py", root / "shared.py")
    before = (outside / "shared.py").read_bytes()
    proc = frognano("fix", str(root), "--apply")
    assert proc.returncode == 1
    assert "note: shared.py is a symlink leading out of the project" in proc.stderr
    assert (outside / "shared.py").read_bytes() == before


@contextlib.contextmanager
def _unwritable(folder: Path):
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    # root ignores permission bits; the immutable attribute stops even root.
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a folder unwritable here (no chattr support)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_unwritable_project_with_apply(example):
    project = example("calc")
    before = snapshot(project)
    with _unwritable(project / "calc"):
        proc = frognano("fix", str(project), "--apply")
    assert proc.returncode == 2
    line = _one_line_error(proc)
    assert "cannot write" in line and "nothing was written" in line
    assert snapshot(project) == before
