"""Which folder is the project: ``scope.project_root`` finds it the way pytest finds its rootdir."""

from __future__ import annotations

from pathlib import Path

from frognano.sandbox.scope import project_root


def _tree(root: Path, files: list[str]) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return root


def test_a_package_folder_belongs_to_the_project_above_it(tmp_path):
    root = _tree(tmp_path / "calc", ["pyproject.toml", "calc/__init__.py", "calc/sub/x.py", "tests/test_x.py"])
    assert project_root(root / "calc" / "sub") == root
    assert project_root(root / "tests") == root
    assert project_root(root) == root


def test_the_nearest_configuration_wins_and_the_walk_stops_at_a_repository(tmp_path):
    outer = _tree(tmp_path / "mono", ["pyproject.toml", "svc/setup.cfg", "svc/pkg/m.py", "lib/.git/HEAD", "lib/pkg/m.py"])
    assert project_root(outer / "svc" / "pkg") == outer / "svc"
    # A repository without any configuration file is its own project, not the monorepo above.
    assert project_root(outer / "lib" / "pkg") == outer / "lib"
    assert project_root(outer / "lib") == outer / "lib"


def test_without_configuration_the_topmost_conftest_then_the_folder(tmp_path):
    root = _tree(tmp_path / "p", ["conftest.py", "tests/conftest.py", "tests/unit/test_a.py", "src/m.py"])
    assert project_root(root / "tests" / "unit") == root
    bare = _tree(tmp_path / "bare", ["m.py"])
    assert project_root(bare) == bare


def test_the_spelling_of_the_folder_is_kept(tmp_path):
    real = _tree(tmp_path / "real", ["pyproject.toml", "pkg/m.py"])
    (tmp_path / "link").symlink_to(real)
    assert project_root(tmp_path / "link" / "pkg") == tmp_path / "link"
