"""Full repair episodes through each real backend on a tiny random model.

A random model cannot fix anything; what these show is that every backend drives the harness
end to end and the episode ends cleanly (a named status, a record, never a crash): in-process
MLX and torch with constrained decoding (no malformed call), the same models unconstrained
(garbage, counted as malformed), and a real mlx_lm.server through the OpenAI-compatible backend.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from frognano.config import Settings
from frognano.repair.agent import EpisodeStatus
from frognano.repair.engine import Engine
from frognano.runtime.load import load_model
from frognano.sandbox.workspace import Workspace

from ..conftest import snapshot

CLEAN_END = set(EpisodeStatus) - {EpisodeStatus.MODEL_ERROR}
EPISODE = {"max_candidates": 0, "max_pairs": 0, "episodes": 1, "max_turns": 3, "max_new_tokens": 48}


def run(project, model, **settings):
    with Workspace(project) as ws, Engine(ws, Settings(**{**EPISODE, **settings}), model=model) as engine:
        return engine.fix()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mlx", "torch"])
@pytest.mark.parametrize("constrain", [True, False], ids=["constrained", "free"])
def test_full_episode_in_process(example, request, backend, constrain):
    model = request.getfixturevalue(f"{backend}_model")
    project = example("calc")
    before = snapshot(project)
    report = run(project, model, constrain=constrain)
    (episode,) = report.episodes
    assert episode.status in CLEAN_END, episode.error
    assert report.status in ("unfixed", "fixed") and report.exit_code in (0, 1)
    assert episode.turns and episode.tokens_in > 0 and episode.tokens_out > 0
    if constrain:
        assert episode.malformed == 0, [t.reply for t in episode.turns]
    else:
        assert episode.malformed > 0
    record = json.loads(episode.record.read_text())
    assert record["config"]["constrain"] is constrain and record["status"] == episode.status
    assert snapshot(project) == before


@pytest.mark.slow
def test_full_episode_through_mlx_lm_server(example, mlx_server):
    url, model_id = mlx_server
    model = load_model(f"openai:{model_id}@{url}")
    report = run(example("calc"), model)
    (episode,) = report.episodes
    assert episode.status in CLEAN_END, episode.error
    assert report.exit_code in (0, 1) and episode.tokens_in > 0


@pytest.mark.slow
def test_garbage_model_on_the_command_line_exits_1(example, tiny_torch):
    project = example("calc")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\n"
                         "max_turns = 3\nmax_new_tokens = 32\n")
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"torch:{tiny_torch}",
                           "--no-constrain", "--episodes", "1", "--json"], capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert out["status"] == "unfixed" and out["episodes"][0]["malformed"] > 0


@pytest.mark.slow
def test_exported_4bit_model_runs_an_episode(example, tiny_mlx, tmp_path):
    from frognano.runtime.export import export

    result = export(tiny_mlx, "mlx-4bit", tmp_path / "q4")
    model = load_model(f"mlx:{result.path}")
    try:
        report = run(example("calc"), model)
    finally:
        model.close()
    assert report.episodes[0].status in CLEAN_END and report.episodes[0].malformed == 0
