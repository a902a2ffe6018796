"""`frognano fix --model` with a real pretrained model (SmolLM2-135M-Instruct), search off: the
model's episode decides, and the command still keeps its contract (exit 0 or 1, never 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from frognano.repair.agent import EpisodeStatus

from ..conftest import CHILD_TIMEOUT, snapshot

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

# The operator search off, one short episode: 2 turns of at most 48 tokens.
BOUNDED = {"FROGNANO_MAX_CANDIDATES": "0", "FROGNANO_MAX_PAIRS": "0", "FROGNANO_EPISODES": "1",
           "FROGNANO_MAX_TURNS": "2", "FROGNANO_MAX_NEW_TOKENS": "48"}


def test_fix_with_the_real_model_reports_its_episode(smollm2_torch, example, tmp_path):
    root = example("calc")
    before = snapshot(root)
    done = subprocess.run([sys.executable, "-m", "frognano", "fix", str(root), "--model", f"torch:{smollm2_torch}",
                           "--json"], capture_output=True, text=True, timeout=CHILD_TIMEOUT, cwd=tmp_path,
                          env={**os.environ, **BOUNDED})
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["status"] == ("fixed" if done.returncode == 0 else "unfixed"), report
    assert report["search"]["candidates"] == 0  # the search was off: the model's episode decided
    (episode,) = report["episodes"]
    assert episode["status"] in {str(s) for s in EpisodeStatus} - {"model_error", "cancelled"}, episode
    assert 1 <= episode["turns"] <= 2 and episode["tokens_out"] > 0
    assert episode["status"] in report["message"] or report["status"] == "fixed"
    record = json.loads(open(episode["record"]).read())
    assert record["status"] == episode["status"] and len(record["turns"]) == episode["turns"]
    if report["status"] == "fixed":
        assert report["fix"]["source"] == "model"
    assert snapshot(root) == before  # without --apply nothing is written
