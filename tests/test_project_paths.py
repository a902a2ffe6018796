"""``frognano/project_paths.py``: the one set of path rules, and the faces that must agree on it.

The agreement tests ask each face its own question about the same tree — the language server
(a file-watcher event, an editor overlay), ``frognano watch`` (a file event) and the shadow
copy's listing — and require one answer, custom-named virtualenvs (a folder with a
``pyvenv.cfg``) included.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from lsprotocol import types
from rich.console import Console
from watchdog.events import FileModifiedEvent

from frognano import project_paths
from frognano.cli.watch import _Watcher
from frognano.config import Settings
from frognano.project_paths import (
    file_signature,
    ignored_dir,
    ignored_path,
    is_test_code,
    is_test_file,
    is_test_module,
    is_virtualenv,
    nodeid_file,
)
from frognano.sandbox.listing import list_project
from frognano.sandbox.process import WORKER_DIR
from frognano.sandbox.specification import Specification
from frognano.sandbox.workspace import Workspace
from frognano.server import convert, documents, jobs

# -- ignored folders -----------------------------------------------------------------------------


def test_ignored_dir_by_name_and_any_virtualenv(tmp_path):
    for name in (".git", "__pycache__", "node_modules", ".venv", "venv", "build", ".frognano", "pkg.egg-info"):
        assert ignored_dir(tmp_path / name), name
    env = tmp_path / "py312"  # a virtualenv by any name: its pyvenv.cfg says so
    env.mkdir()
    assert not ignored_dir(env) and not is_virtualenv(env)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert ignored_dir(env) and is_virtualenv(env)
    assert ignored_dir(str(env), "py312")  # as os.scandir gives it
    assert not ignored_dir(tmp_path / "src") and not ignored_dir(tmp_path / "envy")


def test_ignored_path_judges_the_folders_above_a_path_only(tmp_path):
    (tmp_path / "pkg" / "env").mkdir(parents=True)
    (tmp_path / "pkg" / "env" / "pyvenv.cfg").write_text("")
    assert ignored_path(tmp_path, "pkg/env/lib/site.py")  # a nested virtualenv
    assert ignored_path(tmp_path, ".venv/lib/x.py") and ignored_path(tmp_path, "a/b.egg-info/PKG-INFO")
    assert not ignored_path(tmp_path, "pkg/a.py") and not ignored_path(tmp_path, "pkg/build")  # a file called build
    assert not ignored_path(tmp_path, "pkg/env")  # the folder itself is the caller's to judge
    seen: dict[str, bool] = {}
    assert ignored_path(tmp_path, "pkg/env/x.py", seen=seen) and seen == {"pkg": False, "pkg/env": True}
    (tmp_path / "pkg" / "env" / "pyvenv.cfg").unlink()
    assert ignored_path(tmp_path, "pkg/env/y.py", seen=seen)  # answered from ``seen``: no stat
    assert not ignored_path(tmp_path, "pkg/env/y.py")


# -- test files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rel, module, file, code", [
    ("tests/test_a.py", True, True, True),
    ("pkg/a_test.py", True, True, True),
    ("test_.py", True, True, True),
    ("tests/helpers.py", False, True, True),  # under a tests folder: test code, not collected
    ("testing/data.json", False, True, True),
    ("test_data.json", False, True, True),
    ("conftest.py", False, True, True),
    ("test_utils/helpers.py", False, False, True),  # a test glob matches its path: protected
    ("pkg/test_x/m.py", False, False, True),
    ("pkg/stats.py", False, False, False),
    ("pkg/contest.py", False, False, False),
    ("tests\\test_win.py", True, True, True),
])
def test_three_questions_about_test_files(rel, module, file, code):
    assert (is_test_module(rel), is_test_file(rel), is_test_code(rel)) == (module, file, code)


def test_test_modules_follow_the_projects_python_files():
    globs = ("check_*.py",)
    assert is_test_module("pkg/check_x.py", globs) and not is_test_module("pkg/test_x.py", globs)
    assert is_test_code("pkg/check_x.py", globs) and not is_test_module("check_x.txt", globs)
    # a glob with a slash is matched against the path, at the top or below a folder, as pytest does
    assert is_test_module("suite/t_a.py", ["suite/t_*.py"]) and is_test_module("x/suite/t_a.py", ["suite/t_*.py"])
    assert not is_test_module("t_a.py", ["suite/t_*.py"])
    spec = Specification.load(lambda rel: '[pytest]\npython_files = check_*.py\n' if rel == "pytest.ini" else None,
                              ["other/probe.py::test_x"])
    assert spec.is_test("pkg/check_x.py") and spec.is_test("pkg/test_y.py") and spec.is_test("other/probe.py")
    assert not spec.is_test("pkg/stats.py")


def test_nodeid_file():
    assert nodeid_file("tests/t.py::Cls::test_x[a::b]") == "tests/t.py"
    assert nodeid_file("tests/t.py") == "tests/t.py"
    assert convert.nodeid_file is nodeid_file  # the server's diagnostics use the same


def test_the_test_worker_loads_the_same_rule_without_frognano(tmp_path):
    """The worker runs in the project's interpreter, which need not have FrogNano: it loads
    ``project_paths.py`` by its path, and answers as FrogNano does."""
    rels = ["tests/x.py", "pkg/m.py", "conftest.py", "test_data.json", "a/b_test.py", "testing/d.txt"]
    script = ("import json, sys; sys.path[:0] = [sys.argv[1]]; import frognano_paths, frognano_reads; "
              "print(json.dumps([[frognano_paths.is_test_file(r) for r in sys.argv[2:]], "
              "sorted(m for m in sys.modules if m.split('.')[0] == 'frognano')]))")
    out = subprocess.run([sys.executable, "-I", "-c", script, str(WORKER_DIR), *rels], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    answers, frognano_modules = json.loads(out)
    assert answers == [is_test_file(r) for r in rels]
    assert frognano_modules == []  # frognano itself was never imported there


# -- file signatures -----------------------------------------------------------------------------


def test_file_signature(tmp_path):
    path = tmp_path / "m.py"
    assert file_signature(path) is None
    path.write_text("x = 1\n")
    first = file_signature(path)
    assert first == file_signature(str(path)) and first[0] == 6
    os.utime(path, ns=(1, 1))
    assert file_signature(path) != first
    link = tmp_path / "link.py"
    link.symlink_to(path)
    assert file_signature(link) == file_signature(path)  # what a reader of the link gets


# -- the faces agree ----------------------------------------------------------------------------

PATHS = {  # project-relative .py file -> ignored
    "pkg/a.py": False,
    "tests/test_a.py": False,
    "envy/x.py": False,  # a name like a virtualenv's, no pyvenv.cfg: the project's
    ".venv/lib/site.py": True,
    "venv/lib/site.py": True,
    "env/lib/site.py": True,  # a custom-named virtualenv: pyvenv.cfg
    "pkg/py312/lib/site.py": True,  # a nested one
    "build/lib/pkg/a.py": True,
    "node_modules/x/y.py": True,
    "pkg.egg-info/z.py": True,
    ".frognano/state.py": True,
}


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "proj"
    for rel in PATHS:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    for venv in ("env", "pkg/py312", ".venv", "venv"):
        (root / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    return root


def server_runs_tests_for(root: Path, rel: str, monkeypatch) -> bool:
    """Whether the language server treats a change on disk of ``rel`` as the project's
    (``workspace/didChangeWatchedFiles``: the state moves on and the tests are asked for)."""
    project = SimpleNamespace(root=root, state=0)
    asked: list[set[str]] = []
    monkeypatch.setattr(documents.fixes, "record_if_saved", lambda ls, p: None)
    monkeypatch.setattr(documents.fixes, "edit_arrived", lambda ls, p: False)
    monkeypatch.setattr(documents.diagnostics, "request_tests", lambda ls, p, files: asked.append(files))
    ls = SimpleNamespace(locate=lambda uri: (project, convert.uri_to_path(uri).relative_to(root).as_posix()),
                         workspace=SimpleNamespace(text_documents={}), spawn=lambda coro: coro.close())
    change = types.FileEvent(uri=convert.path_to_uri(root / rel), type=types.FileChangeType.Changed)
    documents.did_change_watched_files(ls, types.DidChangeWatchedFilesParams(changes=[change]))
    assert bool(asked) == bool(project.state)
    return asked == [{rel}]


def watch_runs_tests_for(root: Path, rel: str) -> bool:
    """Whether ``frognano watch`` takes a modification of ``rel`` as a change to run tests for."""
    console = Console(file=io.StringIO())
    watcher = _Watcher(Workspace(root), Settings(), apply=False, console=console, errors=console, debounce=0.1)
    return watcher._relevant(FileModifiedEvent(str(root / rel))) == [rel]


def test_server_watch_and_shadow_agree_on_ignored_paths(tree, monkeypatch):
    listed = {e.rel for e in list_project(tree)}
    for rel, ignored in PATHS.items():
        answers = {
            "project_paths": not ignored_path(tree, rel),
            "server (watched files)": server_runs_tests_for(tree, rel, monkeypatch),
            "server (editor overlay)": jobs.overlay_path(tree, rel),
            "watch": watch_runs_tests_for(tree, rel),
            "shadow copy": rel in listed,
        }
        assert set(answers.values()) == {not ignored}, (rel, answers)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_virtualenv_git_would_list_stays_out_of_the_shadow(tree):
    """git lists an untracked virtualenv that has no ``.gitignore`` of its own (``python -m
    venv`` before 3.13): the listing drops it all the same."""
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    git = subprocess.run(["git", "-C", str(tree), "ls-files", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert "env/lib/site.py" in git
    listed = {e.rel for e in list_project(tree)}
    assert {rel for rel in PATHS if rel in listed} == {rel for rel, ignored in PATHS.items() if not ignored}


def test_one_definition_of_each_rule():
    """The rules live in project_paths only: no face keeps a copy of the ignored names, of the
    virtualenv marker or of the node id split."""
    package = Path(project_paths.__file__).parent
    copies = [f"{p.relative_to(package)}: {marker}" for p in package.rglob("*.py") if p.name != "project_paths.py"
              for marker in ('"node_modules"', '"pyvenv.cfg"', 'split("::", 1)[0]') if marker in p.read_text()]
    assert copies == []
