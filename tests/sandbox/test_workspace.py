import os
import subprocess

import pytest

from frognano.errors import UsageError
from frognano.sandbox.listing import list_project
from frognano.sandbox.workspace import Workspace


def test_shadow_holds_only_source_files(make_project):
    root = make_project({
        "pkg/__init__.py": "",
        "pkg/mod.py": "X = 1\n",
        "tests/test_mod.py": "def test_x(): pass\n",
        "node_modules/lib/index.js": "",
        "build/lib/pkg/mod.py": "",
        "pkg/__pycache__/mod.cpython-311.pyc": "",
        "pkg.egg-info/PKG-INFO": "",
        "env1/pyvenv.cfg": "home = /usr\n",
        "env1/lib/site.py": "",
        ".pytest_cache/v/x": "",
    })
    rels = {e.rel for e in list_project(root)}
    assert rels == {"pkg/__init__.py", "pkg/mod.py", "tests/test_mod.py"}


def test_git_ignore_rules_are_followed(make_project):
    root = make_project({"a.py": "", "secret.py": "", "data/big.bin": "", ".gitignore": "secret.py\ndata/\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    rels = {e.rel for e in list_project(root)}
    assert rels == {"a.py", ".gitignore"}


def test_shadow_lives_outside_the_project_and_syncs_incrementally(make_project, _private_cache):
    root = make_project({"a.py": "A = 1\n", "b.py": "B = 1\n"})
    with Workspace(root) as ws:
        first = ws.sync()
        assert first.copied == 2
        assert str(ws.shadow).startswith(str(_private_cache))
        assert not str(ws.shadow).startswith(str(root))
        again = ws.sync()
        assert (again.copied, again.unchanged) == (0, 2)
        (root / "a.py").write_text("A = 22\n")
        (root / "b.py").unlink()
        (root / "c.py").write_text("C = 3\n")
        third = ws.sync()
        assert (third.copied, third.removed, third.unchanged) == (2, 1, 0)
        assert (ws.shadow / "a.py").read_text() == "A = 22\n"
        assert not (ws.shadow / "b.py").exists()


def test_edits_are_reverted_and_never_reach_the_project(make_project):
    root = make_project({"a.py": "A = 1\n"})
    with Workspace(root) as ws:
        ws.sync()
        with ws.edited({"a.py": "A = 2\n"}):
            assert ws.read("a.py") == "A = 2\n"
            assert (root / "a.py").read_text() == "A = 1\n"
        assert ws.read("a.py") == "A = 1\n"


def test_a_crash_inside_an_edit_cannot_leave_the_shadow_stale(make_project):
    root = make_project({"a.py": "A = 1\n"})
    with Workspace(root) as ws:
        ws.sync()
        shadow = ws.shadow
        ws._mark_dirty({"a.py"})  # what edited() records before writing
        (shadow / "a.py").write_text("A = 999\n")  # ... and the process dies here
    with Workspace(root) as ws:
        ws.sync()
        assert ws.read("a.py") == "A = 1\n"


def test_edits_outside_the_project_are_refused(make_project, tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    root = make_project({"a.py": ""})
    os.symlink(outside, root / "link.py")
    with Workspace(root) as ws:
        stats = ws.sync()
        assert stats.external_links == ["link.py"]
        for bad in ("../outside.py", str(outside), "link.py"):
            with pytest.raises(UsageError):
                with ws.edited({bad: "SECRET = 2\n"}):
                    pass
    assert outside.read_text() == "SECRET = 1\n"


def test_two_sessions_get_two_shadows(make_project):
    root = make_project({"a.py": ""})
    with Workspace(root) as one, Workspace(root) as two:
        assert one.shadow != two.shadow


def test_not_a_project(tmp_path):
    with pytest.raises(UsageError, match="no such directory"):
        Workspace(tmp_path / "missing")
    (tmp_path / "file.py").write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        Workspace(tmp_path / "file.py")
