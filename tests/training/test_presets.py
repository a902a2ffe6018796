"""The presets' repositories: held-out projects from benchmarks/realbugs, laid out green."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from frognano.errors import UsageError
from frognano.training.presets import realbug_repos, realbugs_corpus, resolve_heldout


def test_realbugs_entries_become_green_copies_and_paths_pass_through(tmp_path):
    (repo,) = resolve_heldout(["realbugs:01-*"], tmp_path / "held")
    assert repo == tmp_path / "held" / "01-timesheet-key"
    # The corrected file replaced the buggy one, and the suite passes.
    case = realbugs_corpus() / "01-timesheet-key"
    assert (repo / "timesheet" / "hours.py").read_text() == (case / "correct" / "timesheet" / "hours.py").read_text()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    # Made once: a second call keeps the copy (and what a run wrote into it).
    (repo / "marker").write_text("kept")
    assert realbug_repos("01-*", tmp_path / "held") == [repo] and (repo / "marker").exists()
    assert resolve_heldout([str(tmp_path / "mine")], tmp_path / "held") == [tmp_path / "mine"]
    assert len(resolve_heldout(["realbugs:0[1-9]-*", "realbugs:1[0-2]-*"], tmp_path / "held")) == 12
    with pytest.raises(UsageError, match="no case of benchmarks/realbugs matches"):
        resolve_heldout(["realbugs:99-*"], tmp_path / "held")


def test_bundled_examples_are_repaired_once_and_kept_in_the_cache(tmp_path, monkeypatch):
    """Every training run used to repair each bundled example again; the repaired tree is kept in
    the cache by the example's content (``frognano cache`` lists it), and a changed example is
    repaired anew."""
    import shutil

    from frognano import cache
    from frognano.training import presets

    from ..conftest import EXAMPLES

    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES / "calc", examples / "calc", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(presets, "bundled_examples", lambda: examples)
    first = presets.example_repos(tmp_path / "run1")
    (tree,) = [t for t in cache.inventory().trees]
    assert tree.folder.name.startswith("calc-repaired-") and tree.source == Path(f"{examples / 'calc'} (repaired)")
    assert "return age >= 18" in (first[0] / "calc" / "stats.py").read_text()  # the example's bug, fixed
    phases = []

    class Recorder(presets.Silent):
        def phase(self, title, total=None):
            phases.append(title)

    second = presets.example_repos(tmp_path / "run2", Recorder())
    assert phases == [] and (second[0] / "calc" / "stats.py").read_text() == (first[0] / "calc" / "stats.py").read_text()
    assert not (second[0] / ".frognano-tree").exists() and (second[0] / ".frognano-green").exists()
    (examples / "calc" / "README.md").write_text("changed\n")
    presets.example_repos(tmp_path / "run3", Recorder())
    assert phases == ["repairing the bundled example calc"] and len(cache.inventory().trees) == 2
