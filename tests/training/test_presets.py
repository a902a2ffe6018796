"""The presets' repositories: held-out projects from benchmarks/realbugs, laid out green."""

from __future__ import annotations

import subprocess
import sys

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
