"""`frognano cache` and `frognano cache clean`, run as a user runs them, on a private cache
(tests/conftest.py sets FROGNANO_CACHE_DIR) filled by real `frognano fix` runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from frognano.paths import cache_root, project_cache

from ..conftest import snapshot


def frognano(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=os.environ.copy())


def fixed(project: Path, *flags: str) -> Path:
    """Run a real `frognano fix` on ``project``; return its cache folder."""
    proc = frognano("fix", str(project), "--json", *flags)
    assert proc.returncode == 0, proc.stderr
    folder = project_cache(project)
    assert folder.is_dir()
    return folder


def listing() -> dict:
    proc = frognano("cache", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def file_bytes(paths) -> int:
    return sum(p.lstat().st_size for top in paths for p in [top, *top.rglob("*")]
               if p.is_symlink() or p.is_file())


def test_listing_shows_each_project_with_its_sizes_by_kind(example):
    project = example("calc")
    folder = fixed(project, "--apply")  # --apply also leaves an undo record

    out = listing()
    assert out["root"] == str(cache_root())
    [entry] = out["projects"]
    assert entry["folder"] == str(folder) and entry["project"] == str(project.resolve())
    assert not entry["in_use"]
    children = list(folder.iterdir())
    expected = {
        "shadow copies": file_bytes(p for p in children if p.name.startswith("shadow-") and not p.name.endswith(".runs")),
        "run logs": file_bytes(p for p in children if p.name.endswith(".runs")),
        "undo copies": file_bytes([folder / "undo"]),
        "project record": file_bytes([folder / "project.json"]),  # which project the folder is
    }
    assert all(n > 0 for n in expected.values()), expected
    assert entry["sizes"] == expected
    assert entry["total"] == out["total"] == sum(expected.values())

    human = frognano("cache", cwd=project)
    assert human.returncode == 0, human.stderr
    assert f"FrogNano cache: {cache_root()} (set by FROGNANO_CACHE_DIR)" in human.stdout
    assert f"projects/{folder.name}" in human.stdout and str(project.resolve()) in human.stdout
    assert "(this folder)" in human.stdout
    assert "shadow copies" in human.stdout and "run logs" in human.stdout and "undo copies" in human.stdout


@pytest.mark.slow
def test_clean_removes_the_current_folders_project_and_nothing_else(example):
    calc, inventory = example("calc"), example("inventory")
    calc_folder, other_folder = fixed(calc), fixed(inventory)
    (cache_root() / "notes.txt").write_text("the user's own file\n")
    kept = snapshot(other_folder)

    proc = frognano("cache", "clean", cwd=calc)  # PATH defaults to the current folder
    assert proc.returncode == 0, proc.stderr
    assert f"removed projects/{calc_folder.name}" in proc.stdout and "freed" in proc.stdout
    assert not calc_folder.exists()
    assert snapshot(other_folder) == kept
    assert (cache_root() / "notes.txt").read_text() == "the user's own file\n"
    assert sorted(p.name for p in cache_root().iterdir()) == ["notes.txt", "projects"], "no leftovers"
    assert [p["folder"] for p in listing()["projects"]] == [str(other_folder)]


def test_clean_refuses_when_nothing_matches(example, tmp_path):
    fixed(example("calc"))
    before = snapshot(cache_root())
    elsewhere = tmp_path / "never-fixed"
    elsewhere.mkdir()

    proc = frognano("cache", "clean", str(elsewhere))
    assert proc.returncode == 2
    assert f"nothing in the cache for {elsewhere}" in proc.stderr and "frognano cache" in proc.stderr
    assert snapshot(cache_root()) == before

    both = frognano("cache", "clean", "--all", str(elsewhere))
    assert both.returncode == 2 and "not both" in both.stderr
    assert snapshot(cache_root()) == before


@pytest.mark.slow
def test_clean_keeps_a_project_whose_shadow_copy_a_session_holds(example):
    from frognano.sandbox.workspace import Workspace

    project = example("calc")
    folder = fixed(project)
    # The lock a running `frognano serve` or `watch` holds for as long as it works on the project.
    with Workspace(project) as ws:
        ws.sync()
        before = snapshot(folder)
        assert listing()["projects"][0]["in_use"] is True
        proc = frognano("cache", "clean", str(project))
        assert proc.returncode == 2
        assert f"kept projects/{folder.name}" in proc.stderr and "serve" in proc.stderr
        assert snapshot(folder) == before

        everything = frognano("cache", "clean", "--all")
        assert everything.returncode == 2 and "kept" in everything.stderr
        assert snapshot(folder) == before
    proc = frognano("cache", "clean", str(project))
    assert proc.returncode == 0, proc.stderr
    assert not folder.exists()


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.slow
def test_clean_removes_trees_exported_from_a_repository_and_all_clears_the_rest(example, tmp_path):
    from frognano.sandbox.workspace import Workspace
    from frognano.training.env import git_tree

    repo = example("calc")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    sha = git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "stats.py").write_text((repo / "calc" / "stats.py").read_text() + "\n# edited\n")
    # What `frognano eval` does for a task based on a commit the work tree no longer matches.
    tree = git_tree(repo, sha, cache_root() / "trees")
    assert tree.parent == cache_root() / "trees"
    with Workspace(tree) as ws:
        ws.sync()
    other = fixed(example("inventory"))
    (cache_root() / "my-notes").mkdir()
    (cache_root() / ".removing-old-1-ab").mkdir()  # what an interrupted clean leaves

    out = listing()
    assert [(t["source"], t["commit"]) for t in out["trees"]] == [(str(repo.resolve()), sha)]
    assert out["leftovers"][0]["folder"].endswith(".removing-old-1-ab")
    assert [o["path"] for o in out["other"]] == [str(cache_root() / "my-notes")]

    proc = frognano("cache", "clean", str(repo))
    assert proc.returncode == 0, proc.stderr
    assert not tree.exists() and not project_cache(tree).exists()
    assert other.is_dir(), "another project's entries stay"

    everything = frognano("cache", "clean", "--all")
    assert everything.returncode == 0, everything.stderr
    assert not other.exists() and not (cache_root() / ".removing-old-1-ab").exists()
    assert (cache_root() / "my-notes").is_dir(), "what FrogNano did not make is never removed"
    again = frognano("cache", "clean", "--all")
    assert again.returncode == 2 and "nothing to remove" in again.stderr


def test_clean_accepts_a_listed_folder_of_a_deleted_project(example):
    project = example("calc")
    folder = fixed(project)
    shutil.rmtree(project)
    proc = frognano("cache", "clean", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert not folder.exists()


def test_an_empty_cache_is_shown_as_such_and_clean_all_refuses():
    shown = frognano("cache")
    assert shown.returncode == 0, shown.stderr
    assert f"FrogNano cache: {cache_root()} (set by FROGNANO_CACHE_DIR), 0 B in all" in shown.stdout
    assert "empty" in shown.stdout
    refused = frognano("cache", "clean", "--all")
    assert refused.returncode == 2 and "nothing to remove" in refused.stderr


def test_help_explains_the_cache_and_clean():
    shown = frognano("cache", "--help")
    assert shown.returncode == 0
    assert "FROGNANO_CACHE_DIR" in shown.stdout and "shadow copies" in shown.stdout and "clean" in shown.stdout
    clean = frognano("cache", "clean", "--help")
    assert clean.returncode == 0
    text = " ".join(clean.stdout.split())
    for needle in ("--all", "default: the current folder", "serve", "Exits 2 when nothing matches"):
        assert needle in text, needle


def test_clean_all_keeps_a_gguf_import_under_way_and_removes_a_killed_one():
    """What ``runtime/gguf.py`` leaves in models/ while it converts: a staging folder whose lock
    the importing process holds (kept), or, killed, one nobody holds (removed).  The whole
    route, a real import listed and cleaned, is tests/runtime/test_gguf.py's cache test."""
    import fcntl

    models = cache_root() / "models"
    running, killed = models / ".smol-ab12-torch.x1", models / ".smol-ab12-torch.x2"
    for folder in (running, killed):
        (folder / "model").mkdir(parents=True)
        (folder / "model" / "model.safetensors").write_bytes(b"\0" * 1000)
    fd = os.open(running, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        entries = {Path(m["folder"]).name: m for m in listing()["models"]}
        assert entries[running.name]["in_use"] and not entries[running.name]["finished"]
        assert not entries[killed.name]["in_use"] and entries[killed.name]["size"] == 1000
        shown = frognano("cache")
        assert f"models/{running.name}" in shown.stdout and "an import under way" in shown.stdout
        assert "an import that never finished" in shown.stdout

        proc = frognano("cache", "clean", "--all")
        assert proc.returncode == 2 and f"kept models/{running.name}: an import is writing it" in proc.stderr
        assert f"removed models/{killed.name}" in proc.stdout
        assert running.is_dir() and not killed.exists()
    finally:
        os.close(fd)
    proc = frognano("cache", "clean", str(running))  # a listed folder, once its import has ended
    assert proc.returncode == 0, proc.stderr
    assert not running.exists()


def test_help_names_the_imported_models():
    shown = frognano("cache", "--help")
    assert "models/" in shown.stdout and "torch:FILE.gguf" in shown.stdout
    clean = frognano("cache", "clean", "--help")
    assert "GGUF" in clean.stdout and "imported model" in clean.stdout
